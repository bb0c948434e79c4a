// Package storetest is the conformance suite of store.Store: what every
// implementation must do, run against the JetStream store and the memory
// store alike. Another implementation passes it by calling Run from a test
// with a function that returns a fresh, empty store and what the suite
// needs around it (Backend).
package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Backend is a store under test and what the suite does around it.
type Backend struct {
	Store store.Store
	// Suspend puts a suspension of run (of agent refunds) into the runs
	// stream the store reads LastSuspension from, as a worker publishes
	// one, and returns its stream sequence.
	Suspend func(t *testing.T, run string) uint64
}

// Run runs the suite; open returns a fresh, empty store for each test.
func Run(t *testing.T, open func(t *testing.T) Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"RunNotFound", runNotFound},
		{"CompareAndSet", compareAndSet},
		{"UpdateUnderContention", updateUnderContention},
		{"UpdateWritesNothing", updateWritesNothing},
		{"RunsInUpdateOrder", runsInUpdateOrder},
		{"RunsPages", runsPages},
		{"IndexMarker", indexMarker},
		{"PendingIndex", pendingIndex},
		{"SweepIndex", sweepIndex},
		{"IndexPutRepeatedAfterRemoval", indexPutRepeatedAfterRemoval},
		{"PendingPages", pendingPages},
		{"PendingPagesWhileChanging", pendingPagesWhileChanging},
		{"PendingCount", pendingCount},
		{"Indexed", indexedEntries},
		{"EventsAfterCursor", eventsAfterCursor},
		{"AllPendingOncePerInterrupt", allPendingOncePerInterrupt},
		{"EventsOncePerKey", eventsOncePerKey},
		{"EventsWithoutRun", eventsWithoutRun},
		{"RecordTooLarge", recordTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t).Store)
		})
	}
	t.Run("LastSuspension", func(t *testing.T) {
		t.Parallel()
		lastSuspension(t, open(t))
	})
}

func lastSuspension(t *testing.T, b Backend) {
	seq, err := b.Store.LastSuspension(ctx(t), "r1")
	require.NoError(t, err)
	assert.Zero(t, seq, "no suspension yet")

	first := b.Suspend(t, "r1")
	b.Suspend(t, "r2")
	seq, err = b.Store.LastSuspension(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, first, seq, "another run's suspension is not r1's")
	second := b.Suspend(t, "r1")
	assert.Greater(t, second, first)
	seq, err = b.Store.LastSuspension(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, second, seq, "the latest")

	_, err = b.Store.LastSuspension(ctx(t), "bad.run")
	assert.ErrorIs(t, err, subjects.ErrInvalidToken, "a run id that is not a token")
}

