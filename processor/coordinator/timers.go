package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// timerMsgs schedule the timers rec's waiting interrupts need; their
// message ids are their schedule subjects, so scheduling them again is a
// no-op.
func (co *Coordinator) timerMsgs(rec *subjects.Run) ([]jetstream.OutMsg, error) {
	var out []jetstream.OutMsg
	for _, t := range co.rules.Timers(rec, co.now()) {
		due, err := co.ns.TimerDue(rec.RunID)
		if err != nil {
			return nil, err
		}
		subject, err := co.ns.TimerSchedule(rec.RunID, t.Name)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		out = append(out, jetstream.ScheduleMsg(subject, due, t.At, data, subject))
	}
	return out, nil
}

func (co *Coordinator) handleTimer(ctx context.Context, m *jetstream.Delivery) error {
	defer co.metrics.timed("timer", time.Now())
	if err := jetstream.CheckFired(m.Header); err != nil {
		// An answer the server sent to this subject: audited on the run
		// its subject names.
		run := subjects.NoRun
		if a, perr := co.ns.Parse(m.Subject); perr == nil {
			run = a.Run
		}
		return co.refuseInput(ctx, m, run, "timer", err)
	}
	t, err := subjects.DecodeTimer(m.Data)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("timer: %w", err))
	}
	// Schedules fire at whole seconds: one that fired early waits.
	if early := t.At.Sub(co.now()); early > 0 {
		return jetstream.RetryAfter(early, errors.New("timer fired early"))
	}
	var (
		rec      *subjects.Run
		at       int
		recorded bool
		action   rules.TimerAction
	)
	next, err := co.update(ctx, t.RunID, func(current *subjects.Run) (*subjects.Run, error) {
		rec, at, recorded = current, -1, false
		if current == nil {
			return nil, nil
		}
		if at = rules.Find(current, t.InterruptID); at < 0 {
			return nil, nil
		}
		st := current.Interrupts[at]
		if recorded = slices.Contains(st.Fired, t.Name); recorded || !rules.TimerLive(current, st, t) {
			return nil, nil // fired before, decided, or the deadline moved
		}
		var next *subjects.Run
		next, action = co.rules.ApplyTimer(current, at, t, co.now())
		return next, nil
	})
	switch {
	case errors.Is(err, jetstream.ErrTooLarge):
		// The record cannot take what the timer does (an expiry's payload,
		// an escalation, on a server whose max payload was lowered): audited
		// and dropped, not retried forever. The interrupt stays open.
		co.cfg.Logger.Warn("timer refused: the run record would be too large", "run", t.RunID, "timer", t.Name, "error", err)
		return co.event(ctx, subjects.Event{Type: subjects.EventInputRejected, RunID: t.RunID, InterruptIDs: []string{t.InterruptID},
			Code: subjects.CodeRecordTooLarge, Subject: m.Subject, Detail: fmt.Sprintf("timer %s (%s) of interrupt %s not applied: "+
				"the run record would be over %s (%v)", t.Name, t.Kind, t.InterruptID,
				co.recordLimit(), err)}, "timer-"+t.Name+":too-large")
	case errors.Is(err, store.ErrForeignRecord):
		return co.refuseInput(ctx, m, t.RunID, "timer", err)
	case err != nil:
		return err
	case next != nil:
		if co.crash("timer-after-record") {
			return errAbandoned
		}
		co.metrics.timers.WithLabelValues(action.String()).Inc()
		return co.timerEffects(ctx, next, at, t, action)
	case recorded:
		// A redelivery after the record was written: finish the effects.
		return co.timerEffects(ctx, rec, at, t, rules.FiredAction(rec.Interrupts[at], t))
	}
	return nil // no such run or interrupt, or the timer is harmless
}

