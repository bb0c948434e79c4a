// Package storetest is the conformance suite of store.Store: what every
// implementation must do, run against the JetStream store and the memory
// store alike. Another implementation passes it by calling Run from a test
// with a function that returns a fresh, empty store.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Run runs the suite; open returns a fresh, empty store for each test.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"RunNotFound", runNotFound},
		{"CompareAndSet", compareAndSet},
		{"UpdateUnderContention", updateUnderContention},
		{"UpdateWritesNothing", updateWritesNothing},
		{"RunsInUpdateOrder", runsInUpdateOrder},
		{"PendingIndex", pendingIndex},
		{"IndexPutRepeatedAfterRemoval", indexPutRepeatedAfterRemoval},
		{"EventsOncePerKey", eventsOncePerKey},
		{"EventsWithoutRun", eventsWithoutRun},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func record(id string, updated time.Time) *subjects.Run {
	return &subjects.Run{Version: 1, RunID: id, Agent: "refunds", Status: subjects.RunSuspended,
		Interrupts: []subjects.InterruptState{}, CreatedAt: t0, UpdatedAt: updated}
}

func runNotFound(t *testing.T, s store.Store) {
	_, _, err := s.Run(ctx(t), "nope")
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func compareAndSet(t *testing.T, s store.Store) {
	r := record("r1", t0)
	rev, err := s.PutRun(ctx(t), r, 0)
	require.NoError(t, err)
	assert.NotZero(t, rev)
	_, err = s.PutRun(ctx(t), r, 0)
	assert.ErrorIs(t, err, store.ErrConflict, "creating an existing record")

	r.Pass = 1
	rev2, err := s.PutRun(ctx(t), r, rev)
	require.NoError(t, err)
	assert.Greater(t, rev2, rev)
	r.Pass = 2
	_, err = s.PutRun(ctx(t), r, rev)
	assert.ErrorIs(t, err, store.ErrConflict, "writing at a stale revision")

	got, gotRev, err := s.Run(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, rev2, gotRev)
	assert.Equal(t, 1, got.Pass, "the losing write changed nothing")
	got.Pass = 9
	again, _, err := s.Run(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, 1, again.Pass, "a record read is the caller's own copy")
}

// updateUnderContention has writers race on one record: every change is
// applied exactly once.
func updateUnderContention(t *testing.T, s store.Store) {
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Go(func() {
			for range each {
				_, err := store.Update(ctx(t), s, "r1", func(rec *subjects.Run) (*subjects.Run, error) {
					if rec == nil {
						rec = record("r1", t0)
						rec.Pass = 0
					}
					next := *rec
					next.Pass++
					return &next, nil
				})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got, _, err := s.Run(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, writers*each, got.Pass, "each change applied once")
}

func updateWritesNothing(t *testing.T, s store.Store) {
	calls := 0
	next, err := store.Update(ctx(t), s, "r1", func(rec *subjects.Run) (*subjects.Run, error) {
		calls++
		assert.Nil(t, rec, "no record yet")
		return nil, nil
	})
	require.NoError(t, err)
	assert.Nil(t, next)
	assert.Equal(t, 1, calls)
	_, _, err = s.Run(ctx(t), "r1")
	assert.ErrorIs(t, err, store.ErrNotFound, "nothing was written")

	boom := fmt.Errorf("refused")
	_, err = store.Update(ctx(t), s, "r1", func(*subjects.Run) (*subjects.Run, error) { return record("r1", t0), boom })
	assert.ErrorIs(t, err, boom)
	_, _, err = s.Run(ctx(t), "r1")
	assert.ErrorIs(t, err, store.ErrNotFound, "a failed change writes nothing")
}

func runsInUpdateOrder(t *testing.T, s store.Store) {
	for i, id := range []string{"c", "a", "b"} {
		_, err := s.PutRun(ctx(t), record(id, t0.Add(time.Duration(3-i)*time.Minute)), 0)
		require.NoError(t, err)
	}
	runs, err := s.Runs(ctx(t))
	require.NoError(t, err)
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.RunID)
	}
	assert.Equal(t, []string{"b", "a", "c"}, ids, "least recently updated first")
}

func pending(run, id string, at time.Time, escalations int) subjects.PendingInterrupt {
	return subjects.PendingInterrupt{RunID: run, Agent: "refunds", SuspendedAt: at,
		InterruptState: subjects.InterruptState{Interrupt: subjects.Interrupt{ID: id, Reason: subjects.ReasonConfirmation},
			Escalations: escalations}}
}

func pendingIndex(t *testing.T, s store.Store) {
	got, err := s.Pending(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, got)
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{
		pending("r2", "x", t0.Add(time.Minute), 0), pending("r1", "b", t0, 0), pending("r1", "a", t0, 0)}}))
	got, err = s.Pending(ctx(t))
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []string{"r1/a", "r1/b", "r2/x"}, keys(got), "oldest first, then by run and interrupt")

	// An escalation puts the entry again with its new state.
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{pending("r1", "a", t0, 1)}}))
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "r1", InterruptID: "b"}}}))
	// Removing an entry twice, or one never there, is not an error.
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "r1", InterruptID: "b"},
		{RunID: "r9", InterruptID: "z"}}}))
	got, err = s.Pending(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"r1/a", "r2/x"}, keys(got))
	assert.Equal(t, 1, got[0].Escalations)
}

