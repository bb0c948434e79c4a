// Package benchmark drives Interlock the way `interlock bench` measures it:
// full cycles (start, suspend, decide, replay, complete) and parked runs,
// with a coordinator and a worker on their own connections. Its figures are
// compared with internal/floor, the same durable steps in raw nats.go.
// RunSide runs the bench's scenarios for either side; the command keeps
// only its flags and the printing.
package benchmark

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/internal/waiter"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/subjects"
)

// Cycle runs Interlock cycles against one server, under the prefix "bench".
type Cycle struct {
	conns []*jetstream.Client
	co    *coordinator.Coordinator
	w     *processor.Worker
	// gw runs the gated and ungated agents (GatedCycles), asking the
	// coordinator's rules before suspending.
	gw     *processor.Worker
	client *processor.Client
	subs   []*jetstream.Subscription
	waits  waiter.Set
	admin  *jetstream.Client
	hooks  atomic.Pointer[Hooks]
}

// Hooks are called during Interlock's cycles when set (bench/peers times
// the resume and marks its fsync counts with them). They must be quick.
type Hooks struct {
	// Decide is called with the run id just before its decision is
	// published.
	Decide func(run string)
	// Resumed is called with the run id when the agent runs again after
	// the decision, before it returns; always before Run returns.
	Resumed func(run string)
}

// SetHooks sets the hooks of the cycles from now on (nil: none).
func (c *Cycle) SetHooks(h *Hooks) { c.hooks.Store(h) }

// New provisions the streams and starts a coordinator and a worker whose
// agent "bench" asks one question, on the server or cluster cfg names (the
// floor's Config: both sides run on the same servers with the same
// replicas).
func New(ctx context.Context, cfg floor.Config) (*Cycle, error) { return newCycle(ctx, cfg, false) }

// NewGated is New with the agents GatedRun measures: "bench_gated", whose
// one tool call an operator rule approves in one round trip (the worker
// asks, subjects.Ask), and "bench_ungated", the same call with no gate.
func NewGated(ctx context.Context, cfg floor.Config) (*Cycle, error) { return newCycle(ctx, cfg, true) }

// gatedRule approves bench_gated's call.
const gatedRule = `
rules:
  - name: bench-small-refunds
    match: 'tool == "refund" && arguments.amount < 20'
    action: approve
`

