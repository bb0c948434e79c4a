package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) {
	jstest.RunNode() // when this binary is started as a cluster node
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestProvisionIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv, jetstream.Config{Prefix: "acme.il"})
	require.NoError(t, c.Provision(ctx(t)), "second time")
	assert.Equal(t, "ACME_IL_RUNS", c.StreamName(jetstream.StreamRuns))
	assert.Equal(t, "acme_il_runs", c.BucketName(jetstream.RunsBucket))
	// Updating the configuration in place works too.
	c2 := jstest.Client(t, srv, jetstream.Config{Prefix: "acme.il", MaxAge: time.Hour, DuplicateWindow: time.Minute})
	require.NoError(t, c2.Provision(ctx(t)))
	// Another prefix is another namespace on the same server.
	other := jstest.Client(t, srv, jetstream.Config{Prefix: "other"})
	_, err := other.MsgCount(ctx(t), jetstream.StreamRuns)
	require.NoError(t, err)
	_, err = jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{Prefix: "bad prefix"})
	assert.ErrorIs(t, err, subjects.ErrInvalidToken)
}

func TestAuditOutlivesRuns(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{MaxAge: 48 * time.Hour, EventsMaxAge: 24 * time.Hour})
	require.NoError(t, err)
	defer c.Close()
	assert.ErrorIs(t, c.Provision(ctx(t)), jetstream.ErrRetention)
	c2, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{EventsMaxAge: 24 * time.Hour})
	require.NoError(t, err)
	defer c2.Close()
	assert.ErrorIs(t, c2.Provision(ctx(t)), jetstream.ErrRetention, "runs kept forever need events kept forever")
}

func TestPublishDeduplicates(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	subject, _ := c.Namespace().Resume("r1")
	a, err := c.Publish(ctx(t), subject, []byte(`1`), "id-1", nil)
	require.NoError(t, err)
	assert.False(t, a.Duplicate)
	b, err := c.Publish(ctx(t), subject, []byte(`1`), "id-1", nil)
	require.NoError(t, err)
	assert.True(t, b.Duplicate)
	assert.Equal(t, a.Sequence, b.Sequence)
	n, err := c.MsgCount(ctx(t), jetstream.StreamDecisions)
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)

	_, err = c.Publish(ctx(t), "nobody.listens", []byte(`1`), "", nil)
	assert.ErrorIs(t, err, jetstream.ErrNoStream)
	_, err = c.Publish(ctx(t), subject, make([]byte, 2<<20), "", nil)
	assert.ErrorIs(t, err, jetstream.ErrTooLarge)
}

func TestBucketCompareAndSet(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	b, err := c.OpenBucket(ctx(t), jetstream.RunsBucket)
	require.NoError(t, err)
	_, _, err = b.Entry(ctx(t), "r1")
	assert.ErrorIs(t, err, jetstream.ErrNotFound)
	rev, err := b.Update(ctx(t), "r1", []byte(`{"v":1}`), 0)
	require.NoError(t, err)
	_, err = b.Update(ctx(t), "r1", []byte(`{"v":1}`), 0)
	assert.ErrorIs(t, err, jetstream.ErrConflict, "create of an existing key")
	rev2, err := b.Update(ctx(t), "r1", []byte(`{"v":2}`), rev)
	require.NoError(t, err)
	_, err = b.Update(ctx(t), "r1", []byte(`{"v":3}`), rev)
	assert.ErrorIs(t, err, jetstream.ErrConflict, "update at a stale revision")
	value, got, err := b.Entry(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, rev2, got)
	assert.JSONEq(t, `{"v":2}`, string(value))
	keys, err := b.Keys(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"r1"}, keys)
	e, err := b.Last(ctx(t), "r1")
	require.NoError(t, err)
	assert.Equal(t, rev2, e.Revision)
	assert.NoError(t, jetstream.CheckPublished(e.Header), "a write of Update is a client's publish")
}

func TestLastMsgWithWildcard(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	ns := c.Namespace()
	for i, agent := range []string{"a", "b"} {
		s, _ := ns.Suspended(agent, "r1")
		_, err := c.Publish(ctx(t), s, []byte(fmt.Sprint(i)), "", nil)
		require.NoError(t, err)
	}
	filter, _ := ns.RunSuspensions("r1")
	m, err := c.LastMsg(ctx(t), jetstream.StreamRuns, filter)
	require.NoError(t, err)
	assert.Equal(t, "1", string(m.Data))
	filter, _ = ns.RunSuspensions("r2")
	_, err = c.LastMsg(ctx(t), jetstream.StreamRuns, filter)
	assert.ErrorIs(t, err, jetstream.ErrNotFound)
}

