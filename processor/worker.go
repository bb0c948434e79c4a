package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// AgentFunc is an agent's body: one pass of a run. It runs again from the top
// on every replay. It returns the run's result, or an error: one matching
// ErrSuspended when it raised interrupts, one made with Retryable to run the
// pass again later, any other to fail the run.
type AgentFunc func(ctx context.Context, input json.RawMessage) (any, error)

// Typed adapts a body with typed input and output to an AgentFunc.
func Typed[In, Out any](fn func(ctx context.Context, in In) (Out, error)) AgentFunc {
	return func(ctx context.Context, input json.RawMessage) (any, error) {
		var in In
		if len(input) > 0 {
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, fmt.Errorf("input does not fit %T: %w", in, err)
			}
		}
		return fn(ctx, in)
	}
}

// PassEndEvent is the type of the marker a worker sends on a run's AG-UI
// subject after the last event of a pass.
const PassEndEvent = "interlock.pass_end"

// WorkerConfig is what a worker is.
type WorkerConfig struct {
	// Concurrency is the number of passes run at once per agent; default 4.
	Concurrency int
	// AckWait is how long a pass may go without a heartbeat before another
	// worker takes it; default 30s. Long passes send heartbeats themselves.
	AckWait time.Duration
	// MaxDeliver bounds attempts of one pass; default 10.
	MaxDeliver int
	Logger     *slog.Logger
	// Registry, when set, receives the worker's Prometheus metrics.
	Registry prometheus.Registerer
}

// Worker runs the passes of registered agents: it consumes work items,
// runs the body and publishes the pass's one outcome (suspension, completion
// or failure). It holds no run state between passes.
type Worker struct {
	client  *jetstream.Client
	cfg     WorkerConfig
	mu      sync.Mutex
	agents  map[string]AgentFunc
	running jetstream.Consumers
	schemas schema.Cache
	metrics *workerMetrics
	// fault, in tests, abandons a pass at a named point.
	fault fault.Hook
}

// NewWorker returns a worker publishing through c.
func NewWorker(c *jetstream.Client, cfg WorkerConfig) *Worker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{client: c, cfg: cfg, agents: map[string]AgentFunc{}, metrics: newWorkerMetrics(cfg.Registry)}
}

// Register adds an agent. Register before Start.
func (w *Worker) Register(name string, fn AgentFunc) error {
	if err := subjects.ValidateToken("agent", name); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.agents[name] = fn
	return nil
}

// Start consumes work for every registered agent until Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, fn := range w.agents {
		subject, err := w.client.Namespace().Work(name)
		if err != nil {
			return err
		}
		cons, err := w.client.Consume(ctx, jetstream.ConsumerConfig{
			Stream:         jetstream.StreamWork,
			Durable:        workerDurable(name),
			FilterSubjects: []string{subject},
			AckWait:        w.cfg.AckWait,
			MaxDeliver:     w.cfg.MaxDeliver,
			Concurrency:    w.cfg.Concurrency,
			Logger:         w.cfg.Logger,
		}, func(ctx context.Context, m *jetstream.Msg) error { return w.handle(ctx, name, fn, m) })
		if err != nil {
			w.running.Stop()
			return err
		}
		w.running.Add(cons)
	}
	return nil
}

// Stop stops taking work and waits for the passes under way.
func (w *Worker) Stop() { w.running.Stop() }

var errAbandoned = errors.New("abandoned by fault injection")

func (w *Worker) crash(point string) bool { return w.fault.Crash(point, w.client.Close) }

