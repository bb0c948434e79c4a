package processor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// WorkerConfig is what a worker is.
type WorkerConfig struct {
	// Concurrency is the number of passes run at once per agent; default 4.
	Concurrency int
	// AckWait is how long a work item may go without a heartbeat before
	// another worker takes it, set on the agent's consumer by a worker
	// that provisions; zero keeps the consumer's (30s for a new one). The
	// worker sends a heartbeat for every item it holds every half of the
	// consumer's ack wait (as it last read it; a timed-out body gets as
	// long to return), so a long pass needs nothing of its own. Shorter
	// means a crashed worker's passes are taken over
	// sooner, at the cost of more heartbeats and of a pass being taken over
	// (and run twice) when its worker is cut off from NATS for longer.
	AckWait time.Duration
	// MaxDeliver bounds attempts of one pass; default 10.
	MaxDeliver int
	Logger     *slog.Logger
	// Registry, when set, receives the worker's Prometheus metrics.
	Registry prometheus.Registerer
	// AskRules makes Interrupt ask the coordinator, before suspending,
	// whether an operator rule settles the interrupt (protocol version 2,
	// subjects.Ask): a settled interrupt costs one round trip instead of a
	// suspension and a replay. Without an answer within AskTimeout the
	// pass suspends as usual. Turn it on where operator rules settle many
	// calls (interlock serve --policies); without rules it is one wasted
	// round trip per interrupt.
	AskRules bool
	// AskTimeout bounds one ask; default 2s.
	AskTimeout time.Duration
}

// Worker runs the passes of registered agents: it consumes work items,
// runs the body and publishes the pass's one outcome (suspension, completion
// or failure). It holds no run state between passes.
type Worker struct {
	client  *jetstream.Client
	cfg     WorkerConfig
	mu      sync.Mutex
	agents  map[string]registered
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
	if cfg.AckWait < 0 {
		cfg.AckWait = 0
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = 10
	}
	return &Worker{client: c, cfg: cfg, agents: map[string]registered{}, metrics: newWorkerMetrics()}
}

// DefaultPassTimeout is how long a pass may run when its agent was
// registered without WithPassTimeout.
const DefaultPassTimeout = 5 * time.Minute

// registered is a registered agent.
type registered struct {
	fn      AgentFunc
	timeout time.Duration
}

// RegisterOption adjusts how an agent's passes run.
type RegisterOption func(*registered) error

// WithPassTimeout bounds each pass of the agent (default
// DefaultPassTimeout); d must be positive. At the timeout the body's
// context is cancelled with cause ErrPassTimeout; what happens next is
// under "Running passes" in the package documentation.
func WithPassTimeout(d time.Duration) RegisterOption {
	return func(a *registered) error {
		if d <= 0 {
			return fmt.Errorf("%w: pass timeout %s is not positive", ErrInvalidOption, d)
		}
		a.timeout = d
		return nil
	}
}

