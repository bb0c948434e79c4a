package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// handleOutcome records a pass's outcome: a suspension, a completion or a
// failure.
func (co *Coordinator) handleOutcome(ctx context.Context, m *jetstream.Delivery) error {
	defer co.metrics.timed("outcome", time.Now())
	if co.crash("outcome-start") {
		return errAbandoned
	}
	addr, err := co.ns.Parse(m.Subject)
	if err != nil {
		return co.rejectInput(ctx, m, subjects.NoRun, err)
	}
	if err := jetstream.CheckPublished(m.Header); err != nil {
		return co.rejectInput(ctx, m, addr.Run, err)
	}
	o, err := rules.DecodeOutcome(addr.Kind, m.Data)
	if err == nil && (o.RunID != addr.Run || o.Agent != addr.Agent) {
		err = fmt.Errorf("%w: subject names agent %q run %q, body names agent %q run %q",
			subjects.ErrMalformed, addr.Agent, addr.Run, o.Agent, o.RunID)
	}
	// undecoded: the body did not decode, but names the run and agent of
	// its subject and a pass; if that is the pass the record waits for, the
	// pass can go no further (its worker acked the work item) and the run
	// fails with the reason, where it would stay resuming.
	var undecoded error
	if err != nil {
		ref, ok := peekPass(addr, m.Data)
		if !ok {
			return co.rejectInput(ctx, m, addr.Run, err)
		}
		o, undecoded = rules.Outcome{PassRef: ref, Kind: addr.Kind}, err
	}
	arrival := rules.Arrival{Seq: m.Sequence, TraceParent: m.Header.Get(trace.Header)}
	// The rule's refusal is kept apart from the store's errors: only the
	// first is the input's fault.
	var current *subjects.Run
	// fails: a suspension refused while the pass can go no further (the
	// worker acked its work item): the run fails with the reason instead.
	var refused, fails error
	next, err := co.update(ctx, o.RunID, func(rec *subjects.Run) (*subjects.Run, error) {
		current, fails, refused = rec, undecoded, undecoded
		if undecoded == nil {
			next, err := co.rules.ApplyOutcome(rec, o, arrival, co.now())
			refused = err
			if o.Kind != subjects.KindSuspended {
				return next, nil
			}
			switch {
			case err == nil:
				// Questions whose answers could not be recorded.
				fails = co.checkBound(next)
			case failsRun(err):
				// Questions nobody may answer (policy_unsatisfiable), an
				// interrupt raised twice, an unsafe schema.
				fails = err
			}
			if fails == nil {
				return next, nil
			}
		}
		failed, ferr := co.rules.ApplyOutcome(rec, failedFor(o, fails), arrival, co.now())
		if ferr != nil {
			if refused != nil {
				// No run to fail (a later pass of a run with no record), or
				// not the pass it waits for: refused as it is.
				fails = nil
				return nil, nil
			}
			return nil, ferr
		}
		refused = nil
		failed.SuspensionSeq = arrival.Seq // handled: decisions wait for it no longer
		return failed, nil
	})
	if errors.Is(err, jetstream.ErrTooLarge) {
		// The record cannot take this outcome (a large result or journal,
		// or a server whose max payload was lowered): the run fails, and
		// the input is refused rather than retried forever.
		return co.outcomeTooLarge(ctx, m, o, arrival, err)
	}
	if errors.Is(err, store.ErrForeignRecord) {
		return co.rejectInput(ctx, m, o.RunID, err)
	}
	if err != nil {
		return err
	}
	var stale *rules.StaleError
	switch {
	case errors.As(refused, &stale):
		return co.staleOutcome(ctx, current, o, m, stale)
	case refused != nil:
		return co.rejectInput(ctx, m, o.RunID, refused)
	case fails != nil:
		if co.crash("outcome-refused-after-record") {
			return errAbandoned
		}
		if err := co.outcomeEffects(ctx, next, failedFor(o, fails)); err != nil {
			return err
		}
		co.metrics.runs.WithLabelValues(string(next.Status)).Inc()
		return co.rejectInput(ctx, m, o.RunID, fails)
	}
	if co.crash("outcome-after-record") {
		return errAbandoned
	}
	co.metrics.outcomes.WithLabelValues(string(o.Kind)).Inc()
	co.metrics.runs.WithLabelValues(string(next.Status)).Inc()
	return co.outcomeEffects(ctx, next, o)
}