func publishN(t *testing.T, c *jetstream.Client, run string, n int) string {
	subject, _ := c.Namespace().Resume(run)
	for i := range n {
		_, err := c.Publish(ctx(t), subject, []byte(fmt.Sprint(i)), "", nil)
		require.NoError(t, err)
	}
	return subject
}

func TestConsumeRetriesThenAcks(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	var attempts atomic.Int32
	done := make(chan struct{})
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "t",
		BackOff: []time.Duration{10 * time.Millisecond}},
		func(_ context.Context, m *jetstream.Delivery) error {
			n := attempts.Add(1)
			assert.EqualValues(t, n, m.Deliveries)
			if n < 3 {
				return errors.New("not yet")
			}
			close(done)
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	<-done
	k.Stop(context.Background())
	assert.EqualValues(t, 3, attempts.Load())
	n, err := c.MsgCount(ctx(t), jetstream.StreamDLQ)
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestConsumeRetriesElectionSoon: a handler failing with ErrUnavailable (a
// leader election) is redelivered after 100 ms, 200 ms, ..., not after the
// consumer's BackOff, which is for handlers that fail.
func TestConsumeRetriesElectionSoon(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	var attempts atomic.Int32
	done := make(chan time.Time, 1)
	began := time.Now()
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "t",
		BackOff: []time.Duration{time.Minute}},
		func(_ context.Context, m *jetstream.Delivery) error {
			if attempts.Add(1) < 3 {
				return fmt.Errorf("publish outcome: %w", jetstream.ErrUnavailable)
			}
			done <- time.Now()
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	select {
	case at := <-done:
		assert.Less(t, at.Sub(began), 10*time.Second, "retried soon, not after a minute")
	case <-time.After(20 * time.Second):
		t.Fatal("an election's failure waited for the handler backoff")
	}
}

func dlqMsgs(t *testing.T, c *jetstream.Client, source string, want int) []jetstream.StoredMsg {
	subject, _ := c.Namespace().DeadLetter(source)
	var msgs []jetstream.StoredMsg
	require.Eventually(t, func() bool {
		var err error
		msgs, err = c.Messages(ctx(t), jetstream.StreamDLQ, subject, 0, 100)
		return err == nil && len(msgs) >= want
	}, 10*time.Second, 10*time.Millisecond)
	return msgs
}

func TestConsumeDeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	subject := publishN(t, c, "r1", 1)
	var attempts atomic.Int32
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "always_fails",
		MaxDeliver: 3, BackOff: []time.Duration{5 * time.Millisecond}},
		func(context.Context, *jetstream.Delivery) error {
			attempts.Add(1)
			return errors.New("sink is down")
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	msgs := dlqMsgs(t, c, "always_fails", 1)
	k.Stop(context.Background())
	require.Len(t, msgs, 1)
	m := msgs[0]
	assert.Equal(t, "0", string(m.Data), "the message is kept")
	assert.Contains(t, m.Header.Get(jetstream.HeaderDLQReason), "gave up after 3 deliveries: sink is down")
	assert.Equal(t, subject, m.Header.Get(jetstream.HeaderDLQSubject))
	assert.Equal(t, "3", m.Header.Get(jetstream.HeaderDLQDeliveries))
	assert.Equal(t, "always_fails", m.Header.Get(jetstream.HeaderDLQConsumer))
	assert.Equal(t, c.StreamName(jetstream.StreamDecisions), m.Header.Get(jetstream.HeaderDLQStream))
	assert.EqualValues(t, 3, attempts.Load())
}

func TestConsumeDeadLetterAtOnceAndPanics(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 2)
	var panicked atomic.Bool
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "picky",
		BackOff: []time.Duration{5 * time.Millisecond}},
		func(_ context.Context, m *jetstream.Delivery) error {
			if string(m.Data) == "0" {
				return jetstream.DeadLetter(errors.New("cannot parse"))
			}
			if panicked.CompareAndSwap(false, true) {
				panic("boom")
			}
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	msgs := dlqMsgs(t, c, "picky", 1)
	assert.Equal(t, "cannot parse", msgs[0].Header.Get(jetstream.HeaderDLQReason))
	assert.Equal(t, "1", msgs[0].Header.Get(jetstream.HeaderDLQDeliveries), "no retries for DeadLetter")
	require.Eventually(t, panicked.Load, 5*time.Second, 10*time.Millisecond)
	// The panic became a retry, and the retry succeeded: nothing else was
	// dead-lettered.
	require.Eventually(t, func() bool {
		n, err := c.MsgCount(ctx(t), jetstream.StreamDLQ)
		return err == nil && n == 1
	}, 5*time.Second, 10*time.Millisecond)
}

