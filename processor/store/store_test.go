package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/processor/store/memstore"
	"github.com/interlockhq/interlock/processor/store/storetest"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestJetStream(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		c := jstest.Client(t, jstest.Server(t))
		return storetest.Backend{Store: store.NewJetStream(c), Suspend: func(t *testing.T, run string) uint64 {
			subject, err := c.Namespace().Suspended("refunds", run)
			require.NoError(t, err)
			ack, err := c.Publish(context.Background(), subject, []byte(`{}`), run+":"+uuid.NewString(), nil) // with an id, as a worker
			require.NoError(t, err)
			return ack.Sequence
		}}
	})
}

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) storetest.Backend {
		s := memstore.New()
		var seq uint64
		return storetest.Backend{Store: s, Suspend: func(_ *testing.T, run string) uint64 {
			seq++
			s.Suspended(run, seq)
			return seq
		}}
	})
}

// traffic counts every message through a server (requests and their
// replies) while fn runs. The server's advisories ($JS.EVENT.>, one API
// audit per JetStream API request) are not counted: the server sends them
// from a queue of its own, after the reply, so one can arrive after the
// count ends (the count of a read was 7 or 8 from one run to the next).
func traffic(t *testing.T, url string, fn func()) int {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	var n atomic.Int64
	marker := nc.NewInbox()
	done := make(chan struct{})
	_, err = nc.Subscribe(">", func(m *nats.Msg) {
		if m.Subject == marker {
			close(done)
			return
		}
		if strings.HasPrefix(m.Subject, "$JS.EVENT.") {
			return
		}
		n.Add(1)
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	fn()
	require.NoError(t, nc.Publish(marker, nil))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the tap saw nothing")
	}
	return int(n.Load())
}

// TestReadsCostWhatTheyReturn: a page of the pending index, its count and
// one run's events take as many requests and replies with 20 times more
// stored as with few.
func TestReadsCostWhatTheyReturn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := jstest.Server(t)
	s := store.NewJetStream(jstest.Client(t, srv))
	fill := func(from, n int) {
		fx := store.Effects{}
		for i := from; i < from+n; i++ {
			run := fmt.Sprintf("r%05d", i)
			fx.Index = append(fx.Index, subjects.PendingInterrupt{RunID: run, Agent: "a",
				InterruptState: subjects.InterruptState{Interrupt: subjects.Interrupt{ID: "i", Reason: subjects.ReasonConfirmation}}})
			fx.Events = append(fx.Events, store.Event{Event: subjects.Event{Version: 1, Type: subjects.EventSuspended, RunID: run}, Dedup: "p0"})
			if i%3 == 0 && i > from {
				fx.Unindex = append(fx.Unindex, store.PendingRef{RunID: fmt.Sprintf("r%05d", i-1), InterruptID: "i"})
			}
		}
		require.NoError(t, s.Commit(ctx, fx))
	}
	measure := func() (page, count, events int) {
		_, next, err := s.PendingPage(ctx, 0, 50) // warm: opens the bucket
		require.NoError(t, err)
		_, _, err = s.Events(ctx, "r00001", 0) // warm: the stream's settings
		require.NoError(t, err)
		page = traffic(t, srv.URL(), func() {
			got, _, err := s.PendingPage(ctx, next, 50)
			require.NoError(t, err)
			require.Len(t, got, 50)
		})
		count = traffic(t, srv.URL(), func() {
			_, err := s.PendingCount(ctx)
			require.NoError(t, err)
		})
		events = traffic(t, srv.URL(), func() {
			evs, _, err := s.Events(ctx, "r00007", 0)
			require.NoError(t, err)
			require.Len(t, evs, 1)
		})
		return page, count, events
	}
	fill(0, 300)
	page, count, events := measure()
	for from := 300; from < 6300; from += 1000 {
		fill(from, 1000)
	}
	page2, count2, events2 := measure()
	t.Logf("messages through the server: page %d then %d, count %d then %d, events %d then %d", page, page2, count, count2, events, events2)
	assert.Equal(t, page, page2, "a page of 50")
	assert.LessOrEqual(t, page, 2+50+1, "one request: the request, 50 entries and the end of the batch, plus at most one more request over removed entries")
	assert.Equal(t, count, count2, "the count")
	assert.LessOrEqual(t, count, 4, "the count: one stream info and one direct get of the index's marker, each with its reply")
	assert.Equal(t, events, events2, "one run's events")
	assert.LessOrEqual(t, events, 3, "one request, one event, the end of the batch")
}