// checkBound refuses a record whose bound (rules.Set.RecordBound: its
// size with the largest decision allowed for each interrupt still open) is
// over what a run record may have (store.Store.MaxRecord).
func (co *Coordinator) checkBound(rec *subjects.Run) error {
	limit := co.store.MaxRecord()
	if bound := co.rules.RecordBound(rec); int64(bound) > limit {
		return subjects.RecordTooLarge("suspension refused: with the largest decision allowed for each of its %d open "+
			"interrupts the run record could reach %d bytes, over %s; "+
			"ask with less (message, metadata, schema, journal) or fewer interrupts per pass", len(rec.Pending()), bound,
			co.recordLimit())
	}
	return nil
}

// failsRun reports whether a suspension refused for err fails its run: any
// refusal of the pass the record waits for, from the run's own agent (not
// a stale or repeated outcome, not another agent's).
func failsRun(err error) bool {
	var stale *rules.StaleError
	return !errors.As(err, &stale) && !errors.Is(err, subjects.ErrWrongAgent)
}

// peekPass reads the run, agent and pass a body that did not decode as an
// outcome names, if it is a JSON object naming the run and agent of its
// subject addr and a pass.
func peekPass(addr subjects.Address, data []byte) (subjects.PassRef, bool) {
	var ref struct {
		RunID string `json:"runId"`
		Agent string `json:"agent"`
		Pass  *int   `json:"pass"`
	}
	if json.Unmarshal(data, &ref) != nil || ref.Pass == nil || *ref.Pass < 0 ||
		ref.RunID != addr.Run || ref.Agent != addr.Agent {
		return subjects.PassRef{}, false
	}
	return subjects.PassRef{Version: subjects.Version, RunID: ref.RunID, Agent: ref.Agent, Pass: *ref.Pass}, true
}

// failedFor is the failure outcome that replaces outcome o, refused for err.
func failedFor(o rules.Outcome, err error) rules.Outcome {
	return rules.Outcome{PassRef: o.PassRef, Kind: subjects.KindFailed, Failure: err.Error()}
}

// outcomeTooLarge handles an outcome whose record write failed for size:
// the run fails with a short reason if the record still takes that, and
// the outcome is refused (audited, dead-lettered) either way.
func (co *Coordinator) outcomeTooLarge(ctx context.Context, m *jetstream.Delivery, o rules.Outcome, a rules.Arrival, cause error) error {
	refusal := subjects.RecordTooLarge("%s outcome of pass %d refused: the run record would be over "+
		"%s (%v)", o.Kind, o.Pass, co.recordLimit(), cause)
	failed := failedFor(o, subjects.RecordTooLarge("%s outcome of pass %d too large to record", o.Kind, o.Pass))
	var refused error
	next, err := co.update(ctx, o.RunID, func(rec *subjects.Run) (*subjects.Run, error) {
		next, err := co.rules.ApplyOutcome(rec, failed, a, co.now())
		refused = err
		return next, nil
	})
	switch {
	case err != nil && !errors.Is(err, jetstream.ErrTooLarge):
		return err
	case err == nil && refused == nil:
		if err := co.outcomeEffects(ctx, next, failed); err != nil {
			return err
		}
		co.metrics.runs.WithLabelValues(string(next.Status)).Inc()
	}
	return co.rejectInput(ctx, m, o.RunID, refusal)
}

// staleOutcome handles an outcome for a pass the record has moved past: a
// redelivery after a crash (publish the pass's effects again, which
// dedup), or a repeat of a pass that was run twice (audited, changes
// nothing).
func (co *Coordinator) staleOutcome(ctx context.Context, rec *subjects.Run, o rules.Outcome, m *jetstream.Delivery, stale *rules.StaleError) error {
	if rules.Recorded(rec, o) {
		return co.outcomeEffects(ctx, rec, o)
	}
	if o.Kind == subjects.KindSuspended && rec.Status == subjects.RunFailed && rec.Pass == o.Pass &&
		rec.SuspensionSeq == m.Sequence {
		// This suspension was refused for size and the run failed for it
		// (checkBound) before a crash: finish the failure's effects and the
		// refusal, as the first time.
		if err := co.outcomeEffects(ctx, rec, rules.Outcome{PassRef: o.PassRef, Kind: subjects.KindFailed, Failure: rec.Error}); err != nil {
			return err
		}
		return co.rejectInput(ctx, m, o.RunID,
			subjects.RecordTooLarge("%s", strings.TrimPrefix(rec.Error, subjects.ErrRecordTooLarge.Error()+": ")))
	}
	co.cfg.Logger.Info("stale pass outcome ignored", "run", o.RunID, "pass", o.Pass, "expected", stale.Expected)
	return co.event(ctx, subjects.Event{Type: subjects.EventInputRejected, RunID: o.RunID, Agent: o.Agent, Pass: o.Pass,
		Code: subjects.CodeStalePass, Subject: m.Subject,
		Detail: fmt.Sprintf("%s outcome of pass %d ignored: the run is %s at pass %d", o.Kind, o.Pass, rec.Status, rec.Pass)},
		"seq"+strconv.FormatUint(m.Sequence, 10))
}