func TestConsumeRetryAfter(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	var first time.Time
	var gap time.Duration
	done := make(chan struct{})
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "later"},
		func(_ context.Context, m *jetstream.Delivery) error {
			if m.Deliveries == 1 {
				first = time.Now()
				return jetstream.RetryAfter(300*time.Millisecond, errors.New("wait"))
			}
			gap = time.Since(first)
			close(done)
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	<-done
	assert.GreaterOrEqual(t, gap, 300*time.Millisecond, "redelivered no sooner than asked")
}

// A handler that runs longer than AckWait keeps its message: InProgress
// stops the server from handing it to someone else. (AckWait 2s: the
// heartbeat every second arrives in time on a busy machine too; 500ms
// failed at load 10.)
func TestConsumeLongHandlerNotRedelivered(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	var deliveries atomic.Int32
	done := make(chan struct{})
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "slow",
		AckWait: 2 * time.Second, Concurrency: 2},
		func(context.Context, *jetstream.Delivery) error {
			if deliveries.Add(1) == 1 {
				time.Sleep(5 * time.Second) // the long pass under test: over two AckWaits
				close(done)
			}
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	<-done
	k.Stop(context.Background())
	assert.EqualValues(t, 1, deliveries.Load())
}

func TestConsumePartitionKeepsOrder(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	for _, run := range []string{"a", "b", "c"} {
		publishN(t, c, run, 30)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	var total atomic.Int32
	done := make(chan struct{})
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "ordered",
		Concurrency: 4, PartitionKey: func(m *jetstream.Delivery) string { return m.Subject }},
		func(_ context.Context, m *jetstream.Delivery) error {
			mu.Lock()
			seen[m.Subject] = append(seen[m.Subject], string(m.Data))
			mu.Unlock()
			if total.Add(1) == 90 {
				close(done)
			}
			return nil
		})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	<-done
	for subject, got := range seen {
		want := make([]string, 30)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		assert.Equal(t, want, got, subject)
	}
}

func TestEmbeddedSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := jstest.Server(t, embedded.Config{DataDir: dir, Sync: embedded.SyncAlways})
	c := jstest.Client(t, srv)
	b, err := c.OpenBucket(ctx(t), jetstream.RunsBucket)
	require.NoError(t, err)
	_, err = b.Update(ctx(t), "r1", []byte(`{"kept":true}`), 0)
	require.NoError(t, err)
	c.Close()
	srv = jstest.Restart(t, srv, embedded.Config{DataDir: dir, Sync: embedded.SyncAlways})
	c = jstest.Client(t, srv)
	b, err = c.OpenBucket(ctx(t), jetstream.RunsBucket)
	require.NoError(t, err)
	value, err := b.Get(ctx(t), "r1")
	require.NoError(t, err)
	assert.JSONEq(t, `{"kept":true}`, string(value))
}

func TestEmbeddedConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := embedded.Start(embedded.Config{Port: -1})
	assert.ErrorIs(t, err, embedded.ErrConfig)
	_, err = embedded.Start(embedded.Config{Port: -1, DataDir: t.TempDir(), Sync: "sometimes"})
	assert.ErrorIs(t, err, embedded.ErrConfig)
	srv := jstest.Server(t)
	_, err = embedded.Start(embedded.Config{Port: srv.Port(), DataDir: t.TempDir(), StartTimeout: time.Second})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "in use") || strings.Contains(err.Error(), "address"), err.Error())
}

