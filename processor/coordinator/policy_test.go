package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// suspensionBy is the delivery of run's pass 0 suspending on ins, started
// by requester (protocol version 2).
func (e *env) suspensionBy(run, requester string, ins ...subjects.Interrupt) *jetstream.Delivery {
	s := subjects.Suspension{PassRef: ref(run, 0), Interrupts: ins, Requester: requester}
	m := e.msg(e.must(e.ns.Suspended(agent, run)), subjects.Versioned(&s), nil)
	e.st.Suspended(run, m.Sequence)
	return m
}

// lastOf is the last event of type t about the decision m.
func (e *env) lastOf(run string, m *jetstream.Delivery, t subjects.EventType) *subjects.Event {
	e.t.Helper()
	var last *subjects.Event
	for _, ev := range e.about(run, m.Subject) {
		if ev.Type == t {
			last = &ev
		}
	}
	require.NotNil(e.t, last, "no %s event for the decision on %s", t, m.Subject)
	return last
}

// TestQuorumDecision runs two of three approvals through the coordinator:
// the requester is refused, a vote is answered vote_recorded with the
// tally and queues nothing, a second vote of the same person is refused, a
// redelivered vote counts once, and the deciding vote resumes the run with
// a version 2 work item carrying every vote, the approved digest and the
// execution key.
func TestQuorumDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	call, err := subjects.NewCall("pay", json.RawMessage(`{"to":"ACME","amount":12400}`))
	require.NoError(t, err)
	in := subjects.Interrupt{ID: "pay", Reason: subjects.ReasonToolCall, Approvers: []string{"ada", "bob", "cy"},
		Policy: &subjects.Policy{Approvals: 2}, Call: call}
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "ada", in)))
	rec := e.record("r1")
	assert.Equal(t, "ada", rec.Requester)
	assert.Equal(t, subjects.Version2, rec.Version)

	vote := func(approver, id string) *jetstream.Delivery {
		d := resolve(id, "pay", "")
		d.Version, d.CallDigest = subjects.Version2, call.Digest
		m := e.decision("r1", approver, d, "")
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		return m
	}
	m := vote("ada", "d1")
	assert.Equal(t, subjects.CodeRequesterExcluded, e.verdictOf("r1", m).Code)

	m = vote("bob", "d2")
	ev := e.lastOf("r1", m, subjects.EventVoteRecorded)
	require.NotNil(t, ev.Verdict.Tally)
	assert.Equal(t, subjects.OutcomeVoteRecorded, ev.Verdict.Outcome)
	assert.Equal(t, subjects.Version2, ev.Verdict.Version)
	assert.Equal(t, subjects.Tally{Approvals: 1, ApprovalsNeeded: 2, DenialsNeeded: 1, CallDigest: call.Digest,
		WaitingOn: []string{"cy"}}, *ev.Verdict.Tally)
	assert.Empty(t, e.messages(subjects.KindWork), "a vote that decides nothing queues no replay")
	require.NoError(t, e.co.handleDecision(ctx(t), again(m)), "a redelivered vote")
	assert.Len(t, e.record("r1").Interrupts[0].Votes, 1, "a redelivered vote counts once")
	pending, err := store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	assert.Len(t, pending[0].Votes, 1, "the pending entry shows the votes so far")

	m = vote("bob", "d3")
	assert.Equal(t, subjects.CodeAlreadyVoted, e.verdictOf("r1", m).Code)

	m = vote("cy", "d4")
	v := e.verdictOf("r1", m)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	assert.True(t, v.Replay)
	assert.Equal(t, 2, v.Tally.Approvals)
	work := e.messages(subjects.KindWork)
	require.Len(t, work, 1)
	w, err := subjects.DecodeWork(work[0].Data)
	require.NoError(t, err)
	assert.Equal(t, subjects.Version2, w.Version, "a work item carrying votes is version 2: a version 1 worker refuses it")
	require.Len(t, w.Decisions, 1)
	d := w.Decisions[0]
	assert.Equal(t, "cy", d.Approver)
	assert.Equal(t, call.Digest, d.CallDigest)
	assert.Len(t, d.ExecutionKey, 64)
	require.Len(t, d.Votes, 2)
	assert.Equal(t, "bob", d.Votes[0].Approver)
	assert.Equal(t, "cy", d.Votes[1].Approver)
	assert.Equal(t, e.co.ids.ExecutionKey("r1", "pay", call.Digest), d.ExecutionKey)
	pending, err = store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	assert.Empty(t, pending, "decided: no longer pending")
}

