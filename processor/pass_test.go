package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// TestBurstWithWorkerJoining: a burst of slow single-pass runs arrives at
// one worker, and a second worker joins a moment later. The first worker
// holds no more than it runs plus a small prefetch and keeps what it holds
// alive, so nothing it holds is redelivered to the second: every body runs
// once.
func TestBurstWithWorkerJoining(t *testing.T) {
	t.Parallel()
	const runs = 12
	var calls counter
	started := make(chan struct{}, runs*2)
	agent := func(_ context.Context, in json.RawMessage) (any, error) {
		calls.inc(string(in))
		started <- struct{}{}
		time.Sleep(700 * time.Millisecond) // a slow model call
		return "done", nil
	}
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	worker := func() {
		w := NewWorker(h.conn(), WorkerConfig{AckWait: 2 * time.Second, Concurrency: 1, Logger: quiet})
		require.NoError(t, w.Register("slow", agent))
		require.NoError(t, w.Start(context.Background()))
		t.Cleanup(func() { stopWorker(t, w) })
	}
	worker()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = h.start("slow", strconv.Itoa(i))
	}
	<-started // the first worker has its burst
	worker()
	for _, id := range ids {
		assert.Equal(t, subjects.RunCompleted, h.waitFor(id, Finished).Status)
	}
	for i := range runs {
		assert.Equal(t, 1, calls.get(strconv.Quote(strconv.Itoa(i))), "body of run %d", i)
	}
}

// spawnNATS runs nats-server with JetStream as a separate process with its
// store in dir, fsyncing every write before acknowledging it, and waits
// until it accepts connections. It listens on port, or on one the kernel
// picks when port is 0; it returns the port (a restart passes it back).
func spawnNATS(t *testing.T, dir string, port int) (*exec.Cmd, int) {
	t.Helper()
	if port == 0 {
		port = -1
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=nats", "INTERLOCK_TEST_NATS_DIR="+dir,
		"INTERLOCK_TEST_NATS_PORT="+strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := filepath.Join(dir, "ready")
	var got []byte
	require.Eventually(t, func() bool { var err error; got, err = os.ReadFile(ready); return err == nil }, 20*time.Second,
		10*time.Millisecond, "nats-server process did not start")
	require.NoError(t, os.Remove(ready))
	port, err := strconv.Atoi(string(got))
	require.NoError(t, err, "the helper's port")
	return cmd, port
}

// runNATSHelper is the main of a nats-server helper process. Once it
// listens it writes its port to dir/ready (renamed into place, so that the
// test never reads it half written).
func runNATSHelper() int {
	port, _ := strconv.Atoi(os.Getenv("INTERLOCK_TEST_NATS_PORT"))
	dir := os.Getenv("INTERLOCK_TEST_NATS_DIR")
	srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "js"), Port: port, Sync: embedded.SyncAlways})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	tmp := filepath.Join(dir, "ready.tmp")
	if os.WriteFile(tmp, []byte(strconv.Itoa(srv.Port())), 0o600) != nil || os.Rename(tmp, filepath.Join(dir, "ready")) != nil {
		return 6
	}
	select {} // until killed
}

// TestNATSServerKilled runs nats-server as a separate process and SIGKILLs
// it the moment the outcomes of a burst of passes are stored, while their
// work items are still unacknowledged (or their acks not yet written). The
// restarted server hands some of them out again, some with Deliveries = 1.
// No pass whose outcome is stored runs again.
func TestNATSServerKilled(t *testing.T) {
	t.Parallel()
	const runs = 24
	dir := t.TempDir()
	nats, port := spawnNATS(t, dir, 0)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)

	var calls counter
	agent := func(_ context.Context, in json.RawMessage) (any, error) {
		calls.inc(string(in))
		return "done", nil
	}
	conn := func() *jetstream.Client { return jstest.ClientURL(t, url) }
	admin := conn()
	client := NewClient(admin)
	co := coordinator.New(conn(), coordinator.Config{AckWait: time.Second, Logger: quiet})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	var stored atomic.Int32
	allStored := make(chan struct{})
	w := NewWorker(conn(), WorkerConfig{AckWait: time.Second, Concurrency: 8, Logger: quiet})
	w.fault = func(point string) bool {
		// Not a crash: a note that a pass's outcome is stored, before its
		// work item is acknowledged.
		if strings.HasPrefix(point, "after-outcome:") && stored.Add(1) == runs {
			close(allStored)
		}
		return false
	}
	require.NoError(t, w.Register("quick", agent))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { stopWorker(t, w) })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := make([]string, runs)
	for i := range ids {
		id, err := client.Start(ctx, "quick", strconv.Itoa(i))
		require.NoError(t, err)
		ids[i] = id
	}
	select {
	case <-allStored:
	case <-ctx.Done():
		t.Fatal("the passes did not all store their outcome")
	}
	require.NoError(t, nats.Process.Signal(syscall.SIGKILL))
	_ = nats.Wait()
	spawnNATS(t, dir, port) // on the same port: the clients reconnect to it

	for _, id := range ids {
		r, err := client.Wait(ctx, id, Finished)
		require.NoError(t, err)
		assert.Equal(t, subjects.RunCompleted, r.Status)
	}
	// Every work item is acknowledged in the end: no redelivery is to come.
	require.Eventually(t, func() bool {
		n, err := admin.MsgCount(ctx, jetstream.StreamWork)
		return err == nil && n == 0
	}, 30*time.Second, 20*time.Millisecond)
	for i := range runs {
		assert.Equal(t, 1, calls.get(strconv.Quote(strconv.Itoa(i))), "body of run %d ran after its outcome was stored", i)
	}
}

