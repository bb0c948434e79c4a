package coordinator

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/processor/store/memstore"
	"github.com/interlockhq/interlock/subjects"
)

// TestPendingIndexFollowsTheRecords: an interrupt enters the pending index
// when its run suspends, moves its deadline with an escalation, and leaves
// when decided.
func TestPendingIndexFollowsTheRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pending := func() map[string]subjects.PendingInterrupt {
		list, err := store.AllPending(ctx(t), e.st)
		require.NoError(t, err)
		out := map[string]subjects.PendingInterrupt{}
		for _, p := range list {
			out[p.RunID] = p
		}
		return out
	}
	plain := open
	plain.Message = "plain"
	escalates := expiring
	escalates.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 3600}
	e.suspend("a", 0, plain)
	e.suspend("b", 0, escalates)
	require.Len(t, pending(), 2)
	assert.Equal(t, "plain", pending()["a"].Message)
	assert.True(t, pending()["b"].ExpiresAt.Equal(deadline))

	e.decide("a", "", resolve("d1", "open", ""))
	assert.NotContains(t, pending(), "a", "a decided interrupt leaves the index")

	e.now = deadline
	require.NoError(t, e.co.handleTimer(ctx(t), e.timer("b", "expiring", subjects.TimerExpire)))
	b, ok := pending()["b"]
	require.True(t, ok, "an escalated interrupt stays")
	assert.True(t, b.ExpiresAt.Equal(deadline.Add(time.Hour)), "an escalation moves the deadline in the index: %v", b.ExpiresAt)
	assert.Equal(t, 1, b.Escalations)
}

// lostIndexStore loses the pending index (as a server restart loses a
// memory-backed one) when a build reads the records, once; with
// reclaimed, another coordinator's claim then lands on the sequence the
// build's own claim had.
type lostIndexStore struct {
	*memstore.Store
	lose, reclaimed bool
}

func (s *lostIndexStore) RunsPage(ctx context.Context, after uint64, limit int) ([]*subjects.Run, uint64, error) {
	runs, next, err := s.Store.RunsPage(ctx, after, limit)
	switch {
	case s.reclaimed:
		s.reclaimed = false
		s.ReplaceIndexMarker(store.IndexMarker{State: store.IndexBuilding, By: "another", At: t0})
	case s.lose:
		s.lose = false
		s.LoseIndex()
	}
	return runs, next, err
}

// TestPendingIndexBuiltWhenLost is issue 25's memory-backed index: a
// server restart loses it with its marker, and the coordinator builds it
// again from the records, with what waits and nothing decided; a build
// under which the index is lost again does not mark it built, and the next
// check builds it whole.
func TestPendingIndexBuiltWhenLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	lost := &lostIndexStore{Store: e.st}
	e.co.store = lost
	e.suspend("a", 0, open)
	e.suspend("b", 0, open)
	e.suspend("c", 0, open)
	e.decide("b", "", resolve("d1", "open", ""))
	ids := func() []string {
		list, err := store.AllPending(ctx(t), e.st)
		require.NoError(t, err)
		var out []string
		for _, p := range list {
			out = append(out, p.RunID)
		}
		sort.Strings(out)
		return out
	}
	require.Equal(t, []string{"a", "c"}, ids())

	built, err := e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built, "an index without its marker is built")
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	assert.False(t, built, "a built index is left alone")

	e.st.LoseIndex()
	require.Empty(t, ids())
	lost.lose = true
	_, err = e.co.index.check(ctx(t))
	require.ErrorIs(t, err, errIndexLost, "lost again under the build: not marked built")
	_, _, err = e.st.IndexMarker(ctx(t))
	require.ErrorIs(t, err, store.ErrNotFound)
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built)
	assert.Equal(t, []string{"a", "c"}, ids(), "the waiting interrupts, not the decided one")
	n, err := e.st.PendingCount(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	// Lost again, and another coordinator's claim lands on the sequence
	// this build's claim had: the build does not mark the index built.
	e.st.LoseIndex()
	lost.reclaimed = true
	_, err = e.co.index.check(ctx(t))
	require.ErrorIs(t, err, errIndexLost)
	m, _, err := e.st.IndexMarker(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, "another", m.By, "the other claim stands")
	assert.Equal(t, store.IndexBuilding, m.State)
}

