package rules

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// suspended is the record of run r1 suspended in pass 0 on the given
// interrupts.
func suspended(t *testing.T, s *Set, ins ...subjects.Interrupt) *subjects.Run {
	t.Helper()
	susp := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "r1", Agent: "refunds"}, Interrupts: ins}
	rec, err := s.ApplyOutcome(nil, Outcome{PassRef: susp.PassRef, Kind: subjects.KindSuspended, Suspension: &susp},
		Arrival{Seq: 7}, t0)
	require.NoError(t, err)
	return rec
}

func ask(id string, approvers ...string) subjects.Interrupt {
	return subjects.Interrupt{ID: id, Reason: subjects.ReasonConfirmation, Approvers: approvers}
}

func decision(id, interrupt string, status subjects.Status, approver string) subjects.Decision {
	return subjects.Decision{Version: 1, DecisionID: id, InterruptID: interrupt, Status: status, Approver: approver}
}

func TestFirstOutcome(t *testing.T) {
	t.Parallel()
	s := &Set{}
	rec := suspended(t, s, ask("a"), ask("b"))
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.Equal(t, 0, rec.Pass)
	assert.Equal(t, uint64(7), rec.SuspensionSeq)
	assert.Len(t, rec.Pending(), 2)
	assert.Equal(t, t0, rec.CreatedAt)
	assert.Equal(t, t0, rec.UpdatedAt)

	_, err := s.ApplyOutcome(nil, Outcome{PassRef: subjects.PassRef{RunID: "r2", Pass: 1}, Kind: subjects.KindCompleted}, Arrival{}, t0)
	assert.ErrorIs(t, err, subjects.ErrMalformed, "a run's first outcome is pass 0")
}

func TestStaleAndRecordedOutcome(t *testing.T) {
	t.Parallel()
	s := &Set{}
	rec := suspended(t, s, ask("a"))
	susp := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "r1", Agent: "refunds"}, Interrupts: []subjects.Interrupt{ask("a")}}
	o := Outcome{PassRef: susp.PassRef, Kind: subjects.KindSuspended, Suspension: &susp}
	_, err := s.ApplyOutcome(rec, o, Arrival{}, t0)
	var stale *StaleError
	require.ErrorAs(t, err, &stale, "the same pass again is stale")
	assert.Equal(t, 0, stale.Expected)
	assert.True(t, Recorded(rec, o), "and already recorded: a redelivery")
	other := Outcome{PassRef: susp.PassRef, Kind: subjects.KindCompleted}
	assert.False(t, Recorded(rec, other), "a completion of a suspended pass is not recorded: a pass that ran twice")
}

// TestOutcomeOfAnotherAgent: an agent reports a pass of another agent's run
// on its own subjects (the ones NATS lets it publish on), the pass the run
// waits for: refused with its own code, the record unchanged.
func TestOutcomeOfAnotherAgent(t *testing.T) {
	t.Parallel()
	s := &Set{}
	rec := suspended(t, s, ask("a"))
	rec.Status = subjects.RunResuming
	o := Outcome{PassRef: subjects.PassRef{Version: 1, RunID: "r1", Agent: "billing", Pass: 1}, Kind: subjects.KindCompleted}
	next, err := s.ApplyOutcome(rec, o, Arrival{}, t0)
	require.ErrorIs(t, err, subjects.ErrWrongAgent)
	assert.Equal(t, subjects.CodeWrongAgent, subjects.CodeOf(err))
	assert.Nil(t, next)
	assert.Equal(t, subjects.RunResuming, rec.Status)
}

