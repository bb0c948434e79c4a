package processor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// ExpiryDefaults are the coordinator's defaults for interrupt deadlines. An
// interrupt's own policy (Request.OnExpiry, RemindBefore) wins.
type ExpiryDefaults struct {
	// Timeout gives interrupts without a deadline one; zero: none.
	Timeout time.Duration
	// Action at the deadline: subjects.ExpiryCancel (the default: fail
	// closed) or subjects.ExpiryEscalate. Resolve needs the agent's payload,
	// so it cannot be a default.
	Action string
	// RemindBefore lists reminders before each deadline.
	RemindBefore []time.Duration
	// Extend and Times configure escalation: how far each one moves the
	// deadline, and how many there are (default 1) before cancelling.
	Extend time.Duration
	Times  int
	// Approvers are added to those allowed to decide on escalation.
	Approvers []string
}

// policy returns the expiry policy in force for in.
func (e ExpiryDefaults) policy(in subjects.Interrupt) subjects.ExpiryPolicy {
	if in.OnExpiry != nil && in.OnExpiry.Action != "" {
		p := *in.OnExpiry
		if p.Action == subjects.ExpiryEscalate && p.Times == 0 {
			p.Times = 1
		}
		return p
	}
	p := subjects.ExpiryPolicy{Action: e.Action, Approvers: e.Approvers, ExtendSeconds: int(e.Extend / time.Second), Times: e.Times}
	if p.Action == "" || (p.Action == subjects.ExpiryEscalate && p.ExtendSeconds <= 0) || p.Action == subjects.ExpiryResolve {
		p.Action = subjects.ExpiryCancel
	}
	if p.Action == subjects.ExpiryEscalate && p.Times == 0 {
		p.Times = 1
	}
	return p
}

func (e ExpiryDefaults) reminders(in subjects.Interrupt) []time.Duration {
	if len(in.RemindBeforeSeconds) > 0 {
		out := make([]time.Duration, len(in.RemindBeforeSeconds))
		for i, s := range in.RemindBeforeSeconds {
			out[i] = time.Duration(s) * time.Second
		}
		return out
	}
	return e.RemindBefore
}

// timerName names a timer: its kind, for reminders the offset, and a digest
// of the interrupt and the deadline, so re-arming the same deadline yields
// the same timers and a moved deadline new ones.
func timerName(kind string, offset time.Duration, interrupt string, deadline time.Time) string {
	h := sha256.Sum256([]byte(interrupt + "\x00" + deadline.UTC().Format(time.RFC3339Nano)))
	prefix := "e"
	if kind == subjects.TimerRemind {
		prefix = "r" + strconv.FormatInt(int64(offset/time.Millisecond), 10)
	}
	return prefix + "-" + hex.EncodeToString(h[:8])
}

func expiryDecisionID(timer string) string { return "expiry-" + timer }

// armTimers schedules the expiry and reminders of every undecided interrupt
// of rec that has a deadline. It is idempotent: the timers' message ids are
// their names.
func (co *Coordinator) armTimers(ctx context.Context, rec *subjects.Run) error {
	msgs, err := co.timerMsgs(rec)
	if err != nil || len(msgs) == 0 {
		return err
	}
	return co.client.PublishAll(ctx, msgs...)
}