// TestConsumeBoundedHoldsAndKeepsAlive: in bounded mode a consumer holds at
// most Concurrency + Prefetch messages, and keeps every one it holds alive
// from its arrival, so a message waiting behind a handler that runs longer
// than AckWait is not redelivered to a second consumer. AckWait is 2 s:
// renewals every second leave a second for a renewal to be late (on a
// machine running the whole suite under -race, half a second was not
// always enough, and a redelivered message then blocked its handler's send
// on first for good: the test hung until the package's deadline).
func TestConsumeBoundedHoldsAndKeepsAlive(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	const n, ackWait = 4, 2 * time.Second
	publishN(t, c, "r1", n)
	var mu sync.Mutex
	handled := map[string]int{}
	first := make(chan struct{}, 1)
	handler := func(_ context.Context, m *jetstream.Delivery) error {
		mu.Lock()
		handled[string(m.Data)]++
		mu.Unlock()
		assert.EqualValues(t, 1, m.Deliveries, "message %s", m.Data)
		select {
		case first <- struct{}{}:
		default: // only the first is waited for
		}
		time.Sleep(ackWait + ackWait/5) // the work, longer than AckWait
		return nil
	}
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "bounded", AckWait: ackWait,
		Concurrency: 1, Prefetch: 1}
	a, err := c.Consume(ctx(t), cc, handler)
	require.NoError(t, err)
	defer a.Stop(context.Background())
	<-first
	// While the first handler runs past AckWait, the consumer holds no more
	// than one running and one waiting.
	deadline := time.Now().Add(ackWait + 100*time.Millisecond)
	for time.Now().Before(deadline) {
		st, err := c.ConsumerState(ctx(t), jetstream.StreamDecisions, "bounded")
		require.NoError(t, err)
		require.LessOrEqual(t, st.AckPending, uint64(2), "held beyond Concurrency + Prefetch")
		time.Sleep(50 * time.Millisecond) // sampling the server's count
	}
	b, err := c.Consume(ctx(t), cc, handler)
	require.NoError(t, err)
	defer b.Stop(context.Background())
	require.Eventually(t, func() bool {
		st, err := c.ConsumerState(ctx(t), jetstream.StreamDecisions, "bounded")
		return err == nil && st.Pending == 0 && st.AckPending == 0
	}, 30*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		assert.Equal(t, 1, handled[fmt.Sprint(i)], "message %d handled once", i)
	}
}

// TestConsumeTimeoutEndsLease: a handler's context is cancelled at the
// consumer's Timeout with its cause, and the message stops being kept alive
// then: a handler that ignores its context loses the message to another
// consumer one AckWait later, while it still runs. Stop is bounded by
// its context.
func TestConsumeTimeoutEndsLease(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	cause := errors.New("too slow")
	release := make(chan struct{})
	causes := make(chan error, 1)
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "timed", AckWait: time.Second,
		Concurrency: 1, Prefetch: 1, Timeout: 200 * time.Millisecond, TimeoutCause: cause}
	hung, err := c.Consume(ctx(t), cc, func(ctx context.Context, _ *jetstream.Delivery) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release // ignores its cancelled context
		return nil
	})
	require.NoError(t, err)
	defer hung.Stop(context.Background())
	defer close(release)
	require.ErrorIs(t, <-causes, cause)
	// It takes nothing more (its waiting room would otherwise take the
	// redelivery); its handler still runs.
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, hung.Stop(sctx), context.DeadlineExceeded)
	began := time.Now()
	redelivered := make(chan uint64, 1)
	other, err := c.Consume(ctx(t), cc, func(_ context.Context, m *jetstream.Delivery) error {
		redelivered <- m.Deliveries
		return nil
	})
	require.NoError(t, err)
	defer other.Stop(context.Background())
	select {
	case d := <-redelivered:
		assert.EqualValues(t, 2, d)
		assert.Less(t, time.Since(began), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the message of a timed-out handler was kept alive")
	}
}

// A publisher's own Status header is stored with its message; a batched
// read must take it for a message, not for the server's end of batch or
// error (an agent could otherwise blind every reader of another run's
// AG-UI events).
func TestBatchIgnoresStoredStatusHeaders(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	subject, err := c.Namespace().AGUI("refunds", "run-1")
	require.NoError(t, err)
	for i, status := range []string{"503", "404", "204", ""} {
		h := jetstream.Header{}
		if status != "" {
			h["Status"] = []string{status}
			h["Description"] = []string{"hostile"}
		}
		_, err := c.Publish(ctx(t), subject, []byte(fmt.Sprintf(`{"n":%d}`, i)), "", h)
		require.NoError(t, err)
	}
	msgs, err := c.Messages(ctx(t), jetstream.StreamAGUI, subject, 0, 256)
	require.NoError(t, err)
	require.Len(t, msgs, 4, "every stored message is read")
	for i, m := range msgs {
		assert.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(m.Data))
	}
	msgs, err = c.Messages(ctx(t), jetstream.StreamAGUI, subject, msgs[1].Sequence, 256)
	require.NoError(t, err)
	assert.Len(t, msgs, 3, "a read starting at a stored 404 is not empty")
}

// A publisher's own Nats-Subject, Nats-Sequence and Nats-Time-Stamp are
// stored with its message and come first in a direct get's answer; a read
// takes the server's (an agent could otherwise have its message read as
// another run's, at a sequence of its choosing).
func TestReadsIgnoreStoredServerHeaders(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	subject, err := c.Namespace().AGUI("refunds", "run-1")
	require.NoError(t, err)
	h := jetstream.Header{"Nats-Subject": {"interlock.agui.refunds.victim"}, "Nats-Sequence": {"424242"},
		"Nats-Time-Stamp": {"2001-01-01T00:00:00Z"}}
	ack, err := c.Publish(ctx(t), subject, []byte(`{"n":1}`), "", h)
	require.NoError(t, err)
	msgs, err := c.Messages(ctx(t), jetstream.StreamAGUI, subject, 0, 256)
	require.NoError(t, err)
	last, err := c.LastMsg(ctx(t), jetstream.StreamAGUI, subject)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	for _, m := range []jetstream.StoredMsg{msgs[0], last} {
		assert.Equal(t, subject, m.Subject)
		assert.Equal(t, ack.Sequence, m.Sequence)
		assert.Greater(t, m.Time.Year(), 2001)
	}
}