// TestUpdateFromRecentRecord: a store that wrote a record last changes it
// without reading it first; a write from a record another store has
// changed since loses the compare-and-set and is made again from the
// record read, and a refusal on a remembered record is asked again on the
// record read, so nothing is refused on a stale record.
func TestUpdateFromRecentRecord(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := jstest.Server(t)
	a, b := store.NewJetStream(jstest.Client(t, srv)), store.NewJetStream(jstest.Client(t, srv))
	bump := func(rec *subjects.Run) (*subjects.Run, error) {
		if rec == nil {
			return &subjects.Run{Version: 1, RunID: "r1", Agent: "a", Status: subjects.RunSuspended}, nil
		}
		next := *rec
		next.Pass++
		return &next, nil
	}
	_, _, err := a.Run(ctx, "r0") // warm: opens the bucket
	require.ErrorIs(t, err, store.ErrNotFound)
	msgs := traffic(t, srv.URL(), func() {
		_, err := store.Update(ctx, a, "r1", bump)
		require.NoError(t, err)
	})
	assert.Equal(t, 2, msgs, "a run's first record: one request, the create, and its ack: no read")
	msgs = traffic(t, srv.URL(), func() {
		got, err := store.Update(ctx, a, "r1", bump)
		require.NoError(t, err)
		assert.Equal(t, 1, got.Pass)
	})
	assert.Equal(t, 2, msgs, "one request, the write, and its ack: no read")

	// b moves the record on; a still remembers pass 1.
	_, err = store.Update(ctx, b, "r1", bump)
	require.NoError(t, err)
	got, err := store.Update(ctx, a, "r1", bump)
	require.NoError(t, err)
	assert.Equal(t, 3, got.Pass, "the stale write lost and was made again from pass 2")

	_, err = store.Update(ctx, b, "r1", bump) // pass 4; a remembers 3
	require.NoError(t, err)
	var seen []int
	got, err = store.Update(ctx, a, "r1", func(rec *subjects.Run) (*subjects.Run, error) {
		seen = append(seen, rec.Pass)
		if rec.Pass < 4 {
			return nil, nil // refused on what it was given
		}
		return bump(rec)
	})
	require.NoError(t, err)
	require.NotNil(t, got, "not refused on a stale record")
	assert.Equal(t, 5, got.Pass)
	assert.Equal(t, []int{3, 4}, seen, "asked on the remembered record, then on the record read")
}

// A batched read ends early once it has its bytes (a megabyte, or the
// server's own cap); a run's events are still read to the end, not cut off
// there.
func TestEventsPastTheServersBatchCap(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	s := store.NewJetStream(c)
	const n = 1100
	detail := strings.Repeat("x", 2000)
	for i := range n {
		ev := store.Event{Event: subjects.Event{Version: 1, Type: subjects.EventInputRejected, RunID: "run-1",
			Detail: detail, At: time.Now()}, Dedup: fmt.Sprint("seq", i)}
		require.NoError(t, s.Commit(context.Background(), store.Effects{Events: []store.Event{ev}}))
	}
	filter, err := c.Namespace().RunEvents("run-1")
	require.NoError(t, err)
	first, more, err := c.Batch(context.Background(), c.StreamName(jetstream.StreamEvents), filter, 0, 1024)
	require.NoError(t, err)
	require.True(t, more, "the server ended the first batch early")
	require.Less(t, len(first), 1024, "the server ended the first batch early")
	evs, cursor, err := s.Events(context.Background(), "run-1", 0)
	require.NoError(t, err)
	assert.Equal(t, n, len(evs), "every event, past the server's cap on one batch")
	assert.Equal(t, uint64(n), cursor)
}