func newCycle(ctx context.Context, cfg floor.Config, gated bool) (*Cycle, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := &Cycle{}
	// On the benchmark's open server every role provisions, so each creates
	// its own consumers. The anonymous inbox prefix lets the coordinator
	// answer the benchmark's anonymous decisions directly.
	dial := func() (*jetstream.Client, error) {
		nc, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: cfg.URL, InboxPrefix: subjects.InboxPrefix("")},
			jetstream.Config{Prefix: "bench", Replicas: cfg.Replicas, RecordsStorage: jetstream.Storage(cfg.Records)})
		if err != nil {
			return nil, err
		}
		c.conns = append(c.conns, nc)
		return nc, nc.Provision(ctx)
	}
	admin, err := dial()
	if err != nil {
		c.Close()
		return nil, err
	}
	c.admin = admin
	c.client = processor.NewClient(admin)
	for _, t := range []subjects.EventType{subjects.EventSuspended, subjects.EventCompleted} {
		sub, err := admin.Subscribe("bench.events.*."+string(t), func(subject string, data []byte) {
			var ev subjects.Event
			if json.Unmarshal(data, &ev) == nil {
				c.waits.Signal(ev.RunID + "." + string(ev.Type))
			}
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.subs = append(c.subs, sub)
	}
	cc, err := dial()
	if err != nil {
		c.Close()
		return nil, err
	}
	// 32 handlers each, as many as the cycles docs/benchmarks.md runs in
	// flight: fewer (8 and 16 before) held Interlock back on a cluster and
	// without fsync.
	coCfg := coordinator.Config{Logger: quiet, Concurrency: 32}
	if gated {
		if coCfg.Policies, err = policy.Parse("bench", []byte(gatedRule)); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.co = coordinator.New(cc, coCfg)
	wc, err := dial()
	if err != nil {
		c.Close()
		return nil, err
	}
	c.w = processor.NewWorker(wc, processor.WorkerConfig{Logger: quiet, Concurrency: 32})
	_ = c.w.Register("bench", func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(processor.WithToolCall(ctx, "call"), processor.Request{Message: "ok?"})
		if err != nil {
			return nil, err
		}
		if h := c.hooks.Load(); h != nil && h.Resumed != nil {
			if info, ok := processor.RunOf(ctx); ok {
				h.Resumed(info.RunID)
			}
		}
		return d.Payload, nil
	})
	if err := c.co.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.w.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if gated {
		gc, err := dial()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.gw = processor.NewWorker(gc, processor.WorkerConfig{Logger: quiet, Concurrency: 32, AskRules: true})
		call := &processor.ToolCall{Tool: "refund", Arguments: map[string]any{"amount": 5}}
		_ = c.gw.Register("bench_gated", func(ctx context.Context, _ json.RawMessage) (any, error) {
			ctx = processor.WithToolCall(ctx, "call")
			if _, err := processor.Interrupt(ctx, processor.Request{Message: "refund?", Call: call}); err != nil {
				return nil, err
			}
			return true, nil
		})
		_ = c.gw.Register("bench_ungated", func(context.Context, json.RawMessage) (any, error) { return true, nil })
		if err := c.gw.Start(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// GatedRun runs one run of bench_gated (gated: an operator rule settles
// its call in one round trip) or bench_ungated, and returns the time from
// its start until its completion is recorded.
func (c *Cycle) GatedRun(ctx context.Context, id string, gated bool) (time.Duration, error) {
	agent := "bench_ungated"
	if gated {
		agent = "bench_gated"
	}
	start := time.Now()
	completed := c.waits.Wait(id + "." + string(subjects.EventCompleted))
	if _, err := c.client.Start(ctx, agent, nil, processor.WithRunID(id)); err != nil {
		return 0, err
	}
	if err := waiter.Await(ctx, completed); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Run does one full cycle of run id.
func (c *Cycle) Run(ctx context.Context, id string) (floor.Phases, error) {
	var p floor.Phases
	start := time.Now()
	suspended := c.waits.Wait(id + "." + string(subjects.EventSuspended))
	completed := c.waits.Wait(id + "." + string(subjects.EventCompleted))
	if _, err := c.client.Start(ctx, "bench", nil, processor.WithRunID(id)); err != nil {
		return p, err
	}
	if err := waiter.Await(ctx, suspended); err != nil {
		return p, err
	}
	p.Suspend = time.Since(start)
	if h := c.hooks.Load(); h != nil && h.Decide != nil {
		h.Decide(id)
	}
	decided := time.Now()
	if _, err := c.client.Decide(ctx, processor.DecisionRequest{RunID: id,
		InterruptID: processor.InterruptID(id, "call", 0), Status: subjects.StatusResolved, Payload: true}); err != nil {
		return p, err
	}
	if err := waiter.Await(ctx, completed); err != nil {
		return p, err
	}
	p.Replay, p.Total = time.Since(decided), time.Since(start)
	return p, nil
}

// Park starts run id and returns once it is suspended.
func (c *Cycle) Park(ctx context.Context, id string) error {
	suspended := c.waits.Wait(id + "." + string(subjects.EventSuspended))
	if _, err := c.client.Start(ctx, "bench", nil, processor.WithRunID(id)); err != nil {
		return err
	}
	return waiter.Await(ctx, suspended)
}

// Bytes is what Interlock's streams and buckets store.
func (c *Cycle) Bytes(ctx context.Context) (uint64, error) { return c.admin.StoredBytes(ctx) }

// Close stops the loops and the connections.
func (c *Cycle) Close() {
	for _, s := range c.subs {
		s.Unsubscribe()
	}
	if c.w != nil {
		_ = c.w.Stop(context.Background())
	}
	if c.gw != nil {
		_ = c.gw.Stop(context.Background())
	}
	if c.co != nil {
		_ = c.co.Stop(context.Background())
	}
	for _, nc := range c.conns {
		nc.Close()
	}
}