// TestPendingIndexBuiltUnderANewLeader: an index that may come back older
// than it was (in memory, replicated) is built again when its stream has a
// new leader since its marker was written, and the build removes the
// entries no waiting interrupt backs; under the same leader, or where no
// leader change can lose a write (an empty epoch), it is left alone.
func TestPendingIndexBuiltUnderANewLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("a", 0, open)
	e.suspend("b", 0, open)
	e.st.SetIndexEpoch("n1@t1")
	built, err := e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built, "the first build")
	m, _, err := e.st.IndexMarker(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, "n1@t1", m.Epoch, "the marker holds the leadership it was built under")
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	assert.False(t, built, "the same leader: left alone")

	// What an older replica would hold: a decided interrupt's entry, and
	// no entry for one still waiting. An entry whose run has no record is
	// kept (it cannot be told from a record not put back yet).
	stale := pendingEntry(e.record("b"), e.record("b").Interrupts[0])
	e.decide("b", "", resolve("d1", "open", ""))
	orphan := stale
	orphan.RunID = "gone"
	require.NoError(t, e.st.Commit(ctx(t), store.Effects{Rebuild: true, Index: []subjects.PendingInterrupt{stale, orphan}}))
	require.NoError(t, e.st.Commit(ctx(t), store.Effects{Unindex: []store.PendingRef{{RunID: "a", InterruptID: e.record("a").Interrupts[0].ID}}}))

	e.st.SetIndexEpoch("")
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	assert.False(t, built, "no epoch: a leader change loses nothing there")

	e.st.SetIndexEpoch("n2@t2")
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built, "a new leader: built again")
	list, err := store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	var runs []string
	for _, p := range list {
		runs = append(runs, p.RunID)
	}
	assert.ElementsMatch(t, []string{"a", "gone"}, runs, "the waiting interrupt back, the decided one's entry removed")
	m, _, err = e.st.IndexMarker(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, "n2@t2", m.Epoch)
	assert.Equal(t, store.IndexBuilt, m.State)
}

// behind answers reads of one run with an older record, as a replica of
// the runs bucket behind its leader answers a direct get.
type behind struct {
	*memstore.Store
	run string
	old *subjects.Run
}

func (b behind) Run(ctx context.Context, run string) (*subjects.Run, uint64, error) {
	if run == b.run {
		return b.old, 1, nil
	}
	return b.Store.Run(ctx, run)
}

func (b behind) RunsPage(ctx context.Context, after uint64, limit int) ([]*subjects.Run, uint64, error) {
	page, last, err := b.Store.RunsPage(ctx, after, limit)
	for i, r := range page {
		if r.RunID == b.run {
			page[i] = b.old
		}
	}
	return page, last, err
}

// TestPendingIndexSweepKeepsWhatAnOlderReadLacks: a build reads the records
// from a replica behind, whose record of a run lacks the interrupt the run
// now waits on; the sweep keeps that interrupt's entry. It removes only
// what a record shows closed (found by the second review: an interrupt
// absent from an older record counted as no longer waiting).
func TestPendingIndexSweepKeepsWhatAnOlderReadLacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("a", 0, open)
	e.decide("a", "", resolve("d1", "open", ""))
	old := e.record("a") // running pass 1: what the replica behind holds
	e.suspend("a", 1, second)
	require.Equal(t, subjects.RunSuspended, e.record("a").Status)
	e.st.SetIndexEpoch("n1@t1")
	_, err := e.co.index.check(ctx(t))
	require.NoError(t, err)

	e.co.store = behind{Store: e.st, run: "a", old: old}
	e.st.SetIndexEpoch("n2@t2")
	built, err := e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built)
	list, err := store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	require.Len(t, list, 1, "run a waits on its second interrupt (the leader's record): its entry stays")
	assert.Equal(t, "second", list[0].ID)
}

// TestPendingIndexBuildClaimed: a build another coordinator claimed and
// renews is left to it; one whose claim went stale is taken over.
func TestPendingIndexBuildClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("a", 0, open)
	e.st.LoseIndex()
	_, err := e.st.PutIndexMarker(ctx(t), store.IndexMarker{State: store.IndexBuilding, By: "other", At: e.now}, 0)
	require.NoError(t, err)
	built, err := e.co.index.check(ctx(t))
	require.NoError(t, err)
	assert.False(t, built, "another coordinator's fresh claim is left to it")

	e.now = e.now.Add(indexStale)
	built, err = e.co.index.check(ctx(t))
	require.NoError(t, err)
	require.True(t, built, "a stale claim is taken over")
	m, _, err := e.st.IndexMarker(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, store.IndexBuilt, m.State)
	list, err := store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	require.Len(t, list, 1)
}