func recordTooLarge(t *testing.T, s store.Store) {
	limit := s.MaxRecord()
	require.Positive(t, limit)
	r := record("big", t0)
	r.Error = strings.Repeat("x", int(limit))
	_, err := s.PutRun(ctx(t), r, 0)
	require.ErrorIs(t, err, store.ErrTooLarge)
	_, _, err = s.Run(ctx(t), "big")
	assert.ErrorIs(t, err, store.ErrNotFound, "nothing stored")

	r.Error = "short"
	_, err = s.PutRun(ctx(t), r, 0)
	assert.NoError(t, err)
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
	// A Recaller asks once on its guess and once on the record read.
	assert.LessOrEqual(t, calls, 2)
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

// runsPages: every record once in pages of two, in the order written; one
// written again while paging comes again on a later page.
func runsPages(t *testing.T, s store.Store) {
	revs := map[string]uint64{}
	for _, id := range []string{"c", "a", "b", "d", "e"} {
		rev, err := s.PutRun(ctx(t), record(id, t0), 0)
		require.NoError(t, err)
		revs[id] = rev
	}
	var ids []string
	for after, page := uint64(0), 0; ; page++ {
		runs, last, err := s.RunsPage(ctx(t), after, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(runs), 2)
		if len(runs) == 0 {
			assert.Equal(t, after, last, "an empty page leaves the cursor where it was")
			break
		}
		for _, r := range runs {
			ids = append(ids, r.RunID)
		}
		switch page {
		case 0:
			_, err := s.PutRun(ctx(t), record("c", t0.Add(time.Minute)), revs["c"])
			require.NoError(t, err)
		case 2:
			// Written again after it was read on the last full page.
			_, err := s.PutRun(ctx(t), record("e", t0.Add(time.Minute)), revs["e"])
			require.NoError(t, err)
		}
		after = last
	}
	assert.Equal(t, []string{"c", "a", "b", "d", "e", "c", "e"}, ids, "read until a page is empty: every record after its last write")
}

// indexMarker: the pending index's marker is written with compare-and-set
// on its sequence, and read back.
func indexMarker(t *testing.T, s store.Store) {
	_, _, err := s.IndexMarker(ctx(t))
	require.ErrorIs(t, err, store.ErrNotFound)
	seq, err := s.PutIndexMarker(ctx(t), store.IndexMarker{State: store.IndexBuilding, By: "a", At: t0}, 0)
	require.NoError(t, err)
	_, err = s.PutIndexMarker(ctx(t), store.IndexMarker{State: store.IndexBuilding, By: "b", At: t0}, 0)
	require.ErrorIs(t, err, store.ErrConflict, "a second claim from none loses")
	_, err = s.PutIndexMarker(ctx(t), store.IndexMarker{State: store.IndexBuilt, By: "a", At: t0}, seq)
	require.NoError(t, err)
	m, _, err := s.IndexMarker(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, store.IndexBuilt, m.State)
	assert.Equal(t, "a", m.By)
	n, err := s.PendingCount(ctx(t))
	require.NoError(t, err)
	assert.Zero(t, n, "the marker is not a waiting interrupt")
	list, err := store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.Empty(t, list, "nor is it listed")
}

func pending(run, id string, at time.Time, escalations int) subjects.PendingInterrupt {
	return subjects.PendingInterrupt{RunID: run, Agent: "refunds", SuspendedAt: at,
		InterruptState: subjects.InterruptState{Interrupt: subjects.Interrupt{ID: id, Reason: subjects.ReasonConfirmation},
			Escalations: escalations}}
}

func pendingIndex(t *testing.T, s store.Store) {
	got, err := store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.Empty(t, got)
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{
		pending("r2", "x", t0.Add(time.Minute), 0), pending("r1", "b", t0, 0), pending("r1", "a", t0, 0)}}))
	got, err = store.AllPending(ctx(t), s)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []string{"r1/a", "r1/b", "r2/x"}, keys(got), "oldest first, then by run and interrupt")

	// An escalation puts the entry again with its new state.
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{pending("r1", "a", t0, 1)}}))
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "r1", InterruptID: "b"}}}))
	// Removing an entry twice, or one never there, is not an error.
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "r1", InterruptID: "b"},
		{RunID: "r9", InterruptID: "z"}}}))
	got, err = store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.Equal(t, []string{"r1/a", "r2/x"}, keys(got))
	assert.Equal(t, 1, got[0].Escalations)
}

// sweepIndex: a build claims the marker, puts again what waits, and removes
// what was written before its claim, not put again, and found stale; what
// is written after the claim stays, and so does the marker.
func sweepIndex(t *testing.T, s store.Store) {
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{
		pending("r1", "a", t0, 0), pending("r1", "b", t0, 0), pending("r2", "x", t0, 0)}}))
	claim, err := s.PutIndexMarker(ctx(t), store.IndexMarker{State: store.IndexBuilding, By: "a", At: t0}, 0)
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx(t), store.Effects{Rebuild: true, Index: []subjects.PendingInterrupt{pending("r1", "a", t0, 0)}}))
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{pending("r3", "y", t0, 0)}}))
	var asked []string
	stale := func(_ context.Context, p subjects.PendingInterrupt) (bool, error) {
		asked = append(asked, p.RunID+"/"+p.ID)
		return p.RunID == "r1", nil // r2/x still waits: kept
	}
	removed, err := s.SweepIndex(ctx(t), claim, stale)
	require.NoError(t, err)
	assert.Equal(t, 1, removed, "r1/b: written before the claim, not put again, and stale")
	assert.ElementsMatch(t, []string{"r1/b", "r2/x"}, asked, "only what was written before the claim and not put again")
	got, err := store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"r1/a", "r2/x", "r3/y"}, keys(got))
	m, _, err := s.IndexMarker(ctx(t))
	require.NoError(t, err, "the marker is not an entry")
	assert.Equal(t, store.IndexBuilding, m.State)
	removed, err = s.SweepIndex(ctx(t), claim, func(context.Context, subjects.PendingInterrupt) (bool, error) { return true, nil })
	require.NoError(t, err)
	assert.Equal(t, 1, removed, "r2/x, once stale")
	got, err = store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"r1/a", "r3/y"}, keys(got), "what the build put, and what came after its claim")
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
	got, err := store.AllPending(ctx(t), s)
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
	evs, _, err := s.Events(ctx(t), "r1", 0)
	require.NoError(t, err)
	var types []subjects.EventType
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventResumed, subjects.EventDecisionAccepted}, types,
		"each event once, in order, only the run's own")
	none, _, err := s.Events(ctx(t), "r3", 0)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// eventsWithoutRun files an event about input too broken to name a valid