// stopWorker stops w, letting its passes finish within 20 seconds.
func stopWorker(t testing.TB, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	assert.NoError(t, w.Stop(ctx))
}

// passWorker starts a worker for agent fn on h's server.
func (h *harness) passWorker(cfg WorkerConfig, fn AgentFunc, opts ...RegisterOption) *Worker {
	h.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	w := NewWorker(h.conn(), cfg)
	require.NoError(h.t, w.Register("a", fn, opts...))
	require.NoError(h.t, w.Start(context.Background()))
	return w
}

// TestStopCancelsBody: Stop waits for a running body only as long as its
// context allows, then cancels the body's context (cause ErrWorkerStopped)
// and returns. The pass publishes nothing; its work item goes back at once
// and another worker runs it.
func TestStopCancelsBody(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	first := h.passWorker(WorkerConfig{AckWait: 5 * time.Second}, func(ctx context.Context, _ json.RawMessage) (any, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	t.Cleanup(func() { stopWorker(t, first) })
	run := h.start("a", nil)
	<-started
	const budget = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	began := time.Now()
	err := first.Stop(ctx)
	took := time.Since(began)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, budget+time.Second, "Stop is bounded by its context")
	select {
	case c := <-cause:
		require.ErrorIs(t, c, ErrWorkerStopped)
	case <-time.After(5 * time.Second):
		t.Fatal("the body's context was not cancelled")
	}
	second := h.passWorker(WorkerConfig{AckWait: 5 * time.Second}, func(context.Context, json.RawMessage) (any, error) {
		return "second", nil
	})
	t.Cleanup(func() { stopWorker(t, second) })
	// Taken at once, not after AckWait: the stopped pass handed its item back.
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	rec, err := h.client.Wait(ctx, run, Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, rec.Status, "the stop did not fail the run")
	assert.JSONEq(t, `"second"`, string(rec.Result))
}

// TestStopAndCancel cancels the running body at once and returns when it
// has returned.
func TestStopAndCancel(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	started := make(chan struct{})
	returned := make(chan struct{})
	w := h.passWorker(WorkerConfig{}, func(ctx context.Context, _ json.RawMessage) (any, error) {
		close(started)
		defer close(returned)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	h.start("a", nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	require.NoError(t, w.StopAndCancel(ctx))
	assert.Less(t, time.Since(began), 5*time.Second)
	select {
	case <-returned:
	default:
		t.Fatal("StopAndCancel returned before the body did")
	}
}

// TestHungBodyTakenOver: a body that ignores its cancelled context is left
// behind after its timeout, and the pass runs again only once the worker
// that ran it gave it up, after the AckWait/2 it grants a cancelled body
// to return (TestRunBodyGrace times that grace). A body that honours its
// context is never running when the pass starts again.
//
// It used to time the second start from the first body's start, which
// comes after the timeout's clock starts (the delivery, then the check
// that the pass is not done yet): under load that check took more than
// the slack and the test failed though the pass was taken over in order.
func TestHungBodyTakenOver(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	const timeout, ackWait = 300 * time.Millisecond, time.Second
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // the hung body, left behind, ends with the test
	var calls atomic.Int32
	var logs syncbuf.Buffer
	gaveUp := make(chan bool, 1)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		if calls.Add(1) == 1 {
			<-release // hung: ignores its context
			return "too late", nil
		}
		gaveUp <- strings.Contains(logs.String(), "pass timed out; will be retried")
		return "taken over", nil
	}
	for range 2 {
		w := h.passWorker(WorkerConfig{AckWait: ackWait, Concurrency: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
			agent, WithPassTimeout(timeout))
		t.Cleanup(func() { stopWorker(t, w) })
	}
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `"taken over"`, string(rec.Result))
	assert.True(t, <-gaveUp, "the pass ran again only after the worker that ran it gave it up")
	assert.Equal(t, int32(2), calls.Load())
}

// TestRunBodyGrace: a body whose context has ended is waited for grace
// more, and no longer; one that returns within it is reported.
func TestRunBodyGrace(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	defer close(release)
	began := time.Now()
	_, _, returned := runBody(ctx, func(context.Context, json.RawMessage) (any, error) {
		<-release
		return nil, nil
	}, nil, func() time.Duration { return grace })
	assert.False(t, returned, "a body still running after the grace is left behind")
	assert.GreaterOrEqual(t, time.Since(began), grace, "left behind only after the grace")

	late := make(chan struct{})
	result, err, returned := runBody(ctx, func(context.Context, json.RawMessage) (any, error) {
		<-late
		return "in time", nil
	}, nil, func() time.Duration { close(late); return time.Minute })
	require.True(t, returned, "a body that returns within the grace is reported")
	require.NoError(t, err)
	assert.Equal(t, "in time", result)
}

// TestHungBodyGraceIsTheConsumers: the grace a timed-out body gets is
// half the ack wait of the consumer the worker bound, not of its own
// configuration. A worker left at its default (30 s) bound to a consumer
// an operator gave 2 s waited 15 s for its body, while the server handed
// the pass to another worker 2 s after the timeout: the pass ran again
// while the first worker still waited to report it.
func TestHungBodyGraceIsTheConsumers(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	const timeout, ackWait = 300 * time.Millisecond, 2 * time.Second
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // the hung body, left behind, ends with the test
	var calls atomic.Int32
	var logs syncbuf.Buffer
	cutFirst := make(chan bool, 1)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		if calls.Add(1) == 1 {
			<-release // hung: ignores its context
			return "too late", nil
		}
		cutFirst <- strings.Contains(logs.String(), "pass timed out")
		return "taken over", nil
	}
	// The operator's consumer: a 2 s ack wait.
	stopWorker(t, h.passWorker(WorkerConfig{AckWait: ackWait}, agent))
	for range 2 {
		// Agents' users bind to the consumer as it is.
		c, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URL: h.srv.URL()}, jetstream.Config{})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		w := NewWorker(c, WorkerConfig{Concurrency: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, w.Register("a", agent, WithPassTimeout(timeout)))
		require.NoError(t, w.Start(context.Background()))
		t.Cleanup(func() { stopWorker(t, w) })
	}
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `"taken over"`, string(rec.Result))
	assert.True(t, <-cutFirst, "the first worker gave the pass up before it ran again")
	assert.Equal(t, int32(2), calls.Load())
}