// Register adds an agent. Register before Start.
func (w *Worker) Register(name string, fn AgentFunc, opts ...RegisterOption) error {
	if err := subjects.ValidateToken("agent", name); err != nil {
		return err
	}
	a := registered{fn: fn, timeout: DefaultPassTimeout}
	for _, o := range opts {
		if err := o(&a); err != nil {
			return fmt.Errorf("agent %s: %w", name, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.agents[name] = a
	return nil
}

// Start consumes work for every registered agent until Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.metrics.register(w.cfg.Registry); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	for name, a := range w.agents {
		cc, err := w.consumerConfig(name, a)
		if err != nil {
			return err
		}
		cons, err := w.client.Consume(ctx, cc, func(ctx context.Context, m *jetstream.Delivery) error { return w.handle(ctx, name, a, m) })
		if err != nil {
			_ = w.running.Stop(context.WithoutCancel(ctx))
			return err
		}
		w.running.Add(cons)
	}
	return nil
}

// consumerConfig is the durable consumer of agent's work items.
func (w *Worker) consumerConfig(agent string, a registered) (jetstream.ConsumeConfig, error) {
	work, err := w.client.Namespace().AgentWork(agent)
	if err != nil {
		return jetstream.ConsumeConfig{}, err
	}
	return jetstream.ConsumeConfig{
		Stream:         jetstream.StreamWork,
		Durable:        subjects.WorkerDurable(agent),
		FilterSubjects: work,
		AckWait:        w.cfg.AckWait,
		MaxDeliver:     w.cfg.MaxDeliver,
		Concurrency:    w.cfg.Concurrency,
		// At most one item beyond those running is held (or asked for).
		Prefetch:     1,
		Timeout:      a.timeout,
		TimeoutCause: ErrPassTimeout,
		StopCause:    ErrWorkerStopped,
		Logger:       w.cfg.Logger,
	}, nil
}

// Provision creates the durable consumers of the registered agents (their
// bodies are not called) through a client that has provisioned: this is
// `interlock provision --agent NAME`. Workers whose NATS user may not
// create consumers then bind to these at Start.
func (w *Worker) Provision(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, a := range w.agents {
		cc, err := w.consumerConfig(name, a)
		if err != nil {
			return err
		}
		if err := w.client.CreateConsumer(ctx, cc); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops taking work, hands the work items held but not started back
// at once, and waits for the passes under way to end. When ctx ends first,
// their contexts are cancelled (cause ErrWorkerStopped) and Stop returns an
// error wrapping ctx's without waiting any longer. A pass cut short this
// way publishes nothing; its work item goes back at once.
func (w *Worker) Stop(ctx context.Context) error { return w.running.Stop(ctx) }

// Stopped returns a channel closed once Stop or StopAndCancel has returned.
func (w *Worker) Stopped() <-chan struct{} { return w.running.Stopped() }

// StopAndCancel cancels the contexts of the passes under way (cause
// ErrWorkerStopped), then stops as Stop does: it waits within ctx for the
// bodies to return.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.running.Cancel(ErrWorkerStopped)
	return w.running.Stop(ctx)
}

var errAbandoned = errors.New("abandoned by fault injection")

func (w *Worker) crash(point string) bool { return w.fault.Crash(point, w.client.Close) }

func (w *Worker) handle(ctx context.Context, agent string, a registered, m *jetstream.Delivery) error {
	// A start or replay is a client's or the coordinator's publish, never
	// a JetStream API answer another user had the server send to this
	// subject (a start of this agent's, or a replay carrying decisions).
	if err := jetstream.CheckPublished(m.Header); err != nil {
		return jetstream.DeadLetter(fmt.Errorf("work item: %w", err))
	}
	work, err := subjects.DecodeWork(m.Data)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("work item: %w", err))
	}
	if work.Agent != agent {
		return jetstream.DeadLetter(fmt.Errorf("work item for agent %q arrived on %s", work.Agent, m.Subject))
	}
	addr, err := w.client.Namespace().Parse(m.Subject)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("work item: %w", err))
	}
	if addr.Kind == subjects.KindStart && !work.FirstPass() {
		// Only the coordinator publishes replays (on the work subject):
		// whoever may start a run may not hand a body decisions.
		return jetstream.DeadLetter(fmt.Errorf("%w: a work item on %s must be a first pass (pass 0, no decisions, no journal); "+
			"replays come from the coordinator", subjects.ErrMalformed, m.Subject))
	}
	// On every delivery, not only on redeliveries: a server that restarts
	// can hand out again, as a first delivery, an item whose outcome it
	// stored (consumer state is written in the background).
	key := workPassKey(m)
	if done, err := w.passDone(ctx, work, key); err != nil || done {
		return err
	}
	info := RunInfo{RunID: work.RunID, Agent: agent, ThreadID: work.ThreadID, Pass: work.Pass,
		TraceParent: trace.Child(m.Header.Get(trace.Header)), LastAttempt: int(m.Deliveries) >= w.cfg.MaxDeliver}
	log := w.cfg.Logger.With("run", work.RunID, "agent", agent, "pass", work.Pass)
	p := newPass(info, work, &w.schemas)
	if addr.Kind == subjects.KindStart {
		p.requester = addr.Requester
	}
	if w.cfg.AskRules {
		p.ask = w.asker(agent, work, p)
	}
	aguiSubject, err := w.client.Namespace().AGUI(agent, work.RunID)
	if err != nil {
		return jetstream.DeadLetter(err)
	}
	p.emit = w.emitter(ctx, p, work, key, aguiSubject)
	began := time.Now()
	result, bodyErr, returned := runBody(context.WithValue(ctx, passKey{}, p), a.fn, work.Input, func() time.Duration { return m.AckWait() / 2 })
	w.metrics.duration.WithLabelValues(agent).Observe(time.Since(began).Seconds())
	if w.crash("after-body:" + strconv.Itoa(work.Pass)) {
		return errAbandoned
	}
	if ctx.Err() != nil && (!returned || bodyErr != nil && !p.suspended()) {
		// The pass was cut short (timeout or stop) and has nothing to show.
		return w.cut(ctx, agent, a, m, work, info, log)
	}
	var retry *retryableError
	if !p.suspended() && errors.As(bodyErr, &retry) {
		log.Warn("pass will be retried", "error", bodyErr)
		w.metrics.passes.WithLabelValues(agent, "retried").Inc()
		return bodyErr
	}
	return w.report(ctx, work, key, p, result, bodyErr, info, log)
}

