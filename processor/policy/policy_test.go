package policy

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/subjects"
)

const shipped = `
rules:
  - name: small-refunds
    match: 'tool == "issue_refund" && arguments.amount < 20'
    action: approve
  - name: prod-deploys
    match: 'tool == "deploy" && arguments.env == "prod"'
    action: require
    approvals: 2
    approverGroups: [sre]
    chatDecisions: false
    oneClickLinks: false
  - name: no-wires-abroad
    match: 'tool == "wire" && arguments.country != "DE"'
    action: deny
`

func interrupt(t *testing.T, tool, args string) subjects.Interrupt {
	t.Helper()
	c, err := subjects.NewCall(tool, json.RawMessage(args))
	require.NoError(t, err)
	return subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Call: c}
}

var rec = &subjects.Run{RunID: "r1", Agent: "refunds", Requester: "ada"}

// TestRulings: each action on the calls it matches, and nothing on the
// calls it does not.
func TestRulings(t *testing.T) {
	t.Parallel()
	s, err := Parse("policies.yaml", []byte(shipped))
	require.NoError(t, err)

	r := s.Ruling(rec, interrupt(t, "issue_refund", `{"amount":19.5}`))
	assert.Equal(t, "small-refunds", r.Approve)
	assert.Empty(t, r.Failed)

	r = s.Ruling(rec, interrupt(t, "issue_refund", `{"amount":20}`))
	assert.Empty(t, r.Approve)

	r = s.Ruling(rec, interrupt(t, "deploy", `{"env":"prod"}`))
	require.Len(t, r.Require, 1)
	assert.Equal(t, 2, r.Require[0].Approvals)
	assert.Equal(t, []string{"sre"}, r.Require[0].ApproverGroups)
	assert.True(t, r.Require[0].NoChat)
	assert.True(t, r.Require[0].NoLinks)

	r = s.Ruling(rec, interrupt(t, "wire", `{"country":"FR"}`))
	assert.Equal(t, "no-wires-abroad", r.Deny)
}

// TestRulesFailClosed: a rule reading a field the agent left out, or a
// value of the wrong type, or running past its budget, never approves,
// and a deny or require rule that fails applies; each failure is said.
func TestRulesFailClosed(t *testing.T) {
	t.Parallel()
	s, err := Parse("policies.yaml", []byte(shipped))
	require.NoError(t, err)

	r := s.Ruling(rec, interrupt(t, "issue_refund", `{"amt":1}`))
	assert.Empty(t, r.Approve, "a missing field never approves")
	require.NotEmpty(t, r.Failed)
	assert.Contains(t, r.Failed[0], "arguments.amount is missing")
	assert.Empty(t, r.Deny, "fields are read only where the expression reaches them: the wire rule is not about refunds")
	assert.Empty(t, r.Require)

	r = s.Ruling(rec, interrupt(t, "wire", `{"amount":1}`))
	assert.Equal(t, "no-wires-abroad", r.Deny, "the deny rule reading arguments.country, missing here, applies")
	r = s.Ruling(rec, interrupt(t, "deploy", `{}`))
	require.Len(t, r.Require, 1, "the require rule reading arguments.env, missing here, applies")
	r = s.Ruling(rec, subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation})
	assert.Empty(t, r.Approve, "no call: no tool, no arguments")

	r = s.Ruling(rec, interrupt(t, "issue_refund", `{"amount":"5","env":"dev","country":"DE"}`))
	assert.Empty(t, r.Approve, "a string where a number is compared never approves")
	assert.NotEmpty(t, r.Failed)

	slow, err := Compile(File{Budget: time.Microsecond, Rules: []Rule{
		{Name: "slow-approve", Action: Approve, Match: `all(1..2000000, # > 0)`},
		{Name: "slow-require", Action: Require, Approvals: 2, Match: `all(1..2000000, # > 0)`},
	}})
	require.NoError(t, err)
	r = slow.Ruling(rec, interrupt(t, "x", `{}`))
	assert.Empty(t, r.Approve, "over budget never approves")
	require.Len(t, r.Require, 1, "over budget, a require applies")
	require.Len(t, r.Failed, 2)
	assert.Contains(t, r.Failed[0], "budget")
}

// TestBadPolicies: a file that cannot be applied is refused when loaded.
func TestBadPolicies(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"unknown field":        "rules:\n  - name: a\n    match: 'true'\n    action: approve\n    approvers: [x]\n",
		"typo in a key":        "rules:\n  - name: a\n    match: 'true'\n    acton: approve\n",
		"no name":              "rules:\n  - match: 'true'\n    action: deny\n",
		"unknown action":       "rules:\n  - name: a\n    match: 'true'\n    action: allow\n",
		"not a boolean":        "rules:\n  - name: a\n    match: '1 + 1'\n    action: deny\n",
		"turns chat on":        "rules:\n  - name: a\n    match: 'true'\n    action: require\n    chatDecisions: true\n",
		"same name twice":      "rules:\n  - name: a\n    match: 'true'\n    action: deny\n  - name: a\n    match: 'true'\n    action: deny\n",
		"approvals over limit": "rules:\n  - name: a\n    match: 'true'\n    action: require\n    approvals: 40\n",
	} {
		_, err := Parse("p.yaml", []byte(src))
		assert.True(t, errors.Is(err, ErrConfig), "%s: %v", name, err)
	}
}

// TestMain checks that no evaluation outlives the tests: one over its
// budget is abandoned, not stopped, and must end on its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