// TestReadsKeepStoredServerHeadersWithoutDirectGets: on a stream that
// allows no direct gets (the decisions stream) nats.go reads with
// $JS.API.STREAM.MSG.GET, whose answer holds the stored headers alone. A
// message the server stored from an answer it sent there carries the
// server's headers as stored, once each, and reads must keep them so
// CheckPublished refuses it; before, the one value was taken for the
// server's own and dropped, and the message passed for a client's.
func TestReadsKeepStoredServerHeadersWithoutDirectGets(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	subject, err := c.Namespace().ResumeAs("run-1", "ada")
	require.NoError(t, err)
	h := jetstream.Header{"Nats-Stream": {"INTERLOCK_AGUI"}, "Nats-Subject": {"interlock.agui.billing.carrier"},
		"Nats-Sequence": {"7"}, "Nats-Time-Stamp": {"2026-12-04T00:00:00Z"}}
	ack, err := c.Publish(ctx(t), subject, []byte(`{}`), "ada:forged", h)
	require.NoError(t, err)
	for _, read := range []func() (jetstream.StoredMsg, error){
		func() (jetstream.StoredMsg, error) { return c.LastMsg(ctx(t), jetstream.StreamDecisions, subject) },
		func() (jetstream.StoredMsg, error) {
			msgs, err := c.Messages(ctx(t), jetstream.StreamDecisions, subject, 0, 1)
			if err != nil || len(msgs) != 1 {
				return jetstream.StoredMsg{}, fmt.Errorf("read %d messages: %v", len(msgs), err)
			}
			return msgs[0], nil
		},
	} {
		m, err := read()
		require.NoError(t, err)
		assert.Equal(t, subject, m.Subject)
		assert.Equal(t, ack.Sequence, m.Sequence)
		assert.Error(t, jetstream.CheckPublished(m.Header), "a stored answer passes for a client's publish: %v", m.Header)
	}
}

// TestConsumerStopWaitsForTheWork: Stop takes no more messages and waits
// for the handler under way while its context lasts, without cancelling
// it, and Stopped is closed once Stop has returned.
func TestConsumerStopWaitsForTheWork(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 2)
	began, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	var cancelled atomic.Bool
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "waited", Concurrency: 1, Prefetch: 1}
	k, err := c.Consume(ctx(t), cc, func(ctx context.Context, _ *jetstream.Delivery) error {
		if handled.Add(1) == 1 {
			close(began)
		}
		<-release
		cancelled.Store(ctx.Err() != nil)
		return nil
	})
	require.NoError(t, err)
	<-began
	stopped := make(chan error, 1)
	go func() { stopped <- k.Stop(ctx(t)) }()
	select {
	case <-k.Stopped():
		t.Fatal("Stopped closed while the handler runs")
	case err := <-stopped:
		t.Fatalf("Stop returned while the handler runs: %v", err)
	case <-time.After(100 * time.Millisecond): // Stop is waiting: what is checked is that it has not returned
	}
	close(release)
	require.NoError(t, <-stopped)
	<-k.Stopped()
	assert.False(t, cancelled.Load(), "the handler was not cancelled")
	assert.EqualValues(t, 1, handled.Load(), "nothing more was taken after Stop")
}

