package processor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

func TestSuspendDecideReplay(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	run := h.start("refunds", map[string]string{"order": "A-1"}, WithThreadID("thread-1"))

	rec := h.suspendedAtPass(run, 0)
	require.Len(t, rec.Pending(), 1)
	in := rec.Pending()[0]
	assert.Equal(t, subjects.InterruptID(run, "call_refund", 0), in.ID)
	assert.Equal(t, subjects.ReasonToolCall, in.Reason)
	assert.Equal(t, "call_refund", in.ToolCallID)
	assert.Equal(t, "thread-1", rec.ThreadID)
	assert.JSONEq(t, `{"order":"A-1"}`, string(rec.Input))
	assert.Len(t, h.waitEvents(run, subjects.EventSuspended, 1), 1)

	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: in.ID, Status: subjects.StatusResolved,
		Payload: map[string]any{"amount": 10}, Approver: "alice"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	assert.True(t, v.Replay, "the only pending interrupt was decided: a replay is due")

	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.JSONEq(t, `{"quote":42,"amount":10,"approver":"alice"}`, string(rec.Result))
	assert.Equal(t, 2, calls.get("body"), "the body runs once per pass")
	assert.Equal(t, 1, calls.get("step"), "a journaled step runs once")
	assert.Equal(t, 1, rec.Pass)

	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted,
		subjects.EventCompleted}, h.trailTypes(run))
	assert.Empty(t, rec.History, "the record keeps no history: the trail is it")
	accepted := h.events(run, subjects.EventDecisionAccepted)
	require.Len(t, accepted, 1)
	// The accepted decision that queues the replay says so itself: no
	// separate resumed event (issue 25, one message and one fsync fewer per
	// cycle).
	require.NotNil(t, accepted[0].Verdict)
	assert.True(t, accepted[0].Verdict.Replay, "decision_accepted carries the replay")
	assert.Equal(t, 0, accepted[0].Pass, "the pass that waited; the replay is pass 1")
	assert.Empty(t, h.events(run, subjects.EventResumed), "no resumed event is written")
	assert.Len(t, h.replays(run), 1)
}

func TestIsResumingAndRequestNotReadOnReplay(t *testing.T) {
	t.Parallel()
	type seen struct{ before, after bool }
	results := make(chan seen, 4)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		resuming := IsResuming(ctx)
		req := Request{Message: "ok?"}
		if resuming {
			// A body that knows it is resuming need not rebuild the request:
			// this one is invalid, and it is never read.
			req = Request{ResponseSchema: func() {}}
		}
		d, err := Interrupt(ctx, req)
		results <- seen{before: resuming, after: IsResuming(ctx)}
		if err != nil {
			return nil, err
		}
		return string(d.Payload), nil
	}
	h := newHarness(t, map[string]AgentFunc{"a": agent})
	run := h.start("a", nil)
	rec := h.suspendedAtPass(run, 0)
	assert.Equal(t, seen{false, false}, <-results, "first pass: not resuming")
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, "yes")
	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.Equal(t, seen{true, false}, <-results, "replay: resuming before this interrupt, not after (none follows)")
	assert.JSONEq(t, `"\"yes\""`, string(rec.Result))
}

func TestOutsideRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := Interrupt(ctx, Request{Message: "x"})
	assert.ErrorIs(t, err, ErrNotInRun)
	assert.False(t, IsResuming(ctx))
	_, err = Step(ctx, "s", func(context.Context) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, ErrNotInRun)
	_, ok := RunOf(ctx)
	assert.False(t, ok)
}

// Two identical gated calls in one turn are tracked independently, and one
// suspension carries both.
func TestParallelToolCalls(t *testing.T) {
	t.Parallel()
	var calls counter
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		calls.inc("body")
		out := map[string]string{}
		var errs []error
		for _, id := range []string{"call_1", "call_2"} {
			d, err := Interrupt(WithToolCall(ctx, id), Request{Message: "delete file?"})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[id] = string(d.Payload)
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return out, nil
	}
	h := newHarness(t, map[string]AgentFunc{"files": agent})
	run := h.start("files", nil)
	rec := h.suspendedAtPass(run, 0)
	require.Len(t, rec.Pending(), 2)
	assert.Len(t, h.waitEvents(run, subjects.EventSuspended, 1), 1, "one suspension for the pass")
	byCall := map[string]string{}
	for _, in := range rec.Pending() {
		byCall[in.ToolCallID] = in.ID
	}
	require.NotEqual(t, byCall["call_1"], byCall["call_2"])

	v := h.decide(run, byCall["call_2"], subjects.StatusResolved, "second")
	assert.False(t, v.Replay, "one interrupt still waits")
	rec, err := h.client.Run(h.ctx(), run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.Len(t, rec.Pending(), 1)

	v = h.decide(run, byCall["call_1"], subjects.StatusResolved, "first")
	assert.True(t, v.Replay)
	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.JSONEq(t, `{"call_1":"\"first\"","call_2":"\"second\""}`, string(rec.Result))
	assert.Equal(t, 2, calls.get("body"))
}

func TestSequentialInterrupts(t *testing.T) {
	t.Parallel()
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		first, err := Interrupt(ctx, Request{Message: "first?"})
		if err != nil {
			return nil, err
		}
		second, err := Interrupt(ctx, Request{Message: "second?"})
		if err != nil {
			return nil, err
		}
		return []string{string(first.Payload), string(second.Payload)}, nil
	}
	h := newHarness(t, map[string]AgentFunc{"seq": agent})
	run := h.start("seq", nil)
	rec := h.suspendedAtPass(run, 0)
	require.Len(t, rec.Pending(), 1)
	assert.Equal(t, "first?", rec.Pending()[0].Message)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, 1)

	rec = h.suspendedAtPass(run, 1)
	require.Len(t, rec.Pending(), 1)
	assert.Equal(t, "second?", rec.Pending()[0].Message)
	assert.Equal(t, subjects.InterruptID(run, "", 1), rec.Pending()[0].ID)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, 2)

	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.JSONEq(t, `["1","2"]`, string(rec.Result))
	assert.Equal(t, 2, rec.Pass)
}

