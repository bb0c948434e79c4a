package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// CoordinatorConfig is what a coordinator is.
type CoordinatorConfig struct {
	// Concurrency is the number of messages handled at once per input
	// stream; messages of one run are handled in order. Default 4.
	Concurrency int
	// AckWait before another coordinator takes over an unacked message;
	// default 30s.
	AckWait time.Duration
	Logger  *slog.Logger
	// Now is the clock used for expiry; default time.Now.
	Now func() time.Time
	// Expiry holds the defaults for deadlines, reminders and escalation.
	Expiry ExpiryDefaults
	// Groups maps an approver identity to its groups, for interrupts that
	// name approver groups.
	Groups func(identity string) []string
	// Registry, when set, receives the coordinator's Prometheus metrics.
	Registry prometheus.Registerer
	// SchemaBudget bounds checking one payload against its responseSchema;
	// default schema.DefaultBudget.
	SchemaBudget time.Duration
}

// Coordinator is the only writer of run records. It consumes pass outcomes
// and decisions, applies the decision rules, schedules replays and publishes
// an event for every transition and every rejected input. Any number may run
// against one NATS deployment: records are written with compare-and-set.
type Coordinator struct {
	client  *jetstream.Client
	cfg     CoordinatorConfig
	ns      subjects.Namespace
	schemas schema.Cache
	running jetstream.Consumers
	metrics *coordinatorMetrics
	// fault, in tests, abandons a message at a named point.
	fault fault.Hook
}

// NewCoordinator returns a coordinator working through c.
func NewCoordinator(c *jetstream.Client, cfg CoordinatorConfig) *Coordinator {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Coordinator{client: c, cfg: cfg, ns: c.Namespace(), metrics: newCoordinatorMetrics(cfg.Registry),
		schemas: schema.Cache{Budget: cfg.SchemaBudget}}
}

// Start consumes outcomes and decisions until Stop.
func (co *Coordinator) Start(ctx context.Context) error {
	byRun := func(m *jetstream.Msg) string {
		a, _ := co.ns.Parse(m.Subject)
		return a.Run
	}
	ns := co.ns
	due := ns.All(subjects.KindTimers)
	due = due[:len(due)-1] + "due.>"
	inputs := []struct {
		stream  jetstream.Stream
		durable string
		filter  []string
		handle  jetstream.Handler
	}{
		{jetstream.StreamRuns, "coordinator_runs", []string{ns.All(subjects.KindSuspended), ns.All(subjects.KindCompleted),
			ns.All(subjects.KindFailed)}, co.handleOutcome},
		{jetstream.StreamDecisions, "coordinator_decisions", nil, co.handleDecision},
		{jetstream.StreamTimers, "coordinator_timers", []string{due}, co.handleTimer},
	}
	for _, in := range inputs {
		cons, err := co.client.Consume(ctx, jetstream.ConsumerConfig{
			Stream: in.stream, Durable: in.durable, FilterSubjects: in.filter, AckWait: co.cfg.AckWait,
			// Decisions may wait for their suspension to be recorded.
			MaxDeliver:  50,
			Concurrency: co.cfg.Concurrency, PartitionKey: byRun, Logger: co.cfg.Logger,
		}, in.handle)
		if err != nil {
			co.Stop()
			return err
		}
		co.running.Add(cons)
		registerLag(co.cfg.Registry, co.client, in.stream, in.durable)
	}
	registerPending(co.cfg.Registry, co.client)
	registerBacklog(co.cfg.Registry, co.client)
	return nil
}

// Stop stops consuming and waits for the messages under way.
func (co *Coordinator) Stop() { co.running.Stop() }

func (co *Coordinator) crash(point string) bool { return co.fault.Crash(point, co.client.Close) }

// maxCASAttempts bounds compare-and-set retries within one delivery.
const maxCASAttempts = 20