// workPassKey is the key of the pass m's work item starts (subjects.PassKey).
func workPassKey(m *jetstream.Delivery) string {
	return subjects.PassKey(m.Header.Get(jetstream.HeaderMsgID), m.Data)
}

// cut decides what becomes of a pass whose context ended before it had an
// outcome. Stopped with the worker: its item goes back at once. Timed out:
// it is retried after the consumer's backoff, and on the last attempt the
// run fails with ErrPassTimeout.
func (w *Worker) cut(ctx context.Context, agent string, a registered, m *jetstream.Delivery, work subjects.Work,
	info RunInfo, log *slog.Logger) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, ErrPassTimeout) {
		log.Info("pass stopped with the worker; its work item is handed back")
		w.metrics.passes.WithLabelValues(agent, "stopped").Inc()
		return jetstream.RetryAfter(0, cause)
	}
	err := fmt.Errorf("%w after %s (attempt %d of %d)", ErrPassTimeout, a.timeout, m.Deliveries, w.cfg.MaxDeliver)
	w.metrics.passes.WithLabelValues(agent, "timed_out").Inc()
	if int(m.Deliveries) < w.cfg.MaxDeliver {
		log.Warn("pass timed out; will be retried", "error", err)
		return err
	}
	log.Warn("pass timed out on its last attempt; the run fails", "error", err)
	return w.report(ctx, work, workPassKey(m), &pass{}, nil, err, info, log)
}

// outcomeRetry bounds how long a worker repeats an outcome publish refused
// during a leader election before it lets the pass run again: longer than
// an election (4 to 9 s with nats-server's defaults).
const outcomeRetry = 15 * time.Second