func TestDecisionRules(t *testing.T) {
	t.Parallel()
	s := &Set{Groups: func(id string) []string {
		if id == "cy" {
			return []string{"finance"}
		}
		return nil
	}}
	in := ask("a", "ada")
	rec := suspended(t, s, in, subjects.Interrupt{ID: "g", Reason: subjects.ReasonConfirmation, ApproverGroups: []string{"finance"}})

	cases := []struct {
		name     string
		rec      *subjects.Run
		d        subjects.Decision
		identity string
		code     subjects.Code
	}{
		{"no run", nil, decision("d1", "a", subjects.StatusResolved, "ada"), "ada", subjects.CodeUnknownRun},
		{"no interrupt", rec, decision("d1", "zz", subjects.StatusResolved, "ada"), "ada", subjects.CodeUnknownInterrupt},
		{"someone else", rec, decision("d1", "a", subjects.StatusResolved, "bob"), "bob", subjects.CodeNotAllowed},
		{"anonymous on a named interrupt", rec, decision("d1", "a", subjects.StatusResolved, ""), "", subjects.CodeNotAllowed},
		{"not in the group", rec, decision("d1", "g", subjects.StatusResolved, "bob"), "bob", subjects.CodeNotAllowed},
	}
	for _, c := range cases {
		_, rej := s.CheckDecision(c.rec, c.d, s.Principal(c.identity), t0)
		require.NotNil(t, rej, c.name)
		assert.Equal(t, c.code, rej.Code, c.name)
	}
	i, rej := s.CheckDecision(rec, decision("d2", "g", subjects.StatusResolved, "cy"), s.Principal("cy"), t0)
	require.Nil(t, rej, "a member of the group may decide")
	assert.Equal(t, 1, i)

	i, rej = s.CheckDecision(rec, decision("d1", "a", subjects.StatusResolved, "ada"), s.Principal("ada"), t0)
	require.Nil(t, rej)
	next := ApplyDecision(rec, i, decision("d1", "a", subjects.StatusResolved, "ada"), 9, t0.Add(time.Second))
	assert.Equal(t, subjects.RunSuspended, next.Status, "one interrupt still waits")
	assert.Nil(t, rec.Interrupts[0].Decision, "the record given is not changed")
	assert.False(t, CompletesPass(next, next.Interrupts[0]))

	// The same decision again is a duplicate, from its approver only.
	i, rej = s.CheckDecision(next, decision("d1", "a", subjects.StatusResolved, "ada"), s.Principal("ada"), t0)
	require.Nil(t, rej)
	assert.NotNil(t, next.Interrupts[i].Decision, "a duplicate finds the decision recorded")
	_, rej = s.CheckDecision(next, decision("d1", "a", subjects.StatusCancelled, "bob"), s.Principal("bob"), t0)
	require.NotNil(t, rej)
	assert.Equal(t, subjects.CodeNotAllowed, rej.Code, "another identity's decision id")
	_, rej = s.CheckDecision(next, decision("d9", "a", subjects.StatusCancelled, "ada"), s.Principal("ada"), t0)
	require.NotNil(t, rej)
	assert.Equal(t, subjects.CodeAlreadyDecided, rej.Code)

	last := ApplyDecision(next, 1, decision("d2", "g", subjects.StatusCancelled, "cy"), 10, t0.Add(2*time.Second))
	assert.Equal(t, subjects.RunResuming, last.Status)
	assert.True(t, CompletesPass(last, last.Interrupts[1]))
	assert.True(t, ReplayDue(last, last.Interrupts[1]))
	w := Replay(last)
	assert.Equal(t, 1, w.Pass)
	assert.Len(t, w.Decisions, 2)
}

func TestExpiredAndSchema(t *testing.T) {
	t.Parallel()
	s := &Set{}
	deadline := t0.Add(time.Minute)
	in := ask("a")
	in.ExpiresAt = &deadline
	in.ResponseSchema = json.RawMessage(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"}}}`)
	rec := suspended(t, s, in)

	d := decision("d1", "a", subjects.StatusResolved, "")
	d.Payload = json.RawMessage(`{"amount":"many"}`)
	_, rej := s.CheckDecision(rec, d, s.Principal(""), t0)
	require.NotNil(t, rej)
	assert.Equal(t, subjects.CodeSchemaMismatch, rej.Code)
	assert.NotContains(t, rej.Detail, "many", "a refusal never repeats the answer")

	d.Payload = json.RawMessage(`{"amount":1}`)
	_, rej = s.CheckDecision(rec, d, s.Principal(""), deadline)
	require.NotNil(t, rej)
	assert.Equal(t, subjects.CodeExpired, rej.Code, "a resolve at the deadline is late")
	_, rej = s.CheckDecision(rec, decision("d2", "a", subjects.StatusCancelled, ""), s.Principal(""), deadline)
	assert.Nil(t, rej, "a cancel is still accepted")
}

func TestTimers(t *testing.T) {
	t.Parallel()
	s := &Set{Expiry: ExpiryDefaults{RemindBefore: []time.Duration{30 * time.Second, 2 * time.Minute}}}
	deadline := t0.Add(time.Minute)
	in := ask("a")
	in.ExpiresAt = &deadline
	rec := suspended(t, s, in)
	timers := s.Timers(rec, t0)
	require.Len(t, timers, 2, "the expiry and the one reminder still ahead")
	assert.Equal(t, subjects.TimerExpire, timers[0].Kind)
	assert.Equal(t, subjects.TimerRemind, timers[1].Kind)
	assert.Equal(t, deadline.Add(-30*time.Second), timers[1].At)
	assert.Equal(t, timers, s.Timers(rec, t0), "the same timers every time: arming twice is harmless")

	st := rec.Interrupts[0]
	assert.True(t, TimerLive(rec, st, timers[1]))
	reminded, action := s.ApplyTimer(rec, 0, timers[1], t0.Add(30*time.Second))
	assert.Equal(t, TimerReminded, action)
	assert.Equal(t, 1, reminded.Interrupts[0].Reminders)
	assert.Equal(t, TimerReminded, FiredAction(reminded.Interrupts[0], timers[1]))

	expired, action := s.ApplyTimer(reminded, 0, timers[0], deadline)
	assert.Equal(t, TimerExpired, action)
	got := expired.Interrupts[0].Decision
	require.NotNil(t, got)
	assert.Equal(t, subjects.StatusCancelled, got.Status, "silence is never approval")
	assert.Equal(t, subjects.ExpiryApprover, got.Approver)
	assert.Equal(t, subjects.RunResuming, expired.Status)
	assert.Equal(t, TimerExpired, FiredAction(expired.Interrupts[0], timers[0]))
	assert.False(t, TimerLive(expired, expired.Interrupts[0], timers[0]), "a decided interrupt's timer is harmless")

	// After expiry a resolve is refused and a cancel changes nothing.
	_, rej := s.CheckDecision(expired, decision("late", "a", subjects.StatusResolved, ""), s.Principal(""), deadline)
	require.NotNil(t, rej)
	assert.Equal(t, subjects.CodeExpired, rej.Code)
	_, rej = s.CheckDecision(expired, decision("late", "a", subjects.StatusCancelled, ""), s.Principal(""), deadline)
	assert.Equal(t, Noop, rej)
}

func TestEscalation(t *testing.T) {
	t.Parallel()
	s := &Set{}
	deadline := t0.Add(time.Minute)
	in := ask("a", "ada")
	in.ExpiresAt = &deadline
	in.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 60, Approvers: []string{"boss"}}
	rec := suspended(t, s, in)
	timers := s.Timers(rec, t0)
	next, action := s.ApplyTimer(rec, 0, timers[0], deadline)
	require.Equal(t, TimerEscalated, action)
	st := next.Interrupts[0]
	assert.Equal(t, deadline.Add(time.Minute), *st.ExpiresAt)
	assert.Equal(t, []string{"ada", "boss"}, st.Approvers)
	assert.False(t, TimerLive(next, st, timers[0]), "the old deadline's timer is harmless")
	again := s.Timers(next, deadline)
	require.Len(t, again, 1)
	assert.NotEqual(t, timers[0].Name, again[0].Name, "a moved deadline gets a new timer")

	final, action := s.ApplyTimer(next, 0, again[0], *st.ExpiresAt)
	assert.Equal(t, TimerExpired, action, "escalated Times times, then cancelled")
	assert.Equal(t, subjects.StatusCancelled, final.Interrupts[0].Decision.Status)
}