// timerMsgs are the schedules armTimers publishes.
func (co *Coordinator) timerMsgs(rec *subjects.Run) ([]jetstream.OutMsg, error) {
	var out []jetstream.OutMsg
	now := co.now()
	for _, st := range rec.Interrupts {
		if st.Decision != nil || st.ExpiresAt == nil || st.Pass != rec.Pass {
			continue
		}
		deadline := *st.ExpiresAt
		timers := []subjects.Timer{{Kind: subjects.TimerExpire, At: deadline,
			Name: timerName(subjects.TimerExpire, 0, st.ID, deadline)}}
		for _, before := range co.cfg.Expiry.reminders(st.Interrupt) {
			if at := deadline.Add(-before); at.After(now) {
				timers = append(timers, subjects.Timer{Kind: subjects.TimerRemind, At: at,
					Name: timerName(subjects.TimerRemind, before, st.ID, deadline)})
			}
		}
		due, err := co.ns.TimerDue(rec.RunID)
		if err != nil {
			return nil, err
		}
		for _, t := range timers {
			t.Version, t.RunID, t.InterruptID, t.Deadline = subjects.Version, rec.RunID, st.ID, deadline
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
	}
	return out, nil
}

// timerHistory describes the timers of rec's new deadlines for its history.
func (co *Coordinator) timerHistory(st subjects.InterruptState, now time.Time) subjects.HistoryEntry {
	detail := "expires " + st.ExpiresAt.Format(time.RFC3339) + ", then " + co.cfg.Expiry.policy(st.Interrupt).Action
	if r := co.cfg.Expiry.reminders(st.Interrupt); len(r) > 0 {
		detail += fmt.Sprintf("; reminders %v before", r)
	}
	return subjects.HistoryEntry{At: now, Type: subjects.EventTimerArmed, Pass: st.Pass, InterruptID: st.ID, Detail: detail}
}

// timerAction is what a due timer did.
type timerAction int

const (
	timerNone timerAction = iota
	timerReminded
	timerEscalated
	timerExpired
)

func (co *Coordinator) handleTimer(ctx context.Context, m *jetstream.Msg) error {
	defer co.metrics.timed("timer", time.Now())
	t, err := subjects.DecodeTimer(m.Data)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("timer: %w", err))
	}
	// Schedules fire at whole seconds: one that fired early waits.
	if early := t.At.Sub(co.now()); early > 0 {
		return jetstream.RetryAfter(early, errors.New("timer fired early"))
	}
	for range maxCASAttempts {
		rec, rev, err := co.load(ctx, t.RunID)
		if err != nil || rec == nil {
			return err
		}
		i := findInterrupt(rec, t.InterruptID)
		if i < 0 {
			return nil
		}
		st := rec.Interrupts[i]
		if slices.Contains(st.Fired, t.Name) {
			// A redelivery after the record was written: finish the effects.
			return co.timerEffects(ctx, rec, i, t, firedAction(st, t))
		}
		live := st.Decision == nil && rec.Status == subjects.RunSuspended && st.Pass == rec.Pass &&
			st.ExpiresAt != nil && st.ExpiresAt.Equal(t.Deadline)
		if !live {
			return nil // decided, or the deadline moved: the timer is harmless
		}
		next, action := co.applyTimer(rec, i, t)
		if err := co.store(ctx, next, rev); errors.Is(err, jetstream.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		if co.crash("timer-after-record") {
			return errAbandoned
		}
		co.metrics.timers.WithLabelValues([...]string{"none", "reminded", "escalated", "expired"}[action]).Inc()
		return co.timerEffects(ctx, next, i, t, action)
	}
	return fmt.Errorf("run %s: compare-and-set kept losing", t.RunID)
}

func firedAction(st subjects.InterruptState, t subjects.Timer) timerAction {
	switch {
	case t.Kind == subjects.TimerRemind:
		return timerReminded
	case st.Decision != nil && st.Decision.DecisionID == expiryDecisionID(t.Name):
		return timerExpired
	default:
		return timerEscalated
	}
}

