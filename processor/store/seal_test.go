package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/processor/store/storetest"
	"github.com/interlockhq/interlock/subjects"
)

var sealKey = bytes.Repeat([]byte{7}, 32)

// TestSealRecordOpensOnlyAsItsRun: a copy opens under its key as the
// record of its own run, and nowhere else: another run's copy, another
// key, a changed byte, another version are refused with ErrSeal.
func TestSealRecordOpensOnlyAsItsRun(t *testing.T) {
	t.Parallel()
	rec := &subjects.Run{Version: subjects.Version, RunID: "r1", Agent: "refunds", Status: subjects.RunSuspended,
		Input: json.RawMessage(`{"secret":"s3cret"}`), Writes: 4}
	sealed, err := store.SealRecord(sealKey, rec)
	require.NoError(t, err)
	assert.NotContains(t, sealed, "s3cret")
	opened, err := store.OpenRecord(sealKey, "r1", sealed)
	require.NoError(t, err)
	assert.Equal(t, rec, opened)

	raw, err := base64.StdEncoding.DecodeString(sealed)
	require.NoError(t, err)
	plain, err := json.Marshal(rec)
	require.NoError(t, err)
	assert.Len(t, raw, len(plain)+1+12+16, "the copy's length tells the record's and nothing else (no compression)")
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-1] ^= 1
	version := bytes.Clone(raw)
	version[0] = 2
	for name, c := range map[string]struct {
		key    []byte
		run    string
		sealed string
	}{
		"another run":    {sealKey, "r2", sealed},
		"another key":    {bytes.Repeat([]byte{8}, 32), "r1", sealed},
		"a changed byte": {sealKey, "r1", base64.StdEncoding.EncodeToString(flipped)},
		"a version":      {sealKey, "r1", base64.StdEncoding.EncodeToString(version)},
		"not base64":     {sealKey, "r1", "%%%"},
		"too short":      {sealKey, "r1", base64.StdEncoding.EncodeToString(raw[:10])},
	} {
		_, err := store.OpenRecord(c.key, c.run, c.sealed)
		assert.ErrorIs(t, err, store.ErrSeal, name)
	}
}

// FuzzOpenRecord: whatever a sealed copy holds, opening it returns a
// record of the run asked for or ErrSeal, and never panics.
func FuzzOpenRecord(f *testing.F) {
	sealed, err := store.SealRecord(sealKey, &subjects.Run{RunID: "r1", Writes: 1})
	require.NoError(f, err)
	f.Add("r1", sealed)
	f.Add("r1", "")
	f.Add("r1", "AQ==")
	f.Fuzz(func(t *testing.T, run, s string) {
		r, err := store.OpenRecord(sealKey, run, s)
		if err != nil {
			require.ErrorIs(t, err, store.ErrSeal)
			return
		}
		require.Equal(t, run, r.RunID)
	})
}

// sealingStore is a JetStream store over a server whose runs bucket keeps
// the records in memory, sealing copies with sealKey, and an admin
// connection to the same server.
func sealingStore(t *testing.T) (*store.JetStream, *jetstream.Client, natsjs.JetStream) {
	t.Helper()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	s := store.NewJetStream(c)
	s.UseRecordKey(sealKey, true, true)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	return s, c, js
}

// TestJetStreamSealing: a store that seals records keeps every promise of
// a Store.
func TestJetStreamSealing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		s, c, _ := sealingStore(t)
		return storetest.Backend{Store: s, Suspend: func(t *testing.T, run string) uint64 {
			subject, err := c.Namespace().Suspended("refunds", run)
			require.NoError(t, err)
			ack, err := c.Publish(context.Background(), subject, []byte(`{}`), run+":"+uuid.NewString(), nil) // with an id, as a worker
			require.NoError(t, err)
			return ack.Sequence
		}}
	})
}

func transition(run string, writes uint64, dedup string) store.Effects {
	rec := &subjects.Run{Version: subjects.Version, RunID: run, Agent: "refunds", Status: subjects.RunSuspended,
		Pass: int(writes), Writes: writes}
	return store.Effects{Record: rec, Events: []store.Event{{Event: subjects.Event{Version: subjects.Version,
		Type: subjects.EventSuspended, RunID: run, Agent: "refunds", Pass: int(writes), At: time.Now()}, Dedup: dedup}}}
}