// report publishes the pass's one outcome, with the message id of the pass
// with key (subjects.OutcomeMsgID).
func (w *Worker) report(ctx context.Context, work subjects.Work, key string, p *pass, result any, bodyErr error, info RunInfo,
	log *slog.Logger) error {
	// The body's context may have ended; publishing is bounded by the
	// client's request timeout instead.
	ctx = context.WithoutCancel(ctx)
	subject, data, err := w.outcome(work, p, result, bodyErr)
	if err != nil {
		return err
	}
	msgID := subjects.OutcomeMsgID(work.RunID, work.Pass, key)
	// Through a leader election the publish is repeated (deduplicated by
	// msgID) rather than the pass: the item stays held meanwhile.
	rctx, cancel := context.WithTimeout(ctx, outcomeRetry)
	defer cancel()
	if err := jetstream.RetryUnavailable(rctx, func(ctx context.Context) error {
		_, err := w.client.Publish(ctx, subject, data, msgID, jetstream.Header{trace.Header: {info.TraceParent}})
		return err
	}); err != nil {
		return err
	}
	if w.crash("after-outcome:" + strconv.Itoa(work.Pass)) {
		return errAbandoned
	}
	kind := subject[len(w.client.Namespace().Prefix())+1:]
	kind = kind[:strings.IndexByte(kind, '.')]
	w.metrics.passes.WithLabelValues(work.Agent, kind).Inc()
	log.Debug("pass done", "outcome", kind)
	return nil
}

// emitter stores the AG-UI events of work's pass on subject, each acked
// before Emit returns, so they are all kept before the pass's outcome. A
// replay sends nothing twice, whatever the body emits between interrupts:
//
//   - The Emit calls a pass makes before its first undecided interrupt
//     are settled: a replay (with the same decisions, and more) makes the
//     same calls first, in order. The n-th call is skipped while n is below
//     the settled count the run kept.
//   - The calls after an undecided interrupt are tentative: a replay, which
//     now acts on that interrupt, may emit them again later, after what
//     acting emits (a tool's result before the next tool's call). A call
//     past the settled ones is skipped when an event with its digest is
//     kept and not yet placed, else stored.
//
// Both are read at the pass's first Emit from the last event kept (see
// keptEvents), and each stored event carries them as they stand after it
// (jetstream.HeaderEmitSettled, jetstream.HeaderEmitTentative). The message
// id (run, n and the pass's key: subjects.EmitMsgID) keeps two attempts
// running at once from storing one twice, and nobody without the key can
// store one first.
func (w *Worker) emitter(ctx context.Context, p *pass, work subjects.Work, key, subject string) func(n int, event any) error {
	var (
		once      sync.Once
		mu        sync.Mutex
		kept      emitState
		countErr  error
		unsettled bool // an undecided interrupt came before
	)
	return func(n int, event any) error {
		once.Do(func() { kept, countErr = w.keptEvents(ctx, work.RunID, subject) })
		if countErr != nil {
			return fmt.Errorf("emit: %w", countErr)
		}
		data, err := json.Marshal(event)
		if err != nil {
			return fmt.Errorf("emit: %w", err)
		}
		digest := emitDigest(data)
		mu.Lock()
		unsettled = unsettled || p.suspended()
		skip := n < kept.settled
		if !skip && kept.tentative[digest] > 0 {
			skip = true
			if unsettled {
				// Still after an undecided interrupt: still tentative.
				kept.placed[digest]++
			}
			kept.tentative[digest]--
		}
		if !unsettled {
			kept.settled = max(kept.settled, n+1)
		} else if !skip {
			kept.placed[digest]++
		}
		h := kept.header()
		mu.Unlock()
		if skip {
			return nil
		}
		if _, err := w.client.Publish(ctx, subject, data, subjects.EmitMsgID(work.RunID, n, key), h); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
		return nil
	}
}

// emitState is what a run's kept AG-UI events say to its next pass: how
// many Emit calls are settled, and the digests of tentative events by
// count, those not yet met in this pass (tentative) and those met or stored
// after an undecided interrupt (placed).
type emitState struct {
	settled           int
	tentative, placed map[string]int
}

// header is the state as an event stored now carries it: what stays
// tentative for the next pass, placed or not.
func (s emitState) header() jetstream.Header {
	var list []string
	for _, m := range []map[string]int{s.tentative, s.placed} {
		for d, c := range m {
			for range c {
				list = append(list, d)
			}
		}
	}
	slices.Sort(list)
	h := jetstream.Header{jetstream.HeaderEmitSettled: {strconv.Itoa(s.settled)}}
	if len(list) > 0 {
		h[jetstream.HeaderEmitTentative] = []string{strings.Join(list, ",")}
	}
	return h
}