// load returns run's record and revision; a nil record means none exists.
func (co *Coordinator) load(ctx context.Context, run string) (*subjects.Run, uint64, error) {
	e, err := co.client.GetRun(ctx, run)
	if errors.Is(err, jetstream.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var r subjects.Run
	if err := json.Unmarshal(e.Value, &r); err != nil {
		return nil, 0, fmt.Errorf("run record %s is corrupt: %w", run, err)
	}
	return &r, e.Revision, nil
}

func (co *Coordinator) store(ctx context.Context, r *subjects.Run, rev uint64) error {
	r.UpdatedAt = co.now()
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = co.client.PutRun(ctx, r.RunID, data, rev)
	return err
}

func (co *Coordinator) now() time.Time { return co.cfg.Now().UTC() }

// event publishes an event once: its message id is derived from what it is
// about, so publishing it again after a crash is a no-op.
func (co *Coordinator) event(ctx context.Context, ev subjects.Event, dedup string) error {
	m, err := co.eventMsg(ev, dedup)
	if err != nil {
		return err
	}
	return co.client.PublishAll(ctx, m)
}

// eventMsg is the message of an event, deduplicated by what it is about.
func (co *Coordinator) eventMsg(ev subjects.Event, dedup string) (jetstream.OutMsg, error) {
	ev.Version = subjects.Version
	if ev.At.IsZero() {
		ev.At = co.now()
	}
	run := ev.RunID
	if subjects.ValidateToken("run id", run) != nil {
		run = subjects.NoRun
	}
	subject, err := co.ns.Events(run, ev.Type)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	return jetstream.OutMsg{Subject: subject, Data: data, MsgID: run + ":" + dedup + ":" + string(ev.Type)}, nil
}

// traced puts tp's trace, continued, on m.
func traced(m jetstream.OutMsg, tp string) jetstream.OutMsg {
	if trace.Valid(tp) {
		if m.Header == nil {
			m.Header = jetstream.Header{}
		}
		m.Header[trace.Header] = []string{trace.Child(tp)}
	}
	return m
}

// ---- pass outcomes ----

// outcome is a decoded pass outcome of any kind.
type outcome struct {
	subjects.PassRef
	kind    string
	journal subjects.Journal
	susp    *subjects.Suspension
	result  json.RawMessage
	failure string
}

func decodeOutcome(kind string, data []byte) (outcome, error) {
	switch kind {
	case subjects.KindSuspended:
		s, err := subjects.DecodeSuspension(data)
		return outcome{PassRef: s.PassRef, kind: kind, journal: s.Journal, susp: &s}, err
	case subjects.KindCompleted:
		c, err := subjects.DecodeCompletion(data)
		return outcome{PassRef: c.PassRef, kind: kind, journal: c.Journal, result: c.Result}, err
	case subjects.KindFailed:
		f, err := subjects.DecodeFailure(data)
		return outcome{PassRef: f.PassRef, kind: kind, failure: f.Error}, err
	}
	return outcome{}, fmt.Errorf("%w: %s is not a pass outcome", subjects.ErrInvalidSubject, kind)
}

// rejectInput records bad input on the events subject and dead-letters it:
// the message and the reason are kept.
func (co *Coordinator) rejectInput(ctx context.Context, m *jetstream.Msg, run string, err error) error {
	ev := subjects.Event{Type: subjects.EventInputRejected, RunID: run, Code: subjects.CodeOf(err),
		Detail: err.Error(), Subject: m.Subject}
	switch {
	case errors.Is(err, subjects.ErrInvalidSubject):
		ev.Code = subjects.CodeInvalidSubject
	case errors.Is(err, schema.ErrUnsafe):
		ev.Code = subjects.CodeSchemaUnsafe
	}
	if perr := co.event(ctx, ev, "seq"+strconv.FormatUint(m.Sequence, 10)); perr != nil {
		return perr
	}
	co.cfg.Logger.Warn("input rejected", "subject", m.Subject, "code", ev.Code, "error", err)
	return jetstream.DeadLetter(err)
}

func (co *Coordinator) handleOutcome(ctx context.Context, m *jetstream.Msg) error {
	defer co.metrics.timed("outcome", time.Now())
	if co.crash("outcome-start") {
		return errAbandoned
	}
	addr, err := co.ns.Parse(m.Subject)
	if err != nil {
		return co.rejectInput(ctx, m, subjects.NoRun, err)
	}
	o, err := decodeOutcome(addr.Kind, m.Data)
	if err == nil && (o.RunID != addr.Run || o.Agent != addr.Agent) {
		err = fmt.Errorf("%w: subject names agent %q run %q, body names agent %q run %q",
			subjects.ErrMalformed, addr.Agent, addr.Run, o.Agent, o.RunID)
	}
	if err != nil {
		return co.rejectInput(ctx, m, addr.Run, err)
	}
	for range maxCASAttempts {
		rec, rev, err := co.load(ctx, o.RunID)
		if err != nil {
			return err
		}
		next, err := co.applyOutcome(rec, o, m)
		var stale *staleError
		switch {
		case errors.As(err, &stale):
			return co.staleOutcome(ctx, rec, o, m, stale)
		case err != nil:
			return co.rejectInput(ctx, m, o.RunID, err)
		}
		if err := co.store(ctx, next, rev); errors.Is(err, jetstream.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		if co.crash("outcome-after-record") {
			return errAbandoned
		}
		co.metrics.outcomes.WithLabelValues(o.kind).Inc()
		co.metrics.runs.WithLabelValues(string(next.Status)).Inc()
		return co.outcomeEffects(ctx, next, o)
	}
	return fmt.Errorf("run %s: compare-and-set kept losing", o.RunID)
}

type staleError struct{ expected int }

func (e *staleError) Error() string { return fmt.Sprintf("expected pass %d", e.expected) }

// applyOutcome returns rec updated with o.
func (co *Coordinator) applyOutcome(rec *subjects.Run, o outcome, m *jetstream.Msg) (*subjects.Run, error) {
	now := co.now()
	if rec == nil {
		if o.Pass != 0 {
			return nil, fmt.Errorf("%w: pass %d of run %s, which has no record (a first pass is pass 0)",
				subjects.ErrMalformed, o.Pass, o.RunID)
		}
		rec = &subjects.Run{Version: subjects.Version, RunID: o.RunID, Agent: o.Agent, ThreadID: o.ThreadID,
			Input: o.Input, CreatedAt: now, Pass: -1, Interrupts: []subjects.InterruptState{}}
	} else {
		if rec.Status != subjects.RunResuming || o.Pass != rec.Pass+1 {
			return nil, &staleError{expected: expectedPass(rec)}
		}
		cp := *rec
		cp.Interrupts = slices.Clone(rec.Interrupts)
		cp.History = slices.Clone(rec.History)
		rec = &cp
	}
	rec.Pass = o.Pass
	if tp := m.Header.Get(trace.Header); trace.Valid(tp) {
		rec.TraceParent = tp
	}
	if len(o.journal) > 0 {
		j := make(subjects.Journal, len(rec.Journal)+len(o.journal))
		for k, v := range rec.Journal {
			j[k] = v
		}
		for k, v := range o.journal {
			j[k] = v
		}
		rec.Journal = j
	}
	var evType subjects.EventType
	switch o.kind {
	case subjects.KindSuspended:
		for _, in := range o.susp.Interrupts {
			if len(in.ResponseSchema) > 0 {
				if err := co.schemas.Compile(in.ResponseSchema); err != nil {
					return nil, fmt.Errorf("interrupt %s: %w", in.ID, err)
				}
			}
			if i := findInterrupt(rec, in.ID); i >= 0 {
				return nil, fmt.Errorf("%w: interrupt %s was already raised in pass %d; a replay returns its decision instead",
					subjects.ErrMalformed, in.ID, rec.Interrupts[i].Pass)
			}
			if in.ExpiresAt == nil && co.cfg.Expiry.Timeout > 0 {
				deadline := now.Add(co.cfg.Expiry.Timeout)
				in.ExpiresAt = &deadline
			}
			st := subjects.InterruptState{Interrupt: in, Pass: o.Pass}
			rec.Interrupts = append(rec.Interrupts, st)
			if in.ExpiresAt != nil {
				rec.History = append(rec.History, co.timerHistory(st, now))
			}
		}
		rec.Status, evType = subjects.RunSuspended, subjects.EventSuspended
		rec.SuspensionSeq = m.Sequence
	case subjects.KindCompleted:
		rec.Status, evType, rec.Result = subjects.RunCompleted, subjects.EventCompleted, o.result
	case subjects.KindFailed:
		rec.Status, evType, rec.Error = subjects.RunFailed, subjects.EventFailed, o.failure
	}
	rec.History = append(rec.History, subjects.HistoryEntry{At: now, Type: evType, Pass: o.Pass, Detail: o.failure})
	return rec, nil
}

func expectedPass(rec *subjects.Run) int {
	if rec.Status == subjects.RunResuming {
		return rec.Pass + 1
	}
	return rec.Pass
}

func findInterrupt(rec *subjects.Run, id string) int {
	for i := range rec.Interrupts {
		if rec.Interrupts[i].ID == id {
			return i
		}
	}
	return -1
}

// staleOutcome handles an outcome for a pass the record has moved past: a
// redelivery after a crash (re-publish the pass's event, which dedups), or a
// repeat of a pass that was run twice (recorded, changes nothing).
func (co *Coordinator) staleOutcome(ctx context.Context, rec *subjects.Run, o outcome, m *jetstream.Msg, stale *staleError) error {
	if recorded(rec, o) {
		return co.outcomeEffects(ctx, rec, o)
	}
	co.cfg.Logger.Info("stale pass outcome ignored", "run", o.RunID, "pass", o.Pass, "expected", stale.expected)
	return co.event(ctx, subjects.Event{Type: subjects.EventInputRejected, RunID: o.RunID, Agent: o.Agent, Pass: o.Pass,
		Code: subjects.CodeStalePass, Subject: m.Subject,
		Detail: fmt.Sprintf("%s outcome of pass %d ignored: the run is %s at pass %d", o.kind, o.Pass, rec.Status, rec.Pass)},
		"seq"+strconv.FormatUint(m.Sequence, 10))
}

// recorded reports whether rec already holds outcome o: every interrupt of a
// suspension raised in its pass, or the same terminal outcome.
func recorded(rec *subjects.Run, o outcome) bool {
	switch o.kind {
	case subjects.KindSuspended:
		for _, in := range o.susp.Interrupts {
			if i := findInterrupt(rec, in.ID); i < 0 || rec.Interrupts[i].Pass != o.Pass {
				return false
			}
		}
		return true
	default:
		return rec.Status.Terminal() && rec.Pass == o.Pass && o.kind == statusKind(rec.Status)
	}
}

func statusKind(s subjects.RunStatus) string {
	if s == subjects.RunCompleted {
		return subjects.KindCompleted
	}
	return subjects.KindFailed
}

// outcomeEffects publishes what recording o implies, together: the timers
// of a suspension's deadlines and the pass's event.
func (co *Coordinator) outcomeEffects(ctx context.Context, rec *subjects.Run, o outcome) error {
	var fx []jetstream.OutMsg
	if o.kind == subjects.KindSuspended && rec.Status == subjects.RunSuspended && rec.Pass == o.Pass {
		timers, err := co.timerMsgs(rec)
		if err != nil {
			return err
		}
		index, err := co.pendingPuts(rec)
		if err != nil {
			return err
		}
		// The index first: whoever sees the suspended event (an inbox, a
		// client listing what waits) then finds the interrupt in it.
		if len(index) > 0 {
			if err := co.client.PublishAll(ctx, index...); err != nil {
				return err
			}
		}
		fx = append(fx, timers...)
	}
	ev, err := co.outcomeEventMsg(rec, o)
	if err != nil {
		return err
	}
	return co.client.PublishAll(ctx, append(fx, traced(ev, rec.TraceParent))...)
}

// outcomeEventMsg is the event of outcome o, once per pass.
func (co *Coordinator) outcomeEventMsg(rec *subjects.Run, o outcome) (jetstream.OutMsg, error) {
	ev := subjects.Event{RunID: rec.RunID, Agent: rec.Agent, Pass: o.Pass}
	switch o.kind {
	case subjects.KindSuspended:
		ev.Type = subjects.EventSuspended
		for _, in := range o.susp.Interrupts {
			ev.InterruptIDs = append(ev.InterruptIDs, in.ID)
		}
	case subjects.KindCompleted:
		ev.Type = subjects.EventCompleted
	default:
		ev.Type, ev.Detail = subjects.EventFailed, o.failure
	}
	return co.eventMsg(ev, "pass"+strconv.Itoa(o.Pass))
}