// applyTimer returns rec with timer t applied to interrupt i.
func (co *Coordinator) applyTimer(rec *subjects.Run, i int, t subjects.Timer) (*subjects.Run, timerAction) {
	now := co.now()
	cp := *rec
	cp.Interrupts = slices.Clone(rec.Interrupts)
	cp.History = slices.Clone(rec.History)
	st := &cp.Interrupts[i]
	st.Fired = append(slices.Clone(st.Fired), t.Name)
	if t.Kind == subjects.TimerRemind {
		st.Reminders++
		cp.History = append(cp.History, subjects.HistoryEntry{At: now, Type: subjects.EventReminded, Pass: st.Pass,
			InterruptID: st.ID, Detail: "expires " + st.ExpiresAt.Format(time.RFC3339)})
		return &cp, timerReminded
	}
	p := co.cfg.Expiry.policy(st.Interrupt)
	if p.Action == subjects.ExpiryEscalate && st.Escalations < p.Times {
		deadline := st.ExpiresAt.Add(time.Duration(p.ExtendSeconds) * time.Second)
		st.ExpiresAt = &deadline
		st.Escalations++
		for _, a := range p.Approvers {
			if len(st.Approvers) > 0 && !slices.Contains(st.Approvers, a) {
				st.Approvers = append(slices.Clone(st.Approvers), a)
			}
		}
		cp.History = append(cp.History, subjects.HistoryEntry{At: now, Type: subjects.EventEscalated, Pass: st.Pass,
			InterruptID: st.ID, Detail: fmt.Sprintf("escalation %d of %d; now expires %s", st.Escalations, p.Times,
				deadline.Format(time.RFC3339))}, co.timerHistory(*st, now))
		return &cp, timerEscalated
	}
	d := subjects.Decision{Version: subjects.Version, DecisionID: expiryDecisionID(t.Name), InterruptID: st.ID,
		Status: subjects.StatusCancelled, Approver: subjects.ExpiryApprover, Metadata: json.RawMessage(`{"reason":"expired"}`),
		Comment: "nobody decided by " + t.Deadline.Format(time.RFC3339)}
	if p.Action == subjects.ExpiryResolve {
		d.Status, d.Payload = subjects.StatusResolved, p.Payload
		d.Comment += "; resolved with the agent's default"
	}
	cp.History = append(cp.History, subjects.HistoryEntry{At: now, Type: subjects.EventExpired, Pass: st.Pass,
		InterruptID: st.ID, Detail: string(d.Status)})
	out := co.applyDecision(&cp, i, d, 0)
	return out, timerExpired
}

// timerEffects publishes what a timer's record change implies, each publish
// deduplicated so a redelivery repeats nothing.
func (co *Coordinator) timerEffects(ctx context.Context, rec *subjects.Run, i int, t subjects.Timer, action timerAction) error {
	st := rec.Interrupts[i]
	key := "timer-" + t.Name
	var kind string
	var evType subjects.EventType
	seq := 1
	switch action {
	case timerReminded:
		kind, evType, seq = subjects.KindReminder, subjects.EventReminded, st.Reminders
	case timerEscalated:
		timers, err := co.timerMsgs(rec)
		if err != nil {
			return err
		}
		index, err := co.pendingPuts(rec) // the new deadline and approvers
		if err != nil {
			return err
		}
		if err := co.client.PublishAll(ctx, append(timers, index...)...); err != nil {
			return err
		}
		kind, evType, seq = subjects.KindEscalated, subjects.EventEscalated, st.Escalations
	case timerExpired:
		if err := co.accepted(ctx, origin{subject: "timer " + t.Name, key: key, via: "expiry", approver: subjects.ExpiryApprover}, rec, *st.Decision); err != nil {
			return err
		}
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
	if err := co.publishNotice(ctx, rec, st, kind, seq, t.Name, detail); err != nil {
		return err
	}
	return co.event(ctx, subjects.Event{Type: evType, RunID: rec.RunID, Agent: rec.Agent, Pass: st.Pass,
		InterruptIDs: []string{st.ID}, Detail: detail}, key)
}

// publishNotice tells notifiers about interrupt st.
func (co *Coordinator) publishNotice(ctx context.Context, rec *subjects.Run, st subjects.InterruptState, kind string, seq int, timer, detail string) error {
	subject, err := co.ns.Notice(kind, rec.Agent, rec.RunID)
	if err != nil {
		return err
	}
	n := subjects.Notice{PassRef: subjects.PassRef{Version: subjects.Version, RunID: rec.RunID, Agent: rec.Agent,
		ThreadID: rec.ThreadID, Pass: st.Pass}, Kind: kind, Seq: seq, Timer: timer, Interrupts: []subjects.Interrupt{st.Interrupt},
		At: co.now(), Detail: detail}
	if st.Decision != nil {
		n.Status = st.Decision.Status
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	_, err = co.client.Publish(ctx, subject, data, rec.RunID+":"+kind+":"+timer, nil)
	return err
}