// TestConsumersStopWithinDeadline: Consumers.Stop waits for the handlers
// while its context lasts, then cancels them with their StopCause and
// returns an error wrapping the context's; Stopped is closed once it has
// returned, and not before.
func TestConsumersStopWithinDeadline(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	publishN(t, c, "r1", 1)
	cause := errors.New("stopping")
	began := make(chan struct{})
	causes := make(chan error, 1)
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "stopped", Concurrency: 1, Prefetch: 1, StopCause: cause}
	cons, err := c.Consume(ctx(t), cc, func(ctx context.Context, _ *jetstream.Delivery) error {
		close(began)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	require.NoError(t, err)
	var set jetstream.Consumers
	set.Add(cons)
	<-began
	select {
	case <-set.Stopped():
		t.Fatal("Stopped closed before Stop")
	default:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, set.Stop(sctx), context.DeadlineExceeded)
	require.ErrorIs(t, <-causes, cause, "the handler is cancelled with its StopCause")
	select {
	case <-set.Stopped():
	default:
		t.Fatal("Stopped not closed once Stop returned")
	}
	require.NoError(t, set.Stop(context.Background()), "a second Stop is harmless")
}

// TestConsumeBoundedPullsOncePerBatch: in bounded mode the consumer keeps
// one pull request open for all the room it has, rather than a new request
// each time a handled message frees a place. On a cluster every pull
// request is two Raft entries of the consumer (its arrival and its end),
// so a request per message cost six fsyncs per message on three nodes
// (issue 25, docs/benchmarks.md). Twenty messages handled one after
// another, well within one request's wait, take one request per five (the
// room: Concurrency + Prefetch) and the one still open: five, where a
// request per freed place took eleven to twenty.
func TestConsumeBoundedPullsOncePerBatch(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	spy, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer spy.Close()
	var pulls atomic.Int32
	sub, err := spy.Subscribe("$JS.API.CONSUMER.MSG.NEXT.>", func(*nats.Msg) { pulls.Add(1) })
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	handled := make(chan struct{}, 1)
	k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "pulls",
		Concurrency: 4, Prefetch: 1}, func(context.Context, *jetstream.Delivery) error {
		handled <- struct{}{}
		return nil
	})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	subject, _ := c.Namespace().Resume("r1")
	const n = 20
	for i := range n {
		_, err := c.Publish(ctx(t), subject, []byte(fmt.Sprint(i)), "", nil)
		require.NoError(t, err)
		select {
		case <-handled:
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not handled", i)
		}
	}
	require.NoError(t, sub.Unsubscribe())
	const room = 4 + 1
	assert.LessOrEqual(t, pulls.Load(), int32(n/room+1), "pull requests for %d messages handled one at a time", n)
}

// TestConsumeBacksOffWhileRequestsFail: a bounded consumer whose pull
// requests the server refuses, every one (status 400: an operator made the
// durable consumer one of priority groups, and a request names none), waits
// longer after each refusal and says why at warning level, rather than
// asking again at once and logging at debug. Every request is work for the
// server (on a cluster two Raft entries of the consumer), and a worker
// spinning on them takes a core of its own while nobody is told.
func TestConsumeBacksOffWhileRequestsFail(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "refused", Concurrency: 2, Prefetch: 1}
	spy, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer spy.Close()
	js, err := njs.New(spy)
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx(t), c.StreamName(jetstream.StreamDecisions), njs.ConsumerConfig{
		Durable: "refused", AckPolicy: njs.AckExplicitPolicy,
		PriorityPolicy: njs.PriorityPolicyOverflow, PriorityGroups: []string{"jobs"}})
	require.NoError(t, err)
	var pulls atomic.Int32
	sub, err := spy.Subscribe("$JS.API.CONSUMER.MSG.NEXT.>", func(*nats.Msg) { pulls.Add(1) })
	require.NoError(t, err)
	require.NoError(t, spy.Flush())

	var logs syncbuf.Buffer
	worker, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	require.NoError(t, err)
	defer worker.Close()
	cc.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	k, err := worker.Consume(ctx(t), cc, func(context.Context, *jetstream.Delivery) error { return nil })
	require.NoError(t, err)
	defer k.Stop(context.Background())
	// Three seconds of refused requests (the window measured): with waits
	// that double from a tenth of a second, about five; asking again at
	// once, hundreds.
	<-time.After(3 * time.Second)
	require.NoError(t, sub.Unsubscribe())
	assert.Positive(t, pulls.Load())
	assert.LessOrEqual(t, pulls.Load(), int32(8), "pull requests in 3 s while the server refuses every one")
	assert.Contains(t, logs.String(), "level=WARN", "the refusal is a warning")
	assert.Contains(t, logs.String(), "bad request", "the warning says why")
}