func TestCancelledIsDistinct(t *testing.T) {
	t.Parallel()
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, Request{Message: "ship it?"})
		if errors.Is(err, ErrCancelled) {
			var ce *CancelledError
			require.ErrorAs(t, err, &ce)
			return map[string]any{"shipped": false, "cancelled": d.Cancelled(), "comment": ce.Comment}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"shipped": true}, nil
	}
	h := newHarness(t, map[string]AgentFunc{"ship": agent})
	run := h.start("ship", nil)
	rec := h.suspendedAtPass(run, 0)
	_, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusCancelled, Comment: "not today"})
	require.NoError(t, err)
	rec = h.waitFor(run, Finished)
	assert.JSONEq(t, `{"shipped":false,"cancelled":true,"comment":"not today"}`, string(rec.Result))
}

// A body that ignores the cancelled error and propagates it fails the run:
// a cancellation is never mistaken for an approval.
func TestCancelledPropagatedFailsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := Interrupt(ctx, Request{})
		return "approved", err
	}})
	run := h.start("a", nil)
	rec := h.suspendedAtPass(run, 0)
	_, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID, Status: subjects.StatusCancelled})
	require.NoError(t, err)
	rec = h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "cancelled")
	assert.Len(t, h.waitEvents(run, subjects.EventFailed, 1), 1)
}

func TestFalsyPayloadsAreAnswers(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{`false`, `0`, `""`, `{}`, `[]`} {
		t.Run(payload, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, map[string]AgentFunc{"a": func(ctx context.Context, _ json.RawMessage) (any, error) {
				d, err := Interrupt(ctx, Request{})
				if err != nil {
					return nil, err
				}
				return map[string]any{"payload": d.Payload, "present": len(d.Payload) > 0}, nil
			}})
			run := h.start("a", nil)
			rec := h.suspendedAtPass(run, 0)
			h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, json.RawMessage(payload))
			rec = h.waitFor(run, Finished)
			require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
			assert.JSONEq(t, `{"payload":`+payload+`,"present":true}`, string(rec.Result))
		})
	}
}

func TestInvalidRequestFailsRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := Interrupt(ctx, Request{ResponseSchema: json.RawMessage(`{"type":"nonsense"}`)})
		return nil, err
	}})
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "invalid interrupt request")
}

func TestToolCallMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := Interrupt(WithToolCall(ctx, "call_a"), Request{ToolCallID: "call_b"})
		if !errors.Is(err, ErrToolCallMismatch) {
			t.Errorf("got %v, want ErrToolCallMismatch", err)
		}
		return nil, err
	}})
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
}

func TestRetryableRunsPassAgain(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newHarness(t, map[string]AgentFunc{"flaky": func(ctx context.Context, _ json.RawMessage) (any, error) {
		calls.inc("body")
		if calls.get("body") < 3 {
			return nil, Retryable(errors.New("model API busy"))
		}
		return "done", nil
	}})
	run := h.start("flaky", nil)
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.Equal(t, 3, calls.get("body"))
}

func TestInterruptIDsAreDeterministic(t *testing.T) {
	t.Parallel()
	a := subjects.InterruptID("run-1", "call_1", 0)
	assert.Equal(t, a, subjects.InterruptID("run-1", "call_1", 0))
	assert.NotEqual(t, a, subjects.InterruptID("run-1", "call_2", 0))
	assert.NotEqual(t, a, subjects.InterruptID("run-1", "call_1", 1))
	assert.NotEqual(t, a, subjects.InterruptID("run-2", "call_1", 0))
	assert.NotEqual(t, subjects.InterruptID("run", "1", 0), subjects.InterruptID("run1", "", 0), "fields are separated")
}