func TestExpiryDefaultsNeverResolve(t *testing.T) {
	t.Parallel()
	p := ExpiryDefaults{Action: subjects.ExpiryResolve}.Policy(ask("a"))
	assert.Equal(t, subjects.ExpiryCancel, p.Action, "resolve needs the agent's own payload")
	p = ExpiryDefaults{Action: subjects.ExpiryEscalate}.Policy(ask("a"))
	assert.Equal(t, subjects.ExpiryCancel, p.Action, "escalating without an extension would never end")
}

func TestRejectionError(t *testing.T) {
	t.Parallel()
	rej := Reject(subjects.CodeExpired, "interrupt %s", "a")
	var err error = rej
	var got *Rejection
	require.True(t, errors.As(err, &got))
	assert.Equal(t, "expired: interrupt a", err.Error())
}

// The no-op answer is told by its code, not by the pointer: a copy is one.
func TestNoopByCode(t *testing.T) {
	t.Parallel()
	cp := *Noop
	assert.True(t, (&cp).IsNoop())
	assert.True(t, Noop.IsNoop())
	assert.False(t, (*Rejection)(nil).IsNoop())
	assert.False(t, Reject(subjects.CodeExpired, "x").IsNoop())
}

// TestEscalationCannotWidenOperatorApprovers: an agent cannot loosen an
// operator rule that names who may decide by asking for an escalation to
// someone else: at the deadline only the approvers the rule allows are
// added, so eve, whom the agent named, may not decide alone.
func TestEscalationCannotWidenOperatorApprovers(t *testing.T) {
	t.Parallel()
	members := func(g string) []string { return map[string][]string{"treasury": {"ada", "bob"}}[g] }
	for name, req := range map[string]Requirement{
		"approvers": {Rule: "ada-only", Approvers: []string{"ada"}},
		"groups":    {Rule: "treasury", ApproverGroups: []string{"treasury"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := &Set{Members: members,
				Operator: func(*subjects.Run, subjects.Interrupt) Ruling { return Ruling{Require: []Requirement{req}} }}
			deadline := t0.Add(time.Minute)
			in := ask("wire", "ada", "eve")
			in.ExpiresAt = &deadline
			in.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 3600,
				Approvers: []string{"eve", "bob"}}
			rec := suspended(t, s, in)
			next, action := s.ApplyTimer(rec, 0, s.Timers(rec, t0)[0], deadline)
			require.Equal(t, TimerEscalated, action)
			assert.NotContains(t, next.Interrupts[0].Approvers, "eve", "the agent's escalation is held to the rule")
			_, rej := s.CheckDecision(next, decision("d1", "wire", subjects.StatusResolved, "eve"), s.Principal("eve"),
				deadline.Add(time.Second))
			require.NotNil(t, rej, "eve may not decide")
			assert.Equal(t, subjects.CodeNotAllowed, rej.Code)
			if name == "groups" {
				assert.Contains(t, next.Interrupts[0].Approvers, "bob", "one the rule allows is still added")
			}
		})
	}
}