// TestConsumeAsksWithinTheConsumersLimits: a bounded consumer asks within
// the limits an operator set on the durable consumer it binds to, rather
// than for all its room in one request of ten seconds. Asked beyond them,
// the server refuses every request (status 409 "Exceeded MaxRequestBatch",
// "Exceeded MaxRequestExpires"), so the worker got no work at all until
// someone raised the limit. Limits found when binding are followed from the
// first request, and a limit lowered while the consumer runs from the
// request after the first one it refuses.
func TestConsumeAsksWithinTheConsumersLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		later   bool
		batched bool
		limit   func(*njs.ConsumerConfig)
	}{
		{"batch, set before", false, false, func(c *njs.ConsumerConfig) { c.MaxRequestBatch = 1 }},
		{"expires, set before", false, false, func(c *njs.ConsumerConfig) { c.MaxRequestExpires = 2 * time.Second }},
		{"batch and expires, set while it runs", true, false, func(c *njs.ConsumerConfig) {
			c.MaxRequestBatch, c.MaxRequestExpires = 2, time.Second
		}},
		// The batched mode (the coordinator's consumers) read the limits
		// only when it started: every later request was refused until the
		// coordinator restarted (4 of 12 handled).
		{"batched: batch and expires, set while it runs", true, true, func(c *njs.ConsumerConfig) {
			c.MaxRequestBatch, c.MaxRequestExpires = 1, time.Second
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := jstest.Server(t)
			c := jstest.Client(t, srv)
			cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "limited", Concurrency: 2, Prefetch: 3}
			if tc.batched {
				// Batches of four: nats.go asks again after two, beyond the
				// new limit.
				cc = jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "limited", MaxAckPending: 4}
			}
			require.NoError(t, c.CreateConsumer(ctx(t), cc))
			js := adminJS(t, srv)
			limit := func() {
				cons, err := js.Consumer(ctx(t), c.StreamName(jetstream.StreamDecisions), "limited")
				require.NoError(t, err)
				edited := cons.CachedInfo().Config
				tc.limit(&edited)
				_, err = js.UpdateConsumer(ctx(t), c.StreamName(jetstream.StreamDecisions), edited)
				require.NoError(t, err)
			}
			if !tc.later {
				limit()
			}
			var logs syncbuf.Buffer
			worker, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
			require.NoError(t, err)
			defer worker.Close()
			cc.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			handleAll(t, worker, cc, c, 12, func() {
				if tc.later {
					limit()
				}
			}, logs.String)
			if tc.later {
				assert.Contains(t, logs.String(), "request limits changed", "the change is a warning")
			} else {
				assert.NotContains(t, logs.String(), "refused", "no request beyond the consumer's limits")
			}
		})
	}
}

// TestConsumeBatchedAsksWithinTheConsumersLimits: the batched mode (the
// coordinator's consumers) asked for batches of 256 in requests of 30 s,
// which a consumer whose operator set max_batch or max_expires lower
// refuses every time: the coordinator got no input at all.
func TestConsumeBatchedAsksWithinTheConsumersLimits(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	js := adminJS(t, srv)
	_, err := js.CreateConsumer(ctx(t), c.StreamName(jetstream.StreamDecisions), njs.ConsumerConfig{Durable: "batched",
		AckPolicy: njs.AckExplicitPolicy, MaxRequestBatch: 2, MaxRequestExpires: 2 * time.Second})
	require.NoError(t, err)
	handleAll(t, c, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "batched"}, c, 5, nil, nil)
}

// TestConsumeBatchedOutlivesItsConsumer: nats.go ends a consume for good
// when its consumer is deleted; the batched mode (the coordinator's
// consumers) then consumed nothing more, silently, until the process
// restarted. It binds to the consumer again (a client that provisions
// creates it again) and consumes on.
func TestConsumeBatchedOutlivesItsConsumer(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	require.True(t, c.Provisioner())
	js := adminJS(t, srv)
	var logs syncbuf.Buffer
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "outlived",
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	handleAll(t, c, cc, c, 6, func() {
		require.NoError(t, js.DeleteConsumer(ctx(t), c.StreamName(jetstream.StreamDecisions), "outlived"))
	}, logs.String)
	assert.Contains(t, logs.String(), "consuming ended", "said, not silent")
}

// TestConsumeKeepsTheOperatorsRequestLimits: a worker whose client
// provisions updates its durable consumer when it binds; it keeps the
// limits an operator set on the consumer's pull requests, where it cleared
// them (and could not bind at all to one whose MaxWaiting was set, which
// the server refuses to change).
func TestConsumeKeepsTheOperatorsRequestLimits(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	require.True(t, c.Provisioner())
	js := adminJS(t, srv)
	stream := c.StreamName(jetstream.StreamDecisions)
	_, err := js.CreateConsumer(ctx(t), stream, njs.ConsumerConfig{Durable: "kept", AckPolicy: njs.AckExplicitPolicy,
		MaxRequestBatch: 2, MaxRequestExpires: 3 * time.Second, MaxRequestMaxBytes: 1 << 20, MaxWaiting: 7})
	require.NoError(t, err)
	handleAll(t, c, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "kept", Concurrency: 2, Prefetch: 2},
		c, 5, func() {
			cons, err := js.Consumer(ctx(t), stream, "kept")
			require.NoError(t, err)
			have := cons.CachedInfo().Config
			assert.Equal(t, 2, have.MaxRequestBatch)
			assert.Equal(t, 3*time.Second, have.MaxRequestExpires)
			assert.Equal(t, 1<<20, have.MaxRequestMaxBytes)
			assert.Equal(t, 7, have.MaxWaiting)
		}, nil)
}