// run under subjects.NoRun.
func eventsWithoutRun(t *testing.T, s store.Store) {
	require.NoError(t, s.Commit(ctx(t), store.Effects{Events: []store.Event{event("not a token", subjects.EventInputRejected, "seq1")}}))
	evs, _, err := s.Events(ctx(t), subjects.NoRun, 0)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, subjects.EventInputRejected, evs[0].Type)
}

// index puts n entries r<from>..r<from+n-1>, one commit each, so they enter
// the index in that order.
func index(t *testing.T, s store.Store, from, n int) {
	for i := from; i < from+n; i++ {
		require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{
			pending(fmt.Sprintf("r%03d", i), "a", t0.Add(time.Duration(i)*time.Second), 0)}}))
	}
}

func unindex(t *testing.T, s store.Store, ids ...int) {
	var refs []store.PendingRef
	for _, i := range ids {
		refs = append(refs, store.PendingRef{RunID: fmt.Sprintf("r%03d", i), InterruptID: "a"})
	}
	require.NoError(t, s.Commit(ctx(t), store.Effects{Unindex: refs}))
}

// pages reads the index page by page, limit entries a page, calling
// between after each page.
func pages(t *testing.T, s store.Store, limit int, between func(page int)) (runs []string, sizes []int) {
	after := uint64(0)
	for page := 0; ; page++ {
		got, next, err := s.PendingPage(ctx(t), after, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), limit)
		sizes = append(sizes, len(got))
		for _, p := range got {
			runs = append(runs, p.RunID)
		}
		if next == 0 {
			return runs, sizes
		}
		require.Greater(t, next, after, "the cursor moves on")
		after = next
		if between != nil {
			between(page)
		}
		require.Less(t, page, 100, "paging ends")
	}
}