// TestSealedCopyStoredBeforeTheEffects: when the event carrying a record's
// copy cannot be stored, nothing else the change caused is (a replay's
// work item above all): otherwise a server restart would leave work whose
// cause no record remembers.
func TestSealedCopyStoredBeforeTheEffects(t *testing.T) {
	t.Parallel()
	s, c, js := sealingStore(t)
	ctx := context.Background()
	// The events stream refuses the copy's event (the server does, after
	// the client sent everything it was given together).
	st, err := js.Stream(ctx, c.StreamName(jetstream.StreamEvents))
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 2048
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	fx := transition("r1", 1, "pass1")
	big := make([]byte, 4096)
	_, _ = rand.Read(big)
	fx.Record.Input, _ = json.Marshal(base64.StdEncoding.EncodeToString(big))
	work, err := c.Namespace().Work("refunds")
	require.NoError(t, err)
	fx.Messages = []jetstream.OutMsg{{Subject: work, Data: []byte(`{}`), MsgID: "r1:work"}}
	require.Error(t, s.Commit(context.Background(), fx))
	n, err := c.MsgCount(context.Background(), jetstream.StreamWork)
	require.NoError(t, err)
	assert.Zero(t, n, "a work item stored without its cause's copy")

	fx = transition("r1", 1, "pass1")
	require.ErrorContains(t, s.Commit(context.Background(), store.Effects{Record: fx.Record}), "without an event")
}

// TestRecordPutBackByMostWrites: the copy put back is the one with the most
// writes, whichever order the events were stored in (two coordinators'),
// both when the record is read (restoreRun) and when the whole bucket is
// restored; a run with no copy is new.
func TestRecordPutBackByMostWrites(t *testing.T) {
	t.Parallel()
	s, c, js := sealingStore(t)
	ctx := context.Background()
	// Each write as the coordinator makes it: the record, then its effects.
	write := func(fx store.Effects) {
		t.Helper()
		_, rev, err := s.Run(ctx, fx.Record.RunID)
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
		}
		_, err = s.PutRun(ctx, fx.Record, rev)
		require.NoError(t, err)
		require.NoError(t, s.Commit(ctx, fx))
	}
	for _, w := range []uint64{1, 3, 2} {
		write(transition("r1", w, "w"+string(rune('0'+w))))
	}
	write(transition("r2", 1, "w1"))
	purge := func() {
		st, err := js.Stream(ctx, c.BucketStreamName(jetstream.RunsBucket))
		require.NoError(t, err)
		require.NoError(t, st.Purge(ctx))
	}
	purge()
	rec, _, err := s.Run(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), rec.Writes)
	assert.Equal(t, 3, rec.Pass)
	_, _, err = s.Run(ctx, "new")
	assert.ErrorIs(t, err, store.ErrNotFound)

	purge()
	r, err := s.RestoreRecords(ctx, "test", time.Now(), nil)
	require.NoError(t, err)
	assert.True(t, r.Ran && r.Whole)
	assert.Equal(t, 2, r.Runs)
	runs, err := s.Runs(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 2, "the bucket's marker is no record")
	for _, r := range runs {
		want := map[string]uint64{"r1": 3, "r2": 1}[r.RunID]
		assert.Equal(t, want, r.Writes, r.RunID)
	}
	r, err = s.RestoreRecords(ctx, "test", time.Now(), nil)
	require.NoError(t, err)
	assert.False(t, r.Ran, "marked whole")
	assert.True(t, r.Whole)
	assert.False(t, strings.Contains(runs[0].RunID, "."), "no marker among the runs")
}

// TestCopyTooLargeForItsEventGoesAlone: a record that fits, under an event
// whose own fields are long (a failure's whole error), would make the
// event with the copy too large for the server: the copy goes first in a
// recorded event of its own, and the event after it without (found by
// review: the input was refused on every delivery, the record left with
// no copy).
func TestCopyTooLargeForItsEventGoesAlone(t *testing.T) {
	t.Parallel()
	s, c, _ := sealingStore(t)
	ctx := context.Background()
	fx := transition("r1", 1, "pass1")
	fx.Record.Error = strings.Repeat("e", 520<<10) // the record fits; with the copy beside it, the event would not
	fx.Events[0].Type, fx.Events[0].Detail = subjects.EventFailed, fx.Record.Error
	_, err := s.PutRun(ctx, fx.Record, 0)
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx, fx))
	filter, err := c.Namespace().RunEvents("r1")
	require.NoError(t, err)
	msgs, err := c.Messages(ctx, jetstream.StreamEvents, filter, 1, 10)
	require.NoError(t, err)
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("%s copy=%v", m.Subject, bytes.Contains(m.Data, []byte(`"record":"`))))
	}
	assert.Equal(t, []string{"interlock.events.r1.recorded copy=true", "interlock.events.r1.failed copy=false"}, got)
}
