package rules

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// policyVectors are the shared vectors of testdata/conformance/policies.json.
type policyVectors struct {
	Tallies []struct {
		Name           string
		Policy         subjects.Policy
		Approvers      []string
		ApproverGroups []string
		Groups         map[string][]string
		Requester      string
		Call           *subjects.Call
		Steps          []struct {
			Vote struct {
				Approver, DecisionID, Status, Comment string
				Payload, Arguments                    json.RawMessage
				CallDigest                            string
			}
			Want struct {
				Outcome    subjects.Outcome
				Code       subjects.Code
				Tally      *subjects.Tally
				Status     subjects.Status
				Payload    json.RawMessage
				CallDigest string
				Voters     []string
			}
		}
	}
	Unsatisfiable []struct {
		Name           string
		Policy         subjects.Policy
		Approvers      []string
		ApproverGroups []string
		Groups         map[string][]string
		Requester      string
		Want           *subjects.Code
	}
}

func readPolicyVectors(t *testing.T) policyVectors {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/conformance/policies.json")
	require.NoError(t, err)
	var v policyVectors
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NotEmpty(t, v.Tallies)
	require.NotEmpty(t, v.Unsatisfiable)
	return v
}

func groupSet(groups map[string][]string) *Set {
	return &Set{Members: func(g string) []string { return groups[g] },
		Groups: func(id string) []string {
			var out []string
			for g, ms := range groups {
				for _, m := range ms {
					if m == id {
						out = append(out, g)
					}
				}
			}
			return out
		},
		ExecutionKey: func(run, in, digest string) string { return digest }}
}

// policyRun is run r1 suspended in pass 0 on interrupt "q" with policy p,
// started by requester.
func policyRun(t *testing.T, s *Set, requester string, in subjects.Interrupt) (*subjects.Run, error) {
	t.Helper()
	susp := subjects.Suspension{PassRef: subjects.PassRef{Version: 2, RunID: "r1", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{in}, Requester: requester}
	return s.ApplyOutcome(nil, Outcome{PassRef: susp.PassRef, Kind: subjects.KindSuspended, Suspension: &susp}, Arrival{Seq: 7}, t0)
}

// TestConformanceTallies runs every tally vector through CheckDecision and
// Decide: each vote's verdict, the tally, and the final decision.
func TestConformanceTallies(t *testing.T) {
	t.Parallel()
	for _, c := range readPolicyVectors(t).Tallies {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			s := groupSet(c.Groups)
			pol := c.Policy
			rec, err := policyRun(t, s, c.Requester, subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall,
				Approvers: c.Approvers, ApproverGroups: c.ApproverGroups, Policy: &pol, Call: c.Call})
			require.NoError(t, err)
			assert.Equal(t, subjects.Version2, rec.Version)
			for n, step := range c.Steps {
				v := step.Vote
				d := subjects.Decision{Version: 2, DecisionID: v.DecisionID, InterruptID: "q", Status: subjects.Status(v.Status),
					Payload: v.Payload, Arguments: v.Arguments, CallDigest: v.CallDigest, Approver: v.Approver, Comment: v.Comment}
				now := t0.Add(time.Duration(n+1) * time.Second)
				i, rej := s.CheckDecision(rec, d, s.Principal(v.Approver), now)
				if step.Want.Outcome == subjects.OutcomeRejected {
					require.NotNil(t, rej, "step %d: want %s", n, step.Want.Code)
					assert.Equal(t, step.Want.Code, rej.Code, "step %d: %s", n, rej.Detail)
					continue
				}
				require.Nil(t, rej, "step %d", n)
				rec = s.Decide(rec, i, d, uint64(100+n), now)
				st := rec.Interrupts[i]
				if step.Want.Outcome == subjects.OutcomeVoteRecorded {
					require.Nil(t, st.Decision, "step %d: a vote decided the interrupt", n)
					tally := s.Tally(rec, i, d)
					require.NotNil(t, tally)
					assert.Equal(t, *step.Want.Tally, *tally, "step %d", n)
					continue
				}
				require.NotNil(t, st.Decision, "step %d: want the interrupt decided", n)
				assert.Equal(t, step.Want.Status, st.Decision.Status, "step %d", n)
				if len(step.Want.Payload) > 0 {
					assert.JSONEq(t, string(step.Want.Payload), string(st.Decision.Payload), "step %d", n)
				}
				assert.Equal(t, step.Want.CallDigest, st.Decision.CallDigest, "step %d", n)
				var voters []string
				for _, vote := range st.Decision.Votes {
					voters = append(voters, vote.Approver)
				}
				assert.Equal(t, step.Want.Voters, voters, "step %d", n)
				assert.Equal(t, subjects.Version2, st.Decision.Version)
				assert.Empty(t, st.Votes, "the votes move into the final decision")
				if st.Decision.CallDigest != "" {
					assert.Equal(t, st.Decision.CallDigest, st.Decision.ExecutionKey, "the execution key is derived from the approved digest")
				}
			}
		})
	}
}

