package processor

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) {
	jstest.RunNode() // when this binary is started as a cluster node
	if role := os.Getenv(helperEnv); role == "nats" {
		os.Exit(runNATSHelper()) // a nats-server process for kill tests
	} else if role != "" {
		os.Exit(runHelper(role)) // a coordinator or worker process for kill tests
	}
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// harness is one embedded server with a coordinator, a worker and a client,
// each on its own connection, as separate processes would be.
type harness struct {
	t      *testing.T
	srv    *embedded.Server
	admin  *jetstream.Client
	client *Client
	co     *coordinator.Coordinator
	w      *Worker
	agents map[string]AgentFunc
	// nats is every connection's configuration (zero: jstest's default).
	nats []jetstream.Config
}

// testAckWait is the AckWait of the harness's coordinators and workers:
// how long a crashed one's message waits before it is redelivered. The
// survivors keep what they hold alive every AckWait/2. At 500 ms a body
// ran twice now and then (TestCrashConverges, its journaled step counted
// twice) on a machine running the whole suite in parallel under -race: a
// heartbeat 250 ms late lets the server hand a held item out again, the
// window docs/protocol.md names; one second leaves a heartbeat 500 ms of
// slack.
const testAckWait = time.Second

// testSchemaBudget is the harness coordinators' SchemaBudget: generous,
// so that a machine busy with parallel tests under -race does not refuse a
// small schema check as over budget (hostile_schema_test sets its own).
const testSchemaBudget = 10 * time.Second

func newHarness(t *testing.T, agents map[string]AgentFunc) *harness {
	t.Helper()
	h := newBareHarness(t, agents)
	h.startCoordinator(nil)
	h.startWorker(nil)
	return h
}

// newBareHarness starts the server and a client, and no coordinator or worker.
func newBareHarness(t *testing.T, agents map[string]AgentFunc) *harness {
	t.Helper()
	h := &harness{t: t, srv: jstest.Server(t), agents: agents}
	h.admin = jstest.Client(t, h.srv)
	h.client = NewClient(h.admin)
	return h
}

func (h *harness) conn() *jetstream.Client { return jstest.Client(h.t, h.srv, h.nats...) }

func (h *harness) startCoordinator(hook fault.Hook) *coordinator.Coordinator {
	co := coordinator.New(h.conn(), coordinator.Config{AckWait: testAckWait, SchemaBudget: testSchemaBudget, Logger: quiet})
	require.NoError(h.t, co.Start(fault.With(context.Background(), hook)))
	h.t.Cleanup(func() { _ = co.Stop(context.Background()) })
	h.co = co
	return co
}

func (h *harness) startWorker(fault func(string) bool) *Worker {
	w := NewWorker(h.conn(), WorkerConfig{AckWait: testAckWait, Logger: quiet})
	w.fault = fault
	for name, fn := range h.agents {
		require.NoError(h.t, w.Register(name, fn))
	}
	require.NoError(h.t, w.Start(context.Background()))
	h.t.Cleanup(func() { stopWorker(h.t, w) })
	h.w = w
	return w
}

// waitLimit bounds the harness's waits. Generous: it only matters when a
// test fails, and a machine busy with parallel -race tests can take many
// times longer than an idle one.
const waitLimit = time.Minute

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) start(agent string, input any, opts ...StartOption) string {
	h.t.Helper()
	id, err := h.client.Start(h.ctx(), agent, input, opts...)
	require.NoError(h.t, err)
	return id
}

func (h *harness) waitFor(run string, done func(*subjects.Run) bool) *subjects.Run {
	h.t.Helper()
	r, err := h.client.Wait(h.ctx(), run, done)
	require.NoError(h.t, err, "waiting for run %s", run)
	return r
}

// approveAll approves the one waiting interrupt of each of runs (parked by
// approvalAgent) and waits until every one has completed.
func (h *harness) approveAll(runs []string) {
	h.t.Helper()
	for _, r := range runs {
		rec, err := h.client.Run(h.ctx(), r)
		require.NoError(h.t, err)
		require.Len(h.t, rec.Pending(), 1, r)
		h.decide(r, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 2})
	}
	for _, r := range runs {
		assert.Equal(h.t, subjects.RunCompleted, h.waitFor(r, Finished).Status, r)
	}
}

// suspendedRuns starts n runs of agent and waits until each is suspended
// at its first pass.
func (h *harness) suspendedRuns(agent string, n int) []string {
	h.t.Helper()
	runs := make([]string, n)
	for i := range runs {
		runs[i] = h.start(agent, nil)
	}
	for _, r := range runs {
		h.suspendedAtPass(r, 0)
	}
	return runs
}

// waitListed waits until the pending index lists n interrupts.
func (h *harness) waitListed(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		p, err := h.client.Pending(h.ctx())
		return err == nil && len(p) == n
	}, waitLimit, 20*time.Millisecond, "%d interrupts listed", n)
}

// suspendedAtPass waits until run is suspended at pass.
func (h *harness) suspendedAtPass(run string, pass int) *subjects.Run {
	h.t.Helper()
	return h.waitFor(run, func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended && r.Pass == pass })
}

func (h *harness) decide(run, interrupt string, status subjects.Status, payload any) subjects.Verdict {
	h.t.Helper()
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: interrupt, Status: status, Payload: payload})
	require.NoError(h.t, err)
	require.Equal(h.t, subjects.OutcomeAccepted, v.Outcome, "verdict %+v", v)
	return v
}

func (h *harness) events(run string, t subjects.EventType) []subjects.Event {
	h.t.Helper()
	evs, err := h.client.Events(h.ctx(), run)
	require.NoError(h.t, err)
	var out []subjects.Event
	for _, e := range evs {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// waitEvents waits until run has n events of type t.
func (h *harness) waitEvents(run string, t subjects.EventType, n int) []subjects.Event {
	h.t.Helper()
	var evs []subjects.Event
	require.Eventually(h.t, func() bool {
		evs = h.events(run, t)
		return len(evs) >= n
	}, waitLimit, 20*time.Millisecond, "waiting for %d %s events of %s", n, t, run)
	return evs
}

// replays are run's decision_accepted events that queued a replay (their
// verdict says replay): one per replay pass scheduled.
func (h *harness) replays(run string) []subjects.Event {
	h.t.Helper()
	var out []subjects.Event
	for _, e := range h.events(run, subjects.EventDecisionAccepted) {
		if e.Verdict != nil && e.Verdict.Replay {
			out = append(out, e)
		}
	}
	return out
}

// counter counts calls, safe for concurrent passes.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// approvalAgent is the canonical agent: a journaled step, then a gated tool
// call, then the result built from the decision.
func approvalAgent(calls *counter) AgentFunc {
	return func(ctx context.Context, input json.RawMessage) (any, error) {
		calls.inc("body")
		quote, err := Step(ctx, "quote", func(context.Context) (int, error) {
			calls.inc("step")
			return 42, nil
		})
		if err != nil {
			return nil, err
		}
		tctx := WithToolCall(ctx, "call_refund")
		d, err := Interrupt(tctx, Request{Message: "refund?", ResponseSchema: json.RawMessage(
			`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)})
		if err != nil {
			return nil, err
		}
		var answer struct{ Amount float64 }
		if err := d.Decode(&answer); err != nil {
			return nil, err
		}
		return map[string]any{"quote": quote, "amount": answer.Amount, "approver": d.Approver}, nil
	}
}