func (w *Worker) handle(ctx context.Context, agent string, fn AgentFunc, m *jetstream.Msg) error {
	work, err := subjects.DecodeWork(m.Data)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("work item: %w", err))
	}
	if work.Agent != agent {
		return jetstream.DeadLetter(fmt.Errorf("work item for agent %q arrived on %s", work.Agent, m.Subject))
	}
	if m.Deliveries > 1 {
		// A redelivery: the pass may have ended before its ack was lost.
		if done, err := w.passDone(ctx, work); err != nil || done {
			return err
		}
	}
	info := RunInfo{RunID: work.RunID, Agent: agent, ThreadID: work.ThreadID, Pass: work.Pass,
		TraceParent: trace.Child(m.Header.Get(trace.Header))}
	log := w.cfg.Logger.With("run", work.RunID, "agent", agent, "pass", work.Pass)
	p := newPass(info, work, &w.schemas)
	aguiSubject, err := w.client.Namespace().AGUI(work.RunID)
	if err != nil {
		return jetstream.DeadLetter(err)
	}
	p.emit = func(event any) error {
		data, err := json.Marshal(event)
		if err != nil {
			return fmt.Errorf("emit: %w", err)
		}
		return w.client.Notify(aguiSubject, data)
	}
	began := time.Now()
	result, bodyErr := runBody(context.WithValue(ctx, passKey{}, p), fn, work.Input)
	w.metrics.duration.WithLabelValues(agent).Observe(time.Since(began).Seconds())
	if w.crash("after-body:" + strconv.Itoa(work.Pass)) {
		return errAbandoned
	}
	var retry *retryableError
	if len(p.pending) == 0 && errors.As(bodyErr, &retry) {
		log.Warn("pass will be retried", "error", bodyErr)
		w.metrics.passes.WithLabelValues(agent, "retried").Inc()
		return bodyErr
	}
	subject, data, err := w.outcome(work, p, result, bodyErr)
	if err != nil {
		return err
	}
	msgID := work.RunID + ":" + strconv.Itoa(work.Pass)
	// The pass's AG-UI events end here: the marker follows them on their
	// subject, so a bridge knows it has them all before the outcome.
	end, _ := json.Marshal(map[string]any{"type": PassEndEvent, "pass": work.Pass})
	_ = w.client.Notify(aguiSubject, end)
	if _, err := w.client.Publish(ctx, subject, data, msgID, jetstream.Header{trace.Header: {info.TraceParent}}); err != nil {
		return err
	}
	if w.crash("after-outcome:" + strconv.Itoa(work.Pass)) {
		return errAbandoned
	}
	kind := subject[len(w.client.Namespace().Prefix())+1:]
	kind = kind[:strings.IndexByte(kind, '.')]
	w.metrics.passes.WithLabelValues(agent, kind).Inc()
	log.Debug("pass done", "outcome", kind)
	return nil
}

// passDone reports whether the runs stream already holds an outcome of
// work's pass or a later one.
func (w *Worker) passDone(ctx context.Context, work subjects.Work) (bool, error) {
	filter, err := w.client.Namespace().RunOutcomes(work.Agent, work.RunID)
	if err != nil {
		return false, err
	}
	last, err := w.client.LastMsg(ctx, jetstream.StreamRuns, filter)
	if errors.Is(err, jetstream.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var head struct{ Pass int }
	if json.Unmarshal(last.Data, &head) != nil {
		return false, nil
	}
	return head.Pass >= work.Pass, nil
}

func runBody(ctx context.Context, fn AgentFunc, input json.RawMessage) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("agent panicked: %v", r)
		}
	}()
	return fn(ctx, input)
}

// outcome builds the pass's one message. Interrupts raised in the pass make
// it a suspension whatever the body returned: nothing pending is ever
// skipped.
func (w *Worker) outcome(work subjects.Work, p *pass, result any, bodyErr error) (string, []byte, error) {
	ns := w.client.Namespace()
	now := time.Now().UTC()
	ref := work.PassRef
	ref.Version = subjects.Version
	p.mu.Lock()
	defer p.mu.Unlock()
	var msg any
	build := ns.Failed
	switch {
	case len(p.firstErrs) > 0:
		// A request that could not be published fails the run rather than
		// let the pass end without asking.
		bodyErr = errors.Join(p.firstErrs...)
	case len(p.pending) > 0:
		build = ns.Suspended
		msg = subjects.Suspension{PassRef: ref, Interrupts: p.pending, Journal: p.journal, SuspendedAt: now}
	case bodyErr == nil:
		raw, err := json.Marshal(result)
		if err != nil {
			bodyErr = fmt.Errorf("result cannot be marshalled: %w", err)
			break
		}
		build = ns.Completed
		msg = subjects.Completion{PassRef: ref, Result: raw, Journal: p.journal, CompletedAt: now}
	}
	if msg == nil {
		msg = subjects.Failure{PassRef: ref, Error: bodyErr.Error(), FailedAt: now}
	}
	subject, err := build(work.Agent, work.RunID)
	if err != nil {
		return "", nil, err
	}
	data, err := json.Marshal(msg)
	return subject, data, err
}