// TestConformanceUnsatisfiable checks that a policy needing more voters
// than can be eligible is refused when the interrupt is raised.
func TestConformanceUnsatisfiable(t *testing.T) {
	t.Parallel()
	for _, c := range readPolicyVectors(t).Unsatisfiable {
		s := groupSet(c.Groups)
		pol := c.Policy
		_, err := policyRun(t, s, c.Requester, subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation,
			Approvers: c.Approvers, ApproverGroups: c.ApproverGroups, Policy: &pol})
		if c.Want == nil {
			assert.NoError(t, err, c.Name)
			continue
		}
		require.Error(t, err, c.Name)
		assert.ErrorIs(t, err, subjects.ErrMalformed, c.Name)
		assert.Equal(t, *c.Want, subjects.CodeOf(err), c.Name)
	}
}

// TestStricterNeverWeaker: an agent's request combined with an operator's
// requirement takes the stricter value of every field, whichever is
// stricter, and the rules are recorded.
func TestStricterNeverWeaker(t *testing.T) {
	t.Parallel()
	members := func(g string) []string { return map[string][]string{"finance": {"bob", "cy", "dan"}}[g] }
	resolveDefault := subjects.ExpiryPolicy{Action: subjects.ExpiryResolve, Payload: json.RawMessage(`true`)}
	agent := subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Approvers: []string{"ada", "bob", "cy"},
		Policy:   &subjects.Policy{Approvals: 1, Denials: 3, AllowRequester: true, AllowChange: true},
		OnExpiry: &resolveDefault}
	got := Stricter(agent, []Requirement{{Rule: "two-of-finance", Approvals: 2, Denials: 1, ApproverGroups: []string{"finance"},
		NoChat: true, NoLinks: true}}, members)
	assert.Equal(t, 2, got.Policy.Approvals, "the larger approvals")
	assert.Equal(t, 1, got.Policy.Denials, "the smaller denials")
	assert.False(t, got.Policy.AllowRequester, "the requester only if the rule allows it too")
	assert.False(t, got.Policy.AllowChange)
	assert.Equal(t, []string{"bob", "cy"}, got.Approvers, "approvers both name")
	assert.Empty(t, got.ApproverGroups)
	assert.False(t, got.ChatAllowed())
	assert.False(t, got.LinksAllowed())
	assert.Equal(t, subjects.ExpiryCancel, got.OnExpiry.Action, "silence never approves what a rule gates")
	assert.Equal(t, []string{"two-of-finance"}, got.Policy.Rules)
	assert.Equal(t, 1, agent.Policy.Approvals, "the agent's request is not changed")

	// A stricter agent keeps its stricter values.
	strict := subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Policy: &subjects.Policy{Approvals: 3, Denials: 1}}
	got = Stricter(strict, []Requirement{{Rule: "r", Approvals: 2, Denials: 2, AllowRequester: true}}, members)
	assert.Equal(t, 3, got.Policy.Approvals)
	assert.Equal(t, 1, got.Policy.Denials)
	assert.False(t, got.Policy.AllowRequester)

	// A rule that names no denials has the default, one: an agent may not
	// raise it (before, its denials: 3 was kept).
	got = Stricter(subjects.Interrupt{ID: "q", Reason: "x", Policy: &subjects.Policy{Denials: 3}},
		[]Requirement{{Rule: "two", Approvals: 2}}, members)
	assert.Equal(t, 1, got.Policy.NeedDenials(), "a rule's default denials, 1")

	// Approvers nobody is both: nobody may decide, and the policy is refused.
	got = Stricter(subjects.Interrupt{ID: "q", Reason: "x", Approvers: []string{"ada"}},
		[]Requirement{{Rule: "r", ApproverGroups: []string{"finance"}}}, members)
	s := &Set{Members: members}
	_, err := policyRun(t, s, "", got)
	assert.Equal(t, subjects.CodePolicyUnsatisfiable, subjects.CodeOf(err))
}