// emitDigest identifies an AG-UI event by its body: 16 hex digits of
// SHA-256.
func emitDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// ErrForeignEvent means the last AG-UI event kept for a run was not stored
// by a worker's Emit: its message id is not <run>:emit:<n>[:<key>], so the
// events to skip cannot be told.
var ErrForeignEvent = errors.New("AG-UI event not stored by a worker")

// keptEvents is what the AG-UI events run has kept on subject (the agent's
// own) say to a new pass, read from the last one with one direct get that
// names the subject (no stream-wide read, which per-agent permissions
// could not confine): its settled count and tentative digests. An event
// stored without them (by an older worker) settles n+1 calls, the n of its
// message id.
func (w *Worker) keptEvents(ctx context.Context, run, subject string) (emitState, error) {
	s := emitState{tentative: map[string]int{}, placed: map[string]int{}}
	last, err := w.client.DirectLast(ctx, jetstream.StreamAGUI, subject)
	if errors.Is(err, jetstream.ErrNotFound) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	id := last.Header.Get(jetstream.HeaderMsgID)
	rest, ok := strings.CutPrefix(id, run+":emit:")
	digits, _, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 0 {
		return s, fmt.Errorf("%w: the last event on %s has message id %q", ErrForeignEvent, subject, id)
	}
	s.settled = n + 1
	if v := last.Header.Get(jetstream.HeaderEmitSettled); v != "" {
		if s.settled, err = strconv.Atoi(v); err != nil || s.settled < 0 {
			return s, fmt.Errorf("%w: the last event on %s has %s %q", ErrForeignEvent, subject, jetstream.HeaderEmitSettled, v)
		}
	}
	if v := last.Header.Get(jetstream.HeaderEmitTentative); v != "" {
		for _, d := range strings.Split(v, ",") {
			s.tentative[d]++
		}
	}
	return s, nil
}

