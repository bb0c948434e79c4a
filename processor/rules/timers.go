package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// ExpiryDefaults are the defaults for interrupt deadlines. An interrupt's
// own policy (its onExpiry, remindBeforeSeconds) wins.
type ExpiryDefaults struct {
	// Timeout gives interrupts without a deadline one; zero: none.
	Timeout time.Duration
	// Action at the deadline: subjects.ExpiryCancel (the default: fail
	// closed) or subjects.ExpiryEscalate. Resolve needs the agent's payload,
	// so it cannot be a default.
	Action subjects.ExpiryAction
	// RemindBefore lists reminders before each deadline.
	RemindBefore []time.Duration
	// Extend and Times configure escalation: how far each one moves the
	// deadline, and how many there are (default 1) before cancelling.
	Extend time.Duration
	Times  int
	// Approvers are added to those allowed to decide on escalation.
	Approvers []string
}

// Policy returns the expiry policy in force for in.
func (e ExpiryDefaults) Policy(in subjects.Interrupt) subjects.ExpiryPolicy {
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

// Reminders returns the reminder offsets before in's deadline.
func (e ExpiryDefaults) Reminders(in subjects.Interrupt) []time.Duration {
	if len(in.RemindBeforeSeconds) > 0 {
		out := make([]time.Duration, len(in.RemindBeforeSeconds))
		for i, s := range in.RemindBeforeSeconds {
			out[i] = time.Duration(s) * time.Second
		}
		return out
	}
	return e.RemindBefore
}

// TimerName names a timer: its kind, for reminders the offset, and a digest
// of the interrupt and the deadline, so arming the same deadline again
// yields the same timers and a moved deadline new ones.
func TimerName(kind subjects.TimerKind, offset time.Duration, interrupt string, deadline time.Time) string {
	h := sha256.Sum256([]byte(interrupt + "\x00" + deadline.UTC().Format(time.RFC3339Nano)))
	prefix := "e"
	if kind == subjects.TimerRemind {
		prefix = "r" + strconv.FormatInt(int64(offset/time.Millisecond), 10)
	}
	return prefix + "-" + hex.EncodeToString(h[:8])
}

// Timers are the timers rec's undecided interrupts of its current pass need
// at now: an expiry at each deadline and the reminders still ahead. Their
// names make arming them twice harmless.
func (s *Set) Timers(rec *subjects.Run, now time.Time) []subjects.Timer {
	var out []subjects.Timer
	for _, st := range rec.Interrupts {
		if st.Decision != nil || st.ExpiresAt == nil || st.Pass != rec.Pass {
			continue
		}
		deadline := *st.ExpiresAt
		timers := []subjects.Timer{{Kind: subjects.TimerExpire, At: deadline,
			Name: TimerName(subjects.TimerExpire, 0, st.ID, deadline)}}
		for _, before := range s.Expiry.Reminders(st.Interrupt) {
			if at := deadline.Add(-before); at.After(now) {
				timers = append(timers, subjects.Timer{Kind: subjects.TimerRemind, At: at,
					Name: TimerName(subjects.TimerRemind, before, st.ID, deadline)})
			}
		}
		for _, t := range timers {
			t.Version, t.RunID, t.InterruptID, t.Deadline = subjects.Version, rec.RunID, st.ID, deadline
			out = append(out, t)
		}
	}
	return out
}

// TimerAction is what a due timer did.
type TimerAction int

// Timer actions.
const (
	TimerNone TimerAction = iota
	TimerReminded
	TimerEscalated
	TimerExpired
)

// String is the action's metric label.
func (a TimerAction) String() string {
	return [...]string{"none", "reminded", "escalated", "expired"}[a]
}

// TimerLive reports whether timer t still concerns interrupt st of rec: it
// waits in the run's current pass and its deadline has not moved.
func TimerLive(rec *subjects.Run, st subjects.InterruptState, t subjects.Timer) bool {
	return st.Decision == nil && rec.Status == subjects.RunSuspended && st.Pass == rec.Pass &&
		st.ExpiresAt != nil && st.ExpiresAt.Equal(t.Deadline)
}

// FiredAction is what timer t did to st, once recorded in st.Fired.
func FiredAction(st subjects.InterruptState, t subjects.Timer) TimerAction {
	switch {
	case t.Kind == subjects.TimerRemind:
		return TimerReminded
	case st.Decision != nil && st.Decision.DecisionID == ExpiryDecisionID(t.Name):
		return TimerExpired
	default:
		return TimerEscalated
	}
}

// ApplyTimer returns rec with live timer t applied to interrupt i at now: a
// reminder counted, an escalation (a later deadline, more approvers), or
// the expiry's decision.
func (s *Set) ApplyTimer(rec *subjects.Run, i int, t subjects.Timer, now time.Time) (*subjects.Run, TimerAction) {
	now = utc(now)
	cp := clone(rec)
	cp.UpdatedAt = now
	st := &cp.Interrupts[i]
	st.Fired = append(slices.Clone(st.Fired), t.Name)
	if t.Kind == subjects.TimerRemind {
		st.Reminders++
		return cp, TimerReminded
	}
	p := s.Expiry.Policy(st.Interrupt)
	if p.Action == subjects.ExpiryEscalate && st.Escalations < p.Times {
		deadline := st.ExpiresAt.Add(time.Duration(p.ExtendSeconds) * time.Second)
		st.ExpiresAt = &deadline
		st.Escalations++
		for _, a := range p.Approvers {
			if len(st.Approvers) > 0 && !slices.Contains(st.Approvers, a) {
				st.Approvers = append(slices.Clone(st.Approvers), a)
			}
		}
		return cp, TimerEscalated
	}
	d := ExpiryDecision(*st, t.Name, t.Deadline, p)
	return ApplyDecision(cp, i, d, 0, now), TimerExpired
}

// ArmedDetail says what the timers of st's deadline will do, for the
// audit trail (the suspended event's detail): when it expires, what then,
// and the reminders before; empty without a deadline.
func (s *Set) ArmedDetail(st subjects.InterruptState) string {
	if st.ExpiresAt == nil {
		return ""
	}
	p := s.Expiry.Policy(st.Interrupt)
	then := p.Action
	if then == subjects.ExpiryEscalate && st.Escalations >= p.Times {
		then = subjects.ExpiryCancel // escalated as often as allowed
	}
	detail := "expires " + st.ExpiresAt.Format(time.RFC3339) + ", then " + string(then)
	if r := s.Expiry.Reminders(st.Interrupt); len(r) > 0 {
		detail += fmt.Sprintf("; reminders %v before", r)
	}
	return detail
}

// RecordBound is subjects.RecordBound of rec with the expiry policy and
// reminders in force for each interrupt (the interrupt's own, or these
// defaults): the most rec can grow to before every interrupt is decided.
func (s *Set) RecordBound(rec *subjects.Run) int {
	return subjects.RecordBound(rec, func(in subjects.Interrupt) int {
		return subjects.DecisionAllowance(in, s.Expiry.Policy(in), len(s.Expiry.Reminders(in)))
	})
}