// TestPassTimeoutPolicy: a body that honours its context returns when its
// pass times out; the pass is retried, never while the timed-out body still
// runs, and when every attempt times out the run fails with ErrPassTimeout.
func TestPassTimeoutPolicy(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	var running, overlaps, calls atomic.Int32
	causes := make(chan error, 8)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		calls.Add(1)
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	for range 2 {
		w := h.passWorker(WorkerConfig{AckWait: time.Second, MaxDeliver: 3}, agent, WithPassTimeout(200*time.Millisecond))
		t.Cleanup(func() { stopWorker(t, w) })
	}
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, ErrPassTimeout.Error())
	assert.Contains(t, rec.Error, "attempt 3 of 3")
	assert.Equal(t, int32(3), calls.Load(), "one body per attempt")
	assert.Zero(t, overlaps.Load(), "never two at once")
	for range 3 {
		assert.ErrorIs(t, <-causes, ErrPassTimeout)
	}
	err := NewWorker(h.conn(), WorkerConfig{}).Register("b", agent, WithPassTimeout(0))
	assert.ErrorIs(t, err, ErrInvalidOption)
}

// TestPassTimeoutBeforeTheBody: the pass's timeout can end before its body
// starts (under load, the worker's look-up of the run's outcomes took
// longer than a short timeout; here the timeout is a nanosecond, so it
// always does). Each attempt still counts as a timed-out pass: the run
// fails with ErrPassTimeout on the last one. The look-up failing with the
// pass's context used to end the attempt as a handler error, and on the
// last delivery the work item went to the dead letters with no outcome:
// the run never finished (TestPassTimeoutPolicy hung for its minute at
// load 17).
func TestPassTimeoutBeforeTheBody(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	w := h.passWorker(WorkerConfig{AckWait: 10 * time.Second, MaxDeliver: 3}, agent, WithPassTimeout(time.Nanosecond))
	t.Cleanup(func() { stopWorker(t, w) })
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, ErrPassTimeout.Error())
	assert.Contains(t, rec.Error, "attempt 3 of 3")
}

// TestClientWaitsTimeOut: with no coordinator to answer, Decide and Wait
// give up at the client's default deadline when the caller's context has
// none.
func TestClientWaitsTimeOut(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil) // no coordinator, no worker
	const budget = 300 * time.Millisecond
	cl := NewClient(h.admin, WithDecideTimeout(budget), WithWaitTimeout(budget))
	defer cl.Close()
	run := h.start("a", nil)

	began := time.Now()
	_, err := cl.Decide(context.Background(), DecisionRequest{RunID: run, InterruptID: "i", Status: subjects.StatusResolved})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "is stored; no verdict yet")
	assert.Less(t, time.Since(began), budget+2*time.Second)

	began = time.Now()
	_, err = cl.Wait(context.Background(), run, Finished)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(began), budget+2*time.Second)

	// A deadline of the caller's own wins over the default.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began = time.Now()
	_, err = cl.Wait(ctx, run, Finished)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(began), budget)

	def := NewClient(h.admin, WithDecideTimeout(0))
	assert.Equal(t, DefaultDecideTimeout, def.decideTimeout, "zero keeps the default")
	assert.Equal(t, DefaultWaitTimeout, def.waitTimeout)
}