// passDone reports whether work's pass (with key) was already reported,
// from the run's last message on the agent's own subjects of the runs
// stream, which only the agent's own NATS user may write (deploy/nats
// gives each agent its own; the coordinator writes the notices):
//   - this pass's outcome, told by its message id, which only a holder of
//     the work item can compute (subjects.OutcomeMsgID): done;
//   - an outcome of a later pass: done (a later pass ran, so this one was
//     recorded);
//   - a notice about this pass or a later one (only the coordinator writes
//     those, once it recorded the suspension): done;
//   - a notice about an earlier pass: judged by the run's last suspension,
//     completion or failure instead (an expiry's notice goes out after the
//     replay it queued, whose outcome can be stored first);
//   - anything else, such as an outcome of this pass with another message
//     id (forged, or from a publisher that cannot know the key): not done.
//
// At worst the pass runs again, and the coordinator ignores an outcome of
// a pass it already recorded.
func (w *Worker) passDone(ctx context.Context, work subjects.Work, key string) (bool, error) {
	ns := w.client.Namespace()
	filter, err := ns.RunOutcomes(work.Agent, work.RunID)
	if err != nil {
		return false, err
	}
	// The read is bounded like any request, not by the pass's timeout:
	// a read that outlasted a short timeout would end the attempt as a
	// handler error, and on the last delivery the item would go to the dead
	// letters with no outcome (the run never finishing). A read past the
	// timeout leaves the body a context already ended, and the attempt is
	// cut as a timed-out pass. The worker's stop still ends the read.
	pctx := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(pctx), w.client.Config().Timeout)
	defer cancel()
	stop := context.AfterFunc(pctx, func() {
		if !errors.Is(context.Cause(pctx), ErrPassTimeout) {
			cancel()
		}
	})
	defer stop()
	last, err := w.client.DirectLast(ctx, jetstream.StreamRuns, filter)
	if errors.Is(err, jetstream.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	done, notice, pass := judgePass(ns, work, key, last)
	if !notice || done || pass >= work.Pass {
		return done, nil
	}
	// A notice about an earlier pass: the coordinator publishes an
	// expiry's after it queued the replay, and the replay's outcome can be
	// stored before it. Judge by the run's last outcome instead.
	last, err = LastOutcome(ctx, w.client, work.Agent, work.RunID)
	if errors.Is(err, jetstream.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	done, _, _ = judgePass(ns, work, key, last)
	return done, nil
}

// judgePass applies passDone's rules to last, a message of work's run on
// the runs stream; it also says whether last is a notice, and its pass.
func judgePass(ns subjects.Namespace, work subjects.Work, key string, last jetstream.StoredMsg) (done, notice bool, pass int) {
	var head struct{ Pass int }
	addr, err := ns.Parse(last.Subject)
	if err != nil || addr.Agent != work.Agent || addr.Run != work.RunID || json.Unmarshal(last.Data, &head) != nil {
		return false, false, 0
	}
	switch addr.Kind {
	case subjects.KindReminder, subjects.KindEscalated, subjects.KindExpired:
		notice = true
	}
	switch {
	case head.Pass > work.Pass:
		return true, notice, head.Pass
	case head.Pass < work.Pass:
		return false, notice, head.Pass
	case notice:
		return true, true, head.Pass
	}
	return last.Header.Get(jetstream.HeaderMsgID) == subjects.OutcomeMsgID(work.RunID, work.Pass, key), false, head.Pass
}

// LastOutcome is the latest suspension, completion or failure of agent's
// run on the runs stream, the coordinator's notices left out (one direct
// get naming the subject for each kind), or an error matching
// jetstream.ErrNotFound when it has none. A notice can be stored after the
// outcome that follows it: an expiry's goes out after the replay it
// queued, whose outcome can be stored first.
func LastOutcome(ctx context.Context, c *jetstream.Client, agent, run string) (jetstream.StoredMsg, error) {
	ns := c.Namespace()
	var last jetstream.StoredMsg
	for _, subject := range []func(agent, run string) (string, error){ns.Suspended, ns.Completed, ns.Failed} {
		s, err := subject(agent, run)
		if err != nil {
			return last, err
		}
		m, err := c.DirectLast(ctx, jetstream.StreamRuns, s)
		if errors.Is(err, jetstream.ErrNotFound) {
			continue
		}
		if err != nil {
			return last, err
		}
		if m.Sequence > last.Sequence {
			last = m
		}
	}
	if last.Sequence == 0 {
		return last, fmt.Errorf("run %s: %w", run, jetstream.ErrNotFound)
	}
	return last, nil
}

// runBody runs fn in a goroutine of its own and waits for it to return or,
// once ctx has ended, for grace() (read then) more at most. A body that ignores its
// cancelled context longer is left behind: returned is false.
func runBody(ctx context.Context, fn AgentFunc, input json.RawMessage, grace func() time.Duration) (result any, err error, returned bool) {
	type ret struct {
		result any
		err    error
	}
	done := make(chan ret, 1)
	go func() {
		var r ret
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("agent panicked: %v", p)
			}
			done <- r
		}()
		r.result, r.err = fn(ctx, input)
	}()
	select {
	case r := <-done:
		return r.result, r.err, true
	case <-ctx.Done():
	}
	t := time.NewTimer(grace())
	defer t.Stop()
	select {
	case r := <-done:
		return r.result, r.err, true
	case <-t.C:
		return nil, nil, false
	}
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
		susp := subjects.Suspension{PassRef: ref, Interrupts: p.pending, Journal: p.journal, SuspendedAt: now}
		if work.Pass == 0 {
			// Who started the run, as the start subject's last token says
			// (NATS permissions bind it); never a body field.
			susp.Requester = p.requester
		}
		subjects.Versioned(&susp)
		if bound, limit := subjects.SuspensionBound(work, susp), subjects.RecordLimit(w.client.MaxPayload()); int64(bound) > limit {
			// Refused here rather than by the coordinator: the run fails
			// with the reason, instead of waiting on questions whose
			// answers its record could not take.
			bodyErr = fmt.Errorf("%w: with the largest decision allowed for each of its %d interrupts the run record "+
				"could reach %d bytes, over the %d a run record may have on a server whose max payload is %d bytes; "+
				"ask with less (message, metadata, schema, journal) or fewer interrupts per pass",
				ErrSuspensionTooLarge, len(susp.Interrupts), bound, limit, w.client.MaxPayload())
			w.cfg.Logger.Warn("suspension refused", "run", work.RunID, "pass", work.Pass, "error", bodyErr)
			break
		}
		build, msg = ns.Suspended, susp
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
	data, err := json.Marshal(msg)
	if err == nil && subjects.NestedDeeper(data, subjects.MaxDepth) {
		// Refused here rather than by the coordinator, which refuses what
		// no reader takes: the run fails with the reason.
		build = ns.Failed
		data, err = json.Marshal(subjects.Failure{PassRef: ref, FailedAt: now, Error: fmt.Sprintf(
			"the pass's outcome (its result or journal) nests objects and lists deeper than the protocol's %d levels", subjects.MaxDepth)})
	}
	if err != nil {
		return "", nil, err
	}
	subject, err := build(work.Agent, work.RunID)
	return subject, data, err
}