// timerEffects publishes what a timer's record change implies, each publish
// deduplicated so a redelivery repeats nothing. The event goes first: it
// carries the record's copy when records are sealed (records.go), and
// nothing the change caused may be stored before it.
func (co *Coordinator) timerEffects(ctx context.Context, rec *subjects.Run, i int, t subjects.Timer, action rules.TimerAction) error {
	st := rec.Interrupts[i]
	key := "timer-" + t.Name
	var kind subjects.Kind
	var evType subjects.EventType
	seq := 1
	switch action {
	case rules.TimerReminded:
		kind, evType, seq = subjects.KindReminder, subjects.EventReminded, st.Reminders
	case rules.TimerEscalated:
		kind, evType, seq = subjects.KindEscalated, subjects.EventEscalated, st.Escalations
	case rules.TimerExpired:
		kind, evType = subjects.KindExpired, subjects.EventExpired
	default:
		return nil
	}
	detail := ""
	if st.ExpiresAt != nil {
		detail = "deadline " + st.ExpiresAt.Format(time.RFC3339)
	}
	if st.Decision != nil {
		detail = "nobody decided by " + t.Deadline.Format(time.RFC3339) + "; " + string(st.Decision.Status)
	}
	ev := subjects.Event{Type: evType, RunID: rec.RunID, Agent: rec.Agent, Pass: st.Pass,
		InterruptIDs: []string{st.ID}, Detail: detail}
	if action == rules.TimerEscalated {
		// What the record's history said: which escalation, and the new
		// deadline's timers.
		ev.Detail = fmt.Sprintf("escalation %d of %d; %s", st.Escalations, co.rules.Expiry.Policy(st.Interrupt).Times,
			co.rules.ArmedDetail(st))
	}
	switch action {
	case rules.TimerExpired:
		// The expired event goes with the expiry's decision (which carries
		// the copy), before the replay it queues; the notice follows.
		if err := co.accepted(ctx, origin{subject: "timer " + t.Name, key: key, via: "expiry", approver: subjects.ExpiryApprover},
			rec, *st.Decision, co.newEvent(ev, key)); err != nil {
			return err
		}
	case rules.TimerEscalated:
		if err := co.store.Commit(ctx, store.Effects{Events: []store.Event{co.newEvent(ev, key)}, Record: rec}); err != nil {
			return err
		}
		timers, err := co.timerMsgs(rec)
		if err != nil {
			return err
		}
		// The new deadline's timers, and the escalated interrupt's entry with
		// its new deadline and approvers (only its own: another interrupt
		// of the run may have been decided since, and its entry removed).
		if err := co.store.Commit(ctx, store.Effects{Messages: timers,
			Index: []subjects.PendingInterrupt{pendingEntry(rec, st)}}); err != nil {
			return err
		}
		if err := co.unindexDecided(ctx, rec.RunID, []string{st.ID}); err != nil {
			return err
		}
	default:
		if err := co.store.Commit(ctx, store.Effects{Events: []store.Event{co.newEvent(ev, key)}, Record: rec}); err != nil {
			return err
		}
	}
	return co.publishNotice(ctx, rec, st, kind, seq, t.Name, detail)
}

// publishNotice tells notifiers about interrupt st.
func (co *Coordinator) publishNotice(ctx context.Context, rec *subjects.Run, st subjects.InterruptState, kind subjects.Kind, seq int, timer, detail string) error {
	subject, err := co.ns.Notice(kind, rec.Agent, rec.RunID)
	if err != nil {
		return err
	}
	n := subjects.Notice{PassRef: subjects.PassRef{Version: subjects.Version, RunID: rec.RunID, Agent: rec.Agent,
		ThreadID: rec.ThreadID, Pass: st.Pass}, Kind: kind, Seq: seq, Timer: timer, Interrupts: []subjects.Interrupt{st.Interrupt},
		At: co.now(), Detail: detail}
	if st.Decision != nil {
		n.Status = st.Decision.Status
	} else if i := rules.Find(rec, st.ID); i >= 0 && st.Policy != nil {
		if t := co.rules.Tally(rec, i, subjects.Decision{}); t != nil {
			n.Tallies = map[string]subjects.Tally{st.ID: *t}
		}
	}
	data, err := json.Marshal(subjects.Versioned(&n))
	if err != nil {
		return err
	}
	return co.store.Commit(ctx, store.Effects{Messages: []jetstream.OutMsg{{Subject: subject, Data: data,
		MsgID: co.ids.Sign(rec.RunID + ":" + string(kind) + ":" + timer)}}})
}
