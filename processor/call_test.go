package processor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// replayCtx is the context of pass 1 of run r1 inside tool call scope,
// with decision d of the scope's first interrupt.
func replayCtx(d subjects.Decision, scope string) context.Context {
	d.InterruptID = subjects.InterruptID("r1", scope, 0)
	w := subjects.Work{PassRef: subjects.PassRef{Version: 2, RunID: "r1", Agent: "refunds", Pass: 1},
		Decisions: []subjects.Decision{d}}
	p := newPass(RunInfo{RunID: "r1", Agent: "refunds", Pass: 1}, w, &schema.Cache{})
	return WithToolCall(context.WithValue(context.Background(), passKey{}, p), scope)
}

// TestReplayChecksTheApprovedCall: on the replay, Interrupt runs nothing
// but the approved call: another tool or other arguments (a model that
// chose differently on the replay) fail with ErrCallMismatch, as does a
// decision that approved no call; the approved call, or the approvers'
// edit of it, passes and exposes its execution key.
func TestReplayChecksTheApprovedCall(t *testing.T) {
	t.Parallel()
	args := map[string]any{"to": "ACME", "amount": 12400}
	approved, err := subjects.CallDigest("pay", json.RawMessage(`{"amount":12400,"to":"ACME"}`))
	require.NoError(t, err)
	d := subjects.Decision{Version: 2, DecisionID: "d1", Status: subjects.StatusResolved, Approver: "cy",
		CallDigest: approved, ExecutionKey: "7f" + approved[2:]}

	ctx := replayCtx(d, "call-1")
	got, err := Interrupt(ctx, Request{Call: &ToolCall{Tool: "pay", Arguments: args}})
	require.NoError(t, err)
	assert.Equal(t, approved, got.CallDigest)
	key, ok := ExecutionKey(ctx)
	assert.True(t, ok)
	assert.Equal(t, d.ExecutionKey, key)

	other := map[string]any{"to": "ACME", "amount": 99999}
	_, err = Interrupt(replayCtx(d, "call-1"), Request{Call: &ToolCall{Tool: "pay", Arguments: other}})
	require.ErrorIs(t, err, ErrCallMismatch)
	var mm *CallMismatchError
	require.True(t, errors.As(err, &mm))
	assert.Equal(t, approved, mm.Approved)

	_, err = Interrupt(replayCtx(d, "call-1"), Request{Call: &ToolCall{Tool: "refund", Arguments: args}})
	assert.ErrorIs(t, err, ErrCallMismatch, "another tool with the same arguments")

	unbound := d
	unbound.CallDigest, unbound.ExecutionKey = "", ""
	_, err = Interrupt(replayCtx(unbound, "call-1"), Request{Call: &ToolCall{Tool: "pay", Arguments: args}})
	assert.ErrorIs(t, err, ErrCallMismatch, "a decision that approved no call approves none")
	_, ok = ExecutionKey(replayCtx(unbound, "call-1"))
	assert.False(t, ok)

	edited := d
	edited.Arguments = json.RawMessage(`{"to":"ACME","amount":4000}`)
	edited.CallDigest, err = subjects.CallDigest("pay", edited.Arguments)
	require.NoError(t, err)
	got, err = Interrupt(replayCtx(edited, "call-1"), Request{Call: &ToolCall{Tool: "pay", Arguments: args}})
	require.NoError(t, err, "the approvers' edit is the approved call")
	assert.JSONEq(t, `{"to":"ACME","amount":4000}`, string(ApprovedArguments(got, args).(json.RawMessage)))
	require.ErrorIs(t, CheckCall(got, "pay", args), ErrCallMismatch, "the original arguments are not the approved call")
	require.NoError(t, CheckCall(got, "pay", ApprovedArguments(got, args)))
}

// TestInterruptCarriesCallAndPolicy: the suspend pass sends the call with
// its digest and the policy asked for.
func TestInterruptCarriesCallAndPolicy(t *testing.T) {
	t.Parallel()
	p := newPass(RunInfo{RunID: "r1", Agent: "refunds"}, subjects.Work{}, &schema.Cache{})
	ctx := WithToolCall(context.WithValue(context.Background(), passKey{}, p), "call-1")
	_, err := Interrupt(ctx, Request{Call: &ToolCall{Tool: "pay", Arguments: map[string]any{"amount": 42.5}},
		Policy: &subjects.Policy{Approvals: 2}, Approvers: []string{"ada", "bob", "cy"}})
	require.ErrorIs(t, err, ErrSuspended)
	require.Len(t, p.pending, 1)
	in := p.pending[0]
	require.NotNil(t, in.Call)
	want, _ := subjects.CallDigest("pay", json.RawMessage(`{"amount":42.5}`))
	assert.Equal(t, want, in.Call.Digest)
	assert.Equal(t, 2, in.Policy.Approvals)

	_, err = Interrupt(ctx, Request{Call: &ToolCall{Tool: "pay", Arguments: json.RawMessage(`{"a":1,"a":2}`)}})
	assert.ErrorIs(t, err, ErrInvalidRequest, "arguments with no digest are refused before they are published")
}

// TestVoteVerdictThroughEvents: a client that takes verdicts from the
// audit trail (the gateway, deciding for its users) gets a vote's verdict,
// vote_recorded with the tally, and the verdict of the same vote sent
// again.
func TestVoteVerdictThroughEvents(t *testing.T) {
	t.Parallel()
	h, rec := suspendedRun(t, Request{Approvers: []string{"ada", "bob", "cy"}, Policy: &subjects.Policy{Approvals: 2}})
	req := DecisionRequest{RunID: rec.RunID, InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved,
		Approver: "bob", DecisionID: "bob-1"}
	ctx, cancel := context.WithTimeout(h.ctx(), 10*time.Second)
	defer cancel()
	v, err := h.client.Decide(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeVoteRecorded, v.Outcome)
	require.NotNil(t, v.Tally)
	assert.Equal(t, 1, v.Tally.Approvals)

	v, err = h.client.Decide(ctx, req)
	require.NoError(t, err, "the same vote again: its verdict is found in the trail")
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)
}

// TestIsResumingSeesRuleDecisions: on a replay, a decision an operator
// rule made when asked (journaled under ask/<id>) is one Interrupt
// returns, so IsResuming says true, as it does for a person's decision:
// the notify-once pattern does not notify again on every replay.
func TestIsResumingSeesRuleDecisions(t *testing.T) {
	t.Parallel()
	id := subjects.InterruptID("r1", "small", 0)
	d, err := json.Marshal(subjects.Decision{Version: 2, DecisionID: "policy-1", InterruptID: id,
		Status: subjects.StatusResolved, Approver: subjects.PolicyApprover, Rule: "small-refunds"})
	require.NoError(t, err)
	w := subjects.Work{PassRef: subjects.PassRef{Version: 2, RunID: "r1", Agent: "refunds", Pass: 1},
		Journal: subjects.Journal{askKey(id): d}}
	p := newPass(RunInfo{RunID: "r1", Agent: "refunds", Pass: 1}, w, &schema.Cache{})
	ctx := WithToolCall(context.WithValue(context.Background(), passKey{}, p), "small")
	require.True(t, IsResuming(ctx), "the rule's journaled decision")
	got, err := Interrupt(ctx, Request{Message: "5?"})
	require.NoError(t, err)
	assert.Equal(t, subjects.PolicyApprover, got.Approver)
	assert.False(t, IsResuming(ctx), "the next interrupt of the scope is not decided")
}
