package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// TestWrittenHoldsOnlyUncheckedWrites: the revisions a sealing store keeps
// for its read-back check (holds) are dropped once checked, whichever way
// the check goes, so the map holds the writes in flight and is never
// emptied under one in flight for having filled with checked ones.
func TestWrittenHoldsOnlyUncheckedWrites(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	s := NewJetStream(c)
	s.UseRecordKey(bytes.Repeat([]byte{7}, 32), true, true)
	ctx := context.Background()
	for i := range 5 {
		run := fmt.Sprintf("r%d", i)
		rec := &subjects.Run{Version: subjects.Version, RunID: run, Agent: "refunds", Status: subjects.RunSuspended,
			Pass: 1, Writes: 1, UpdatedAt: time.Now()}
		if _, err := s.PutRun(ctx, rec, 0); err != nil {
			t.Fatal(err)
		}
		fx := Effects{Record: rec, Events: []Event{{Event: subjects.Event{Version: subjects.Version,
			Type: subjects.EventSuspended, RunID: run, Agent: "refunds", Pass: 1, At: rec.UpdatedAt}, Dedup: "pass1"}}}
		if err := s.Commit(ctx, fx); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	n := len(s.written)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d checked writes still kept for the check", n)
	}
}