// TestOperatorSettles: an approve rule resolves an interrupt one approval
// decides, as interlock:policy with the rule's name, and the run resumes
// when every interrupt is settled; a deny beats an approve; an approve
// never settles an interrupt that needs a quorum.
func TestOperatorSettles(t *testing.T) {
	t.Parallel()
	ruling := map[string]Ruling{
		"small":  {Approve: "small-refunds"},
		"both":   {Approve: "small-refunds", Deny: "blocked"},
		"quorum": {Approve: "small-refunds", Require: []Requirement{{Rule: "two", Approvals: 2}}},
	}
	s := &Set{Operator: func(_ *subjects.Run, in subjects.Interrupt) Ruling { return ruling[in.ID] },
		ExecutionKey: func(_, _, d string) string { return d }}
	call, err := subjects.NewCall("issue_refund", json.RawMessage(`{"amount":5}`))
	require.NoError(t, err)
	rec, err := policyRun(t, s, "", subjects.Interrupt{ID: "small", Reason: subjects.ReasonToolCall, Call: call})
	require.NoError(t, err)
	st := rec.Interrupts[0]
	require.NotNil(t, st.Decision)
	assert.Equal(t, subjects.PolicyApprover, st.Decision.Approver)
	assert.Equal(t, "small-refunds", st.Decision.Rule)
	assert.Equal(t, subjects.StatusResolved, st.Decision.Status)
	assert.Equal(t, call.Digest, st.Decision.CallDigest)
	assert.Equal(t, subjects.RunResuming, rec.Status, "nothing waits: the run resumes")

	rec, err = policyRun(t, s, "", subjects.Interrupt{ID: "both", Reason: subjects.ReasonToolCall})
	require.NoError(t, err)
	assert.Equal(t, subjects.StatusCancelled, rec.Interrupts[0].Decision.Status)
	assert.Equal(t, "blocked", rec.Interrupts[0].Decision.Rule)

	rec, err = policyRun(t, s, "", subjects.Interrupt{ID: "quorum", Reason: subjects.ReasonToolCall})
	require.NoError(t, err)
	assert.Nil(t, rec.Interrupts[0].Decision, "an approve rule does not settle a quorum")
	assert.Equal(t, 2, rec.Interrupts[0].Policy.Approvals)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
}

// TestDefaultEscalationWithinRule: a rule names who may decide (ada); the
// coordinator's default expiry escalates to eve. An interrupt with no
// onExpiry of its own, at its deadline, is extended but eve is not added:
// she may not decide what the rule gives to ada alone (before, the
// default escalation added her, and the agent chose when by its deadline).
func TestDefaultEscalationWithinRule(t *testing.T) {
	t.Parallel()
	s := &Set{Expiry: ExpiryDefaults{Action: subjects.ExpiryEscalate, Extend: time.Hour, Approvers: []string{"eve", "ada"}},
		Operator: func(*subjects.Run, subjects.Interrupt) Ruling {
			return Ruling{Require: []Requirement{{Rule: "ada-only", Approvers: []string{"ada", "bob"}}}}
		}}
	deadline := t0.Add(time.Second)
	in := ask("wire", "ada")
	in.ExpiresAt = &deadline
	rec := suspended(t, s, in)
	require.Equal(t, []string{"ada"}, rec.Interrupts[0].Approvers)
	next, action := s.ApplyTimer(rec, 0, s.Timers(rec, t0)[0], deadline)
	require.Equal(t, TimerEscalated, action, "the default escalation still extends the deadline")
	assert.Equal(t, []string{"ada"}, next.Interrupts[0].Approvers, "no approver the rule excludes")
	assert.True(t, next.Interrupts[0].ExpiresAt.After(deadline))
	_, rej := s.CheckDecision(next, decision("d1", "wire", subjects.StatusResolved, "eve"), s.Principal("eve"),
		deadline.Add(time.Second))
	require.NotNil(t, rej, "eve may not decide a wire the operator's rule gives to ada alone")

	// With no rule, the default escalation adds eve as before.
	s.Operator = nil
	rec = suspended(t, s, in)
	next, _ = s.ApplyTimer(rec, 0, s.Timers(rec, t0)[0], deadline)
	assert.Equal(t, []string{"ada", "eve"}, next.Interrupts[0].Approvers)
}