// asker asks the coordinator whether an operator rule settles interrupt
// in of work's pass (subjects.Ask), and returns the rule's decision. Any
// failure (no coordinator answering, a timeout, a malformed reply) is no
// decision: the pass suspends as usual.
func (w *Worker) asker(agent string, work subjects.Work, p *pass) func(ctx context.Context, in subjects.Interrupt) (subjects.Decision, bool) {
	return func(ctx context.Context, in subjects.Interrupt) (subjects.Decision, bool) {
		subject, err := w.client.Namespace().Ask(agent, work.RunID)
		if err != nil {
			return subjects.Decision{}, false
		}
		data, err := json.Marshal(askOf(work.RunID, agent, work.Pass, p.requester, in))
		if err != nil {
			return subjects.Decision{}, false
		}
		timeout := w.cfg.AskTimeout
		if timeout <= 0 {
			timeout = 2 * time.Second
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := w.client.Request(ctx, subject, data)
		if err != nil {
			w.cfg.Logger.Debug("ask unanswered; suspending", "run", work.RunID, "interrupt", in.ID, "error", err)
			return subjects.Decision{}, false
		}
		return takeAskReply(out, in.ID)
	}
}

// askOf is the ask about interrupt in of pass of run: the requester (the
// start subject's token) goes on pass 0 only, as in a suspension.
func askOf(run, agent string, pass int, requester string, in subjects.Interrupt) subjects.Ask {
	a := subjects.Ask{Version: subjects.Version2, RunID: run, Agent: agent, Pass: pass, Interrupt: in}
	if pass == 0 {
		a.Requester = requester
	}
	return a
}

// takeAskReply is the decision a coordinator's reply out to an ask about
// interrupt id carries; false (suspend as usual) for anything but a valid
// decision by interlock:policy on that very interrupt.
func takeAskReply(out []byte, id string) (subjects.Decision, bool) {
	r, err := subjects.DecodeAskReply(out)
	if err != nil || r.Outcome != subjects.AskDecided || r.Decision == nil {
		return subjects.Decision{}, false
	}
	d := *r.Decision
	// Only a rule's decision on this very interrupt is taken.
	if d.InterruptID != id || d.Approver != subjects.PolicyApprover {
		return subjects.Decision{}, false
	}
	return d, true
}