// outcomeEffects publishes what recording o implies: for a suspension the
// pending index first (whoever sees the suspended event, an inbox or a
// client listing what waits, then finds the interrupt in it; with records
// sealed, after the event, which carries the record's copy), then the
// timers of its deadlines with the pass's event, then the removal of
// entries whose interrupts were decided meanwhile (unindexDecided). A
// redelivered suspension does the last step again for all its
// interrupts, so a crash between the put and it leaves no entry behind.
func (co *Coordinator) outcomeEffects(ctx context.Context, rec *subjects.Run, o rules.Outcome) error {
	var fx store.Effects
	if o.Kind == subjects.KindSuspended && rec.Status == subjects.RunSuspended && rec.Pass == o.Pass {
		switch {
		case co.sealed:
			// After the record's copy, with the rest: an entry put before
			// the copy could outlive a record lost before it (the bucket
			// in memory), be removed by a build as nothing backs it, and
			// never come back, its put deduplicated when the suspension is
			// applied again. A decision racing the entry is handled below.
			fx.Index = pendingEntries(rec)
		default:
			if err := co.store.Commit(ctx, store.Effects{Index: pendingEntries(rec)}); err != nil {
				return err
			}
			if co.crash("outcome-after-index") {
				return errAbandoned
			}
		}
		timers, err := co.timerMsgs(rec)
		if err != nil {
			return err
		}
		fx.Messages = timers
	}
	ev := co.outcomeEvent(rec, o)
	ev.TraceParent = rec.TraceParent
	fx.Events = append(fx.Events, ev)
	pfx, err := co.policyEffects(rec, o)
	if err != nil {
		return err
	}
	fx.Events, fx.Messages = append(fx.Events, pfx.Events...), append(fx.Messages, pfx.Messages...)
	fx.Record = rec
	if err := co.store.Commit(ctx, fx); err != nil || o.Kind != subjects.KindSuspended {
		return err
	}
	var ids []string
	for _, in := range o.Suspension.Interrupts {
		ids = append(ids, in.ID)
	}
	return co.unindexDecided(ctx, rec.RunID, ids)
}

// outcomeEvent is the event of outcome o, once per pass.
func (co *Coordinator) outcomeEvent(rec *subjects.Run, o rules.Outcome) store.Event {
	ev := subjects.Event{RunID: rec.RunID, Agent: rec.Agent, Pass: o.Pass}
	switch o.Kind {
	case subjects.KindSuspended:
		ev.Type = subjects.EventSuspended
		var armed []string
		for _, in := range o.Suspension.Interrupts {
			ev.InterruptIDs = append(ev.InterruptIDs, in.ID)
			if i := rules.Find(rec, in.ID); i >= 0 {
				if d := co.rules.ArmedDetail(rec.Interrupts[i]); d != "" {
					armed = append(armed, in.ID+" "+d)
				}
			}
		}
		// The deadlines' timers, which the record's history said before;
		// which interrupt each is about goes without saying when there is
		// one.
		if len(o.Suspension.Interrupts) == 1 && len(armed) == 1 {
			armed[0] = strings.TrimPrefix(armed[0], o.Suspension.Interrupts[0].ID+" ")
		}
		ev.Detail = strings.Join(armed, "; ")
	case subjects.KindCompleted:
		ev.Type = subjects.EventCompleted
	default:
		ev.Type, ev.Detail = subjects.EventFailed, o.Failure
	}
	return co.newEvent(ev, "pass"+strconv.Itoa(o.Pass))
}
