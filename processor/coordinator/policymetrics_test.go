package coordinator

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// TestPolicyMetrics: interlock_votes_total counts each accepted vote by
// status, the deciding one included, and not a refused one;
// interlock_policy_decisions_total counts the decisions an operator rule
// made.
func TestPolicyMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, smallRefunds(t))
	call, err := subjects.NewCall("pay", json.RawMessage(`{"amount":12400}`))
	require.NoError(t, err)
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r1", "ada", subjects.Interrupt{ID: "pay",
		Reason: subjects.ReasonToolCall, Approvers: []string{"ada", "bob", "cy"}, Policy: &subjects.Policy{Approvals: 2}, Call: call})))
	vote := func(approver, id string) {
		d := resolve(id, "pay", "")
		d.Version, d.CallDigest = subjects.Version2, call.Digest
		require.NoError(t, e.co.handleDecision(ctx(t), e.decision("r1", approver, d, "")))
	}
	vote("ada", "d1") // the requester: refused
	vote("bob", "d2")
	assert.InDelta(t, 1, testutil.ToFloat64(e.co.metrics.votes.WithLabelValues("resolved")), 0)
	vote("cy", "d3")
	assert.InDelta(t, 2, testutil.ToFloat64(e.co.metrics.votes.WithLabelValues("resolved")), 0, "the deciding vote counts")

	small, err := subjects.NewCall("issue_refund", json.RawMessage(`{"amount":5}`))
	require.NoError(t, err)
	require.NoError(t, e.co.handleOutcome(ctx(t), e.suspensionBy("r2", "ada",
		subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Call: small})))
	assert.InDelta(t, 1, testutil.ToFloat64(e.co.metrics.auto.WithLabelValues("resolved")), 0)
}
