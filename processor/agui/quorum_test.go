package agui_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/agui"
	"github.com/interlockhq/interlock/subjects"
)

// quorum is an agent whose one tool call needs two approvals, of ada and
// eve; allowRequester lets whoever started the run vote.
func quorum(allowRequester bool) processor.AgentFunc {
	return func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(processor.WithToolCall(ctx, "call_pay"), processor.Request{Message: "pay?",
			Reason: subjects.ReasonToolCall, Approvers: approversOf(allowRequester),
			Policy: &subjects.Policy{Approvals: 2, AllowRequester: allowRequester},
			Call:   &processor.ToolCall{Tool: "pay", Arguments: map[string]any{"amount": 40}}})
		if err != nil {
			return nil, err
		}
		return map[string]any{"votes": len(d.Votes)}, nil
	}
}

// approversOf: ada and eve; bob too when the requester may not vote, so
// that two can.
func approversOf(allowRequester bool) []string {
	if allowRequester {
		return []string{"ada", "eve"}
	}
	return []string{"ada", "bob", "eve"}
}

// TestResumeIsAVote: on an interrupt with a policy a resume entry is the
// session identity's vote. One that leaves the interrupt waiting ends the
// stream with a CUSTOM interlock.vote_recorded event (the tally) and the
// interrupt again, its metadata carrying the call, the tally and the
// votes; the deciding vote elsewhere finishes the run, which the thread's
// next request shows. A stale digest and a requester who may not vote are
// refused.
func TestResumeIsAVote(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.run(0, "quorum", map[string]any{"threadId": "q1", "runId": "r1"})
	ins := interrupts(t, evs)
	require.Len(t, ins, 1)
	meta := ins[0]["metadata"].(map[string]any)
	call := meta["interlock.call"].(map[string]any)
	assert.Equal(t, "pay", call["tool"])
	digest := call["digest"].(string)
	assert.EqualValues(t, 0, meta["interlock.tally"].(map[string]any)["approvals"])

	// A vote on other arguments is refused before anything is decided.
	stale := entry(ins[0]["id"], "resolved", nil)
	stale["callDigest"] = "0000000000000000000000000000000000000000000000000000000000000000"
	evs = e.run(0, "quorum", map[string]any{"threadId": "q1", "runId": "r2", "resume": []any{stale}})
	assert.Equal(t, "RUN_ERROR", last(evs)["type"])
	assert.Equal(t, string(subjects.CodeCallMismatch), last(evs)["code"])

	vote := entry(ins[0]["id"], "resolved", nil)
	vote["callDigest"] = digest
	evs = e.run(0, "quorum", map[string]any{"threadId": "q1", "runId": "r3", "resume": []any{vote}})
	custom := find(evs, "CUSTOM")
	require.NotNil(t, custom, "%v", types(evs))
	assert.Equal(t, agui.VoteRecordedEvent, custom["name"])
	tally := custom["value"].(map[string]any)["tally"].(map[string]any)
	assert.EqualValues(t, 1, tally["approvals"])
	assert.EqualValues(t, 2, tally["approvalsNeeded"])
	assert.Equal(t, []any{"ada"}, tally["waitingOn"])
	ins = interrupts(t, evs)
	require.Len(t, ins, 1, "the interrupt still waits")
	votes := ins[0]["metadata"].(map[string]any)["interlock.votes"].([]any)
	require.Len(t, votes, 1)
	assert.Equal(t, "eve", votes[0].(map[string]any)["approver"])

	// Ada's vote decides it; the thread's next request shows the outcome.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	run := e.runOf(ins[0]["id"].(string))
	v, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: run.RunID, InterruptID: ins[0]["id"].(string),
		Status: subjects.StatusResolved, Approver: "ada", CallDigest: digest})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	rec, err := e.client.Wait(ctx, run.RunID, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `{"votes":2}`, string(rec.Result), "the replay got both votes")
}

// TestResumeByRequesterExcluded: the thread's owner started the run; a
// policy that excludes the requester refuses the owner's resume.
func TestResumeByRequesterExcluded(t *testing.T) {
	e := newEnv(t, 1)
	ins := interrupts(t, e.run(0, "strict", map[string]any{"threadId": "s1", "runId": "r1"}))
	evs := e.run(0, "strict", map[string]any{"threadId": "s1", "runId": "r2",
		"resume": []any{entry(ins[0]["id"], "resolved", nil)}})
	assert.Equal(t, "RUN_ERROR", last(evs)["type"])
	assert.Equal(t, string(subjects.CodeRequesterExcluded), last(evs)["code"])
}
