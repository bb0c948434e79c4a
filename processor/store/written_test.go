package store

import (
	"bytes"
	"context"
	"errors"
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

// TestStaleCopyNotPutBackAfterTheTrailMoved: a put-back chooses its copy
// from the trail, then writes it over the answer on the key. A change that
// stored its own copy in between (and passed its check, its effects out)
// must not be rolled back by that older copy when another answer lands
// before the put-back's write: under a flood the compare-and-set kept
// failing and was tried again with the copy chosen first, for up to 20
// attempts. Now a put-back over an answer is one attempt, made only while
// the run's trail still ends where the copy was chosen (ErrContended
// otherwise: the input comes again). Found by the third review of record
// copies on disk.
func TestStaleCopyNotPutBackAfterTheTrailMoved(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	s := NewJetStream(c)
	s.UseRecordKey(bytes.Repeat([]byte{7}, 32), false, false)
	ctx := context.Background()
	write := func(writes uint64, rev uint64) uint64 {
		rec := &subjects.Run{Version: subjects.Version, RunID: "r1", Agent: "refunds", Status: subjects.RunSuspended,
			Writes: writes, UpdatedAt: time.Now()}
		next, err := s.PutRun(ctx, rec, rev)
		if err != nil {
			t.Fatal(err)
		}
		fx := Effects{Record: rec, Events: []Event{{Event: subjects.Event{Version: subjects.Version,
			Type: subjects.EventReminded, RunID: "r1", Agent: "refunds", At: rec.UpdatedAt}, Dedup: fmt.Sprintf("w%d", writes)}}}
		if err := s.Commit(ctx, fx); err != nil {
			t.Fatal(err)
		}
		return next
	}
	rev := write(1, 0)
	stale, read, err := s.latestCopy(ctx, "r1", true, true)
	if err != nil || stale == nil || stale.Writes != 1 {
		t.Fatalf("copy 1 chosen: %+v %v", stale, err)
	}
	write(2, rev) // the change that wins, its copy stored, its check passed
	answer := func() {
		if _, err := c.Publish(ctx, "$KV."+c.BucketName(jetstream.RunsBucket)+".r1", []byte(`{}`), "", nil); err != nil {
			t.Fatal(err)
		}
	}
	answer()
	_, _, err = s.putBack(ctx, stale, putBackAt{overForeign: true, trail: read})
	if !errors.Is(err, ErrContended) {
		t.Fatalf("the copy chosen before write 2 was put back over the answer (err %v)", err)
	}
	if _, _, err := runEntry(ctx, s.runs, "r1"); !errors.Is(err, ErrForeignRecord) {
		t.Fatalf("the key holds a record after a refused put-back: %v", err)
	}
	got, _, err := s.Run(ctx, "r1") // the input, come again: the latest copy
	if err != nil || got.Writes != 2 {
		t.Fatalf("put back: %+v %v, want write 2", got, err)
	}
}