// pendingPages: pages in the order entries entered the index, each at most
// the size asked, together every entry once; removed entries leave no gap
// in a page's count and are not returned.
func pendingPages(t *testing.T, s store.Store) {
	got, next, err := s.PendingPage(ctx(t), 0, 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Zero(t, next, "an empty index has one empty page")

	index(t, s, 0, 12)
	unindex(t, s, 1, 2, 3, 7)
	runs, sizes := pages(t, s, 3, nil)
	assert.Equal(t, []string{"r000", "r004", "r005", "r006", "r008", "r009", "r010", "r011"}, runs)
	assert.Equal(t, 3, sizes[0], "a page steps over removed entries to fill itself")
	for _, n := range sizes[:len(sizes)-1] {
		assert.Equal(t, 3, n, "every page but the last is full")
	}

	// An escalation puts an entry again: it moves to the end, with its new
	// state.
	require.NoError(t, s.Commit(ctx(t), store.Effects{Index: []subjects.PendingInterrupt{
		pending("r000", "a", t0, 1)}}))
	all, next, err := s.PendingPage(ctx(t), 0, 100)
	require.NoError(t, err)
	assert.Zero(t, next)
	require.Len(t, all, 8)
	assert.Equal(t, "r000", all[7].RunID)
	assert.Equal(t, 1, all[7].Escalations)
}

// pendingPagesWhileChanging adds and removes entries between the pages of
// one listing: nothing that stays is skipped or repeated, what was added
// is listed, what was removed before its page is not.
func pendingPagesWhileChanging(t *testing.T, s store.Store) {
	index(t, s, 0, 10)
	added := 10
	runs, _ := pages(t, s, 4, func(page int) {
		switch page {
		case 0:
			unindex(t, s, 1, 5) // one already listed, one not yet
			index(t, s, added, 2)
			added += 2
		case 1:
			index(t, s, added, 1)
			added++
			unindex(t, s, 9)
		}
	})
	assert.Equal(t, []string{"r000", "r001", "r002", "r003", "r004", "r006", "r007", "r008", "r010", "r011", "r012"}, runs)
	seen := map[string]bool{}
	for _, r := range runs {
		assert.False(t, seen[r], "%s listed twice", r)
		seen[r] = true
	}
}

// pendingCount counts the index without listing it; removals stop being
// counted (the JetStream store's markers expire after a second).
func pendingCount(t *testing.T, s store.Store) {
	n, err := s.PendingCount(ctx(t))
	require.NoError(t, err)
	assert.Zero(t, n)
	index(t, s, 0, 5)
	unindex(t, s, 0, 3)
	assert.Eventually(t, func() bool {
		n, err = s.PendingCount(ctx(t))
		return err == nil && n == 3
	}, 10*time.Second, 50*time.Millisecond, "removed entries stop being counted")
	list, err := store.AllPending(ctx(t), s)
	require.NoError(t, err)
	assert.Len(t, list, n, "the count is what is listed")
}

// indexedEntries tells an entry in the index from one never put and one
// removed.
func indexedEntries(t *testing.T, s store.Store) {
	index(t, s, 0, 2)
	unindex(t, s, 1)
	for i, want := range []bool{true, false, false} {
		got, err := s.Indexed(ctx(t), fmt.Sprintf("r%03d", i), "a")
		require.NoError(t, err)
		assert.Equal(t, want, got, "entry %d", i)
	}
}

// eventsAfterCursor reads only the events recorded after a cursor.
func eventsAfterCursor(t *testing.T, s store.Store) {
	require.NoError(t, s.Commit(ctx(t), store.Effects{Events: []store.Event{event("r1", subjects.EventSuspended, "p0"),
		event("r2", subjects.EventSuspended, "p0")}}))
	first, cursor, err := s.Events(ctx(t), "r1", 0)
	require.NoError(t, err)
	require.Len(t, first, 1)
	assert.NotZero(t, cursor)
	none, same, err := s.Events(ctx(t), "r1", cursor)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Equal(t, cursor, same, "no new events: the cursor stays")
	require.NoError(t, s.Commit(ctx(t), store.Effects{Events: []store.Event{event("r2", subjects.EventResumed, "p1"),
		event("r1", subjects.EventResumed, "p1"), event("r1", subjects.EventCompleted, "p1")}}))
	later, next, err := s.Events(ctx(t), "r1", cursor)
	require.NoError(t, err)
	require.Len(t, later, 2)
	assert.Equal(t, subjects.EventResumed, later[0].Type)
	assert.Equal(t, subjects.EventCompleted, later[1].Type)
	assert.Greater(t, next, cursor)
}

// escalateDuring is a store that escalates one entry of the first page it
// returns, as a timer could while a caller reads page after page.
type escalateDuring struct {
	store.Store
	t    *testing.T
	done bool
}

func (e *escalateDuring) PendingPage(ctx context.Context, after uint64, limit int) ([]subjects.PendingInterrupt, uint64, error) {
	page, next, err := e.Store.PendingPage(ctx, after, limit)
	if err == nil && !e.done && len(page) > 0 {
		e.done = true
		again := page[0]
		again.Escalations++
		require.NoError(e.t, e.Store.Commit(ctx, store.Effects{Index: []subjects.PendingInterrupt{again}}))
	}
	return page, next, err
}

// allPendingOncePerInterrupt lists every waiting interrupt once, with its
// latest state, even when one is escalated (and so moves to the end of
// the index) while the pages are read.
func allPendingOncePerInterrupt(t *testing.T, s store.Store) {
	const n = 300 // more than one page
	var fx store.Effects
	for i := range n {
		fx.Index = append(fx.Index, pending(fmt.Sprintf("r%03d", i), "a", t0.Add(time.Duration(i)*time.Second), 0))
	}
	require.NoError(t, s.Commit(ctx(t), fx))
	got, err := store.AllPending(ctx(t), &escalateDuring{Store: s, t: t})
	require.NoError(t, err)
	assert.Len(t, got, n, "each interrupt once")
	assert.Equal(t, "r000", got[0].RunID)
	assert.Equal(t, 1, got[0].Escalations, "with its latest state")
}