// indexPutRepeatedAfterRemoval commits a suspension's index put again
// after its interrupt was decided and removed (a redelivered outcome): the
// repeat is the same write, so it stores nothing and the decided interrupt
// stays out of the index.
func indexPutRepeatedAfterRemoval(t *testing.T, s store.Store) {
	put := store.Effects{Index: []subjects.PendingInterrupt{pending("r1", "a", t0, 0)}}
	require.NoError(t, s.Commit(ctx(t), put))
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "r1", InterruptID: "a"}}}))
	require.NoError(t, s.Commit(ctx(t), put))
	got, err := s.Pending(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, got)
}

func keys(p []subjects.PendingInterrupt) []string {
	var out []string
	for _, e := range p {
		out = append(out, e.RunID+"/"+e.ID)
	}
	return out
}

func event(run string, typ subjects.EventType, dedup string) store.Event {
	return store.Event{Event: subjects.Event{Version: 1, Type: typ, RunID: run, At: t0}, Dedup: dedup}
}

func eventsOncePerKey(t *testing.T, s store.Store) {
	fx := store.Effects{Events: []store.Event{event("r1", subjects.EventSuspended, "pass0"),
		event("r2", subjects.EventSuspended, "pass0")}}
	require.NoError(t, s.Commit(ctx(t), fx))
	require.NoError(t, s.Commit(ctx(t), fx), "committing again after a crash")
	require.NoError(t, s.Commit(ctx(t), store.Effects{Events: []store.Event{event("r1", subjects.EventResumed, "pass1"),
		event("r1", subjects.EventDecisionAccepted, "seq7")}}))
	evs, err := s.Events(ctx(t), "r1")
	require.NoError(t, err)
	var types []subjects.EventType
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventResumed, subjects.EventDecisionAccepted}, types,
		"each event once, in order, only the run's own")
	none, err := s.Events(ctx(t), "r3")
	require.NoError(t, err)
	assert.Empty(t, none)
}

// eventsWithoutRun files an event about input too broken to name a valid
// run under subjects.NoRun.
func eventsWithoutRun(t *testing.T, s store.Store) {
	require.NoError(t, s.Commit(ctx(t), store.Effects{Events: []store.Event{event("not a token", subjects.EventInputRejected, "seq1")}}))
	evs, err := s.Events(ctx(t), subjects.NoRun)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, subjects.EventInputRejected, evs[0].Type)
}