// TestOperatorRuleSettlesSuspension: an interrupt an operator rule
// approves is decided by interlock:policy with the rule's name, audited
// as decision_accepted (via policy), and the run resumes with no human
// asked; a rule that fails is audited as rule_failed.
func TestOperatorRuleSettlesSuspension(t *testing.T) {
	t.Parallel()
	e := newEnv(t, smallRefunds(t))
	small, err := subjects.NewCall("issue_refund", json.RawMessage(`{"amount":5}`))
	require.NoError(t, err)
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "ada",
		subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Call: small})))
	rec := e.record("r1")
	assert.Equal(t, subjects.RunResuming, rec.Status)
	var accepted *subjects.Event
	for _, ev := range e.events("r1") {
		if ev.Type == subjects.EventDecisionAccepted {
			accepted = &ev
		}
	}
	require.NotNil(t, accepted, "the automatic decision is audited")
	assert.Equal(t, subjects.PolicyApprover, accepted.Verdict.Approver)
	assert.Equal(t, "policy", accepted.Verdict.Via)
	assert.Equal(t, "small-refunds", accepted.Verdict.Rule)
	require.Len(t, e.messages(subjects.KindWork), 1, "the replay is queued")

	// A refund whose amount the agent left out: the approve rule fails,
	// closed, and a person decides.
	missing, err := subjects.NewCall("issue_refund", json.RawMessage(`{"sum":5}`))
	require.NoError(t, err)
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r2", "ada",
		subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Call: missing})))
	assert.Equal(t, subjects.RunSuspended, e.record("r2").Status)
	var failed bool
	for _, ev := range e.events("r2") {
		failed = failed || ev.Type == subjects.EventRuleFailed
	}
	assert.True(t, failed, "the failed rule is audited")
}

// TestPolicyIdentityReserved: an anonymous decision that names the
// operator rules' identity in its body is refused, as the expiry's is: the
// trail must not show a person's answer as a rule's.
func TestPolicyIdentityReserved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("r1", 0, open)
	d := resolve("d1", "open", "")
	d.Approver = subjects.PolicyApprover
	m := e.decision("r1", "", d, "")
	require.NoError(t, e.co.handleDecision(ctx(t), m))
	assert.Equal(t, subjects.CodeNotAllowed, e.verdictOf("r1", m).Code)
	assert.Nil(t, e.record("r1").Interrupts[0].Decision)
}

// TestReminderCarriesTheTally: a reminder about an interrupt with a policy
// says where its votes stand (notifiers may not read run records), and
// decodes as version 2.
func TestReminderCarriesTheTally(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	in := expiring
	in.Approvers = []string{"ada", "bob", "cy"}
	in.Policy = &subjects.Policy{Approvals: 2}
	in.RemindBeforeSeconds = []int{600}
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "cy", in)))
	d := resolve("d1", in.ID, "")
	d.Version = subjects.Version2
	require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", "ada", d, "")))
	e.now = deadline.Add(-10 * time.Minute)
	require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", in.ID, subjects.TimerRemind)))
	notices := e.messages(subjects.KindReminder)
	require.Len(t, notices, 1)
	n, err := subjects.DecodeNotice(notices[0].Data)
	require.NoError(t, err)
	assert.Equal(t, subjects.Version2, n.Version)
	assert.Equal(t, map[string]subjects.Tally{in.ID: {Approvals: 1, ApprovalsNeeded: 2, DenialsNeeded: 1,
		WaitingOn: []string{"bob"}}}, n.Tallies)
}