// adminJS is a JetStream context of a connection of its own to srv, for
// what an operator does beside the client under test.
func adminJS(t *testing.T, srv *embedded.Server) njs.JetStream {
	t.Helper()
	admin, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	js, err := njs.New(admin)
	require.NoError(t, err)
	return js
}

// handleAll consumes cc through consumer, runs started (when set) once
// the consumer runs, publishes n messages through publisher and waits for
// every one to be handled; log (when set) is shown when they are not.
func handleAll(t *testing.T, consumer *jetstream.Client, cc jetstream.ConsumeConfig, publisher *jetstream.Client, n int,
	started func(), log func() string) {
	t.Helper()
	handled := make(chan struct{}, n+8) // room for a redelivery or two: a handler never blocks
	k, err := consumer.Consume(ctx(t), cc, func(context.Context, *jetstream.Delivery) error {
		handled <- struct{}{}
		return nil
	})
	require.NoError(t, err)
	defer k.Stop(context.Background())
	if started != nil {
		started()
	}
	publishN(t, publisher, "r1", n)
	for i := range n {
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			msg := ""
			if log != nil {
				msg = log()
			}
			t.Fatalf("%d of %d messages handled\n%s", i, n, msg)
		}
	}
}

// A consumer loop keeps a long handler's message for as long as the
// consumer it bound waits for acks, not for what its own configuration
// says: a worker left at the default bound to a consumer an operator gave
// a short ack wait renewed every 15 s, and the server handed the message
// to another handler while it ran (both modes). An ack wait lowered while
// the handler runs is read again (ConfigRead) and the message renewed at
// once: its next renewal, set by the old ack wait, would have come after
// the server handed it on.
func TestConsumeHoldsForTheConsumersAckWait(t *testing.T) {
	t.Parallel()
	const short = 3 * time.Second
	for _, tc := range []struct {
		name  string
		later bool
		cc    jetstream.ConsumeConfig
	}{
		{"bounded", false, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "short", Concurrency: 2, Prefetch: 1}},
		{"batched", false, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "short", Concurrency: 2}},
		{"bounded, lowered while it runs", true,
			jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "short", Concurrency: 1, Prefetch: 1}},
		{"batched, lowered while it runs", true, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "short", Concurrency: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := jstest.Server(t)
			c := jstest.Client(t, srv)
			set := tc.cc
			set.AckWait = short
			if tc.later {
				set.AckWait = 30 * time.Second
			}
			require.NoError(t, c.CreateConsumer(ctx(t), set))
			worker, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
			require.NoError(t, err)
			defer worker.Close()
			var logs syncbuf.Buffer
			cc := tc.cc
			cc.ConfigRead = 200 * time.Millisecond
			cc.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			deliveries := make(chan uint64, 4)
			lowered := make(chan struct{})
			finished := make(chan struct{})
			again := make(chan struct{})
			var once sync.Once
			k, err := worker.Consume(ctx(t), cc, func(_ context.Context, d *jetstream.Delivery) error {
				deliveries <- d.Deliveries
				if d.Deliveries > 1 {
					once.Do(func() { close(again) })
					return nil
				}
				if tc.later {
					<-lowered
				}
				// Over twice the consumer's ack wait, or until the server
				// has handed the message out again.
				select {
				case <-again:
				case <-time.After(short*2 + time.Second):
				}
				close(finished)
				return nil
			})
			require.NoError(t, err)
			defer k.Stop(context.Background())
			publishN(t, c, "r1", 1)
			require.Equal(t, uint64(1), <-deliveries)
			if tc.later {
				// Held now, renewed next in 15 s: lower the ack wait to 3.
				js := adminJS(t, srv)
				cons, err := js.Consumer(ctx(t), c.StreamName(jetstream.StreamDecisions), "short")
				require.NoError(t, err)
				edited := cons.CachedInfo().Config
				edited.AckWait = short
				_, err = js.UpdateConsumer(ctx(t), c.StreamName(jetstream.StreamDecisions), edited)
				require.NoError(t, err)
				require.Eventually(t, func() bool { return strings.Contains(logs.String(), "ack wait changed") },
					short, 20*time.Millisecond, "the loop reads the consumer again")
				close(lowered)
			}
			<-finished
			select {
			case n := <-deliveries:
				t.Fatalf("delivered again (delivery %d) while its handler ran", n)
			default:
			}
		})
	}
}