// TestRedeliveredVoteAfterWithdrawal: ada's approval is recorded but its
// message not acknowledged (a crash after the record); she then withdraws
// it (or changes it to a denial) and bob approves; when her first message
// is delivered again it is stale: it must not bring her approval back and
// close the quorum of two.
func TestRedeliveredVoteAfterWithdrawal(t *testing.T) {
	t.Parallel()
	for name, later := range map[string]subjects.Status{"withdrawn": subjects.StatusWithdrawn, "changed": subjects.StatusCancelled} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hook, fired := fault.Once("decision-after-record")
			e := newEnv(t, Config{}).withFault(hook)
			in := subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation, Approvers: []string{"ada", "bob", "cy"},
				Policy: &subjects.Policy{Approvals: 2, Denials: 3, AllowChange: true}}
			require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "", in)))

			d1 := resolve("d1", "q", "")
			d1.Version = subjects.Version2
			m1 := e.decision("r1", "ada", d1, "")
			require.ErrorIs(t, e.co.handleDecision(ctx(t), m1), errAbandoned, "recorded, not acknowledged")
			<-fired
			d2 := subjects.Decision{Version: subjects.Version2, DecisionID: "d2", InterruptID: "q", Status: later}
			require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", "ada", d2, "")))
			b := resolve("d3", "q", "")
			b.Version = subjects.Version2
			require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", "bob", b, "")))
			require.Nil(t, e.record("r1").Interrupts[0].Decision, "one approval of two")

			require.NoError(t, e.co.handleDecision(ctx(t), again(m1)))
			rec := e.record("r1")
			assert.Nil(t, rec.Interrupts[0].Decision, "ada's replaced approval does not come back")
			assert.Equal(t, subjects.RunSuspended, rec.Status)
			for _, v := range rec.Interrupts[0].Votes {
				assert.NotEqual(t, "d1", v.DecisionID)
			}
		})
	}
}

// TestRedeliveredVoteAfterCloseIsAVote: ada's vote is recorded but its
// message not acknowledged; the interrupt then expires; her message
// delivered again is answered as the vote it was: the trail never says
// her vote decided the interrupt or replayed the run.
func TestRedeliveredVoteAfterCloseIsAVote(t *testing.T) {
	t.Parallel()
	hook, fired := fault.Once("decision-after-record")
	e := newEnv(t, Config{}).withFault(hook)
	in := subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation, Approvers: []string{"ada", "bob"},
		Policy: &subjects.Policy{Approvals: 2}, ExpiresAt: &deadline}
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "", in)))
	d1 := resolve("d1", "q", "")
	d1.Version = subjects.Version2
	m1 := e.decision("r1", "ada", d1, "")
	require.ErrorIs(t, e.co.handleDecision(ctx(t), m1), errAbandoned)
	<-fired
	e.now = deadline
	require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "q", subjects.TimerExpire)))
	require.NoError(t, e.co.handleDecision(ctx(t), again(m1)))
	var voted bool
	for _, ev := range e.events("r1") {
		if ev.Verdict == nil || ev.Verdict.DecisionID != "d1" {
			continue
		}
		assert.NotEqual(t, subjects.EventDecisionAccepted, ev.Type, "ada's vote did not decide: %+v", ev.Verdict)
		assert.False(t, ev.Verdict.Replay)
		voted = voted || ev.Type == subjects.EventVoteRecorded
	}
	assert.True(t, voted, "her vote is in the trail as a vote")
	assert.Equal(t, subjects.ExpiryApprover, e.record("r1").Interrupts[0].Decision.Approver)
}

// TestWithdrawnOnlyVoteLeavesTheIndex: ada's vote, then her withdrawal,
// within the duplicate window. With her vote withdrawn the entry has no
// votes, as at its first put; before, its put took the first put's id and
// was dropped as a repeat, and the index kept listing her withdrawn vote.
func TestWithdrawnOnlyVoteLeavesTheIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	in := subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation, Approvers: []string{"ada", "bob"},
		Policy: &subjects.Policy{Approvals: 2, AllowChange: true}}
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "", in)))
	d1 := resolve("d1", "q", "")
	d1.Version = subjects.Version2
	require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", "ada", d1, "")))
	d2 := subjects.Decision{Version: subjects.Version2, DecisionID: "d2", InterruptID: "q", Status: subjects.StatusWithdrawn}
	e.now = e.now.Add(time.Second)
	require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", "ada", d2, "")))
	require.Empty(t, e.record("r1").Interrupts[0].Votes, "the record holds no vote")
	pending, err := store.AllPending(ctx(t), e.st)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	assert.Empty(t, pending[0].Votes, "the index lists ada's withdrawn vote")
}
