package processor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// rawVerdict publishes data on subject as any client in any language would,
// with a reply header, and returns the coordinator's verdict.
func (h *harness) rawVerdict(subject string, data []byte, msgID string) subjects.Verdict {
	h.t.Helper()
	// The coordinator answers only in the inbox of the identity the subject
	// names (subjects.InboxPrefix).
	var approver string
	if a, err := h.admin.Namespace().Parse(subject); err == nil {
		approver = a.Approver
	}
	inbox := h.inbox(approver)
	got := make(chan subjects.Verdict, 1)
	sub, err := h.admin.Subscribe(inbox, func(_ string, b []byte) {
		var v subjects.Verdict
		require.NoError(h.t, json.Unmarshal(b, &v))
		got <- v
	})
	require.NoError(h.t, err)
	defer sub.Unsubscribe()
	_, err = h.admin.Publish(h.ctx(), subject, data, msgID, jetstream.Header{jetstream.HeaderReplyTo: {inbox}})
	require.NoError(h.t, err)
	select {
	case v := <-got:
		return v
	case <-time.After(15 * time.Second):
		h.t.Fatal("no verdict")
		return subjects.Verdict{}
	}
}

// inbox is a fresh reply subject in identity's inbox ("" for anonymous).
func (h *harness) inbox(identity string) string {
	return subjects.InboxPrefix(identity) + "." + strings.TrimPrefix(h.admin.NewInbox(), "_INBOX.")
}

func (h *harness) resumeSubject(run string) string {
	s, err := h.admin.Namespace().Resume(run)
	require.NoError(h.t, err)
	return s
}

// suspendedRun starts the approval agent and returns its run record once
// suspended.
func suspendedRun(t *testing.T, req Request) (*harness, *subjects.Run) {
	h := newHarness(t, map[string]AgentFunc{"gate": func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, req)
		if err != nil {
			return nil, err
		}
		return d.Payload, nil
	}})
	run := h.start("gate", nil)
	return h, h.suspendedAtPass(run, 0)
}

// assertRejected checks a decision was refused with code and changed nothing,
// and that the refusal is recorded as an event.
func assertRejected(t *testing.T, h *harness, v subjects.Verdict, err error, code subjects.Code) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, ErrRejected)
	}
	assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
	assert.Equal(t, code, v.Code, v.Detail)
	assert.NotEmpty(t, v.Detail)
	run := v.RunID
	if run == "" || subjects.ValidateToken("run", run) != nil || code == subjects.CodeUnknownRun {
		run = subjects.NoRun
	}
	require.Eventually(t, func() bool {
		evs, err := h.client.Events(h.ctx(), run)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Type == subjects.EventDecisionRejected && e.Verdict != nil && e.Verdict.Code == code {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "rejection %s recorded as an event", code)
}

// TestDecisionUnknownRun: a decision for a run that does not exist is
// recorded under the no-run token, never on an events subject of the id it
// claims (anyone could otherwise create event subjects for any id); its
// verdict still names that id and reaches the sender, whether it waits in
// its inbox or on the events.
func TestDecisionUnknownRun(t *testing.T) {
	t.Parallel()
	h, _ := suspendedRun(t, Request{})
	// h.client's inbox is no approver's: it waits on the events.
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: "no-such-run", InterruptID: "int-x", Status: subjects.StatusResolved})
	assert.Equal(t, "no-such-run", v.RunID)
	assertRejected(t, h, v, err, subjects.CodeUnknownRun)
	// A raw client waiting in its own inbox gets the verdict too.
	data, err := json.Marshal(subjects.Decision{Version: subjects.Version, DecisionID: "d-raw", InterruptID: "int-x",
		Status: subjects.StatusResolved})
	require.NoError(t, err)
	v = h.rawVerdict(h.resumeSubject("other-missing-run"), data, "raw-1")
	assert.Equal(t, subjects.CodeUnknownRun, v.Code)
	assert.Equal(t, "other-missing-run", v.RunID)
	// A malformed body for a missing run is filed under the no-run token too.
	v = h.rawVerdict(h.resumeSubject("third-missing-run"), []byte(`{"version":1}`), "raw-2")
	assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
	require.Eventually(t, func() bool {
		return len(h.events(subjects.NoRun, subjects.EventDecisionRejected)) >= 3
	}, 10*time.Second, 20*time.Millisecond)
	for _, run := range []string{"no-such-run", "other-missing-run", "third-missing-run"} {
		evs, err := h.client.Events(h.ctx(), run)
		require.NoError(t, err)
		assert.Empty(t, evs, "no events subject for %s, which does not exist", run)
	}
	for _, ev := range h.events(subjects.NoRun, subjects.EventDecisionRejected) {
		assert.Equal(t, subjects.NoRun, ev.RunID)
		require.NotNil(t, ev.Verdict)
		assert.Contains(t, []string{"no-such-run", "other-missing-run", "third-missing-run"}, ev.Verdict.RunID)
	}
}

// TestDecisionUnknownRunResent: a decision for a missing run sent again
// with the same id (the stream drops the copy) is answered from the no-run
// trail, promptly.
func TestDecisionUnknownRunResent(t *testing.T) {
	t.Parallel()
	h, _ := suspendedRun(t, Request{})
	req := DecisionRequest{RunID: "gone-run", InterruptID: "int-x", Status: subjects.StatusResolved, DecisionID: "d-again", Approver: "ada"}
	v, err := h.client.Decide(h.ctx(), req)
	assertRejected(t, h, v, err, subjects.CodeUnknownRun)
	ctx, cancel := context.WithTimeout(h.ctx(), 5*time.Second)
	defer cancel()
	v, err = h.client.Decide(ctx, req)
	require.ErrorIs(t, err, ErrRejected)
	assert.Equal(t, subjects.CodeUnknownRun, v.Code)
}

// TestDecisionIDReusedWithAnotherBody: the same identity sending its
// decision id again with another body (another answer, another interrupt)
// gets a verdict of its own, decision_id_reused, and changes nothing; the
// same body again is still a duplicate.
func TestDecisionIDReusedWithAnotherBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"two": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, e1 := Interrupt(WithToolCall(ctx, "a"), Request{})
		_, e2 := Interrupt(WithToolCall(ctx, "b"), Request{})
		if e1 != nil {
			return nil, e1
		}
		return nil, e2
	}})
	run := h.start("two", nil)
	rec := h.suspendedAtPass(run, 0)
	first, second := rec.Pending()[0].ID, rec.Pending()[1].ID
	req := DecisionRequest{RunID: run, InterruptID: first, Status: subjects.StatusResolved, Payload: "yes",
		DecisionID: "d-reused", Approver: "ada"}
	v, err := h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	ctx, cancel := context.WithTimeout(h.ctx(), 10*time.Second)
	defer cancel()
	other := req
	other.Payload = "no"
	v, err = h.client.Decide(ctx, other)
	assertRejected(t, h, v, err, subjects.CodeDecisionIDReused)
	// Sent again, the stream drops the copy: the answer is that of the
	// very message it holds, not the accepted decision's.
	v, err = h.client.Decide(ctx, other)
	require.ErrorIs(t, err, ErrRejected)
	assert.Equal(t, subjects.CodeDecisionIDReused, v.Code)

	other = req
	other.InterruptID = second
	v, err = h.client.Decide(ctx, other)
	assertRejected(t, h, v, err, subjects.CodeDecisionIDReused)

	v, err = h.client.Decide(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)

	rec, err = h.client.Run(ctx, run)
	require.NoError(t, err)
	assert.JSONEq(t, `"yes"`, string(rec.Interrupts[0].Decision.Payload), "the first body stands")
	assert.Nil(t, rec.Interrupts[1].Decision, "the other interrupt is not decided")
}

func TestDuplicateDecisionIsNoOp(t *testing.T) {
	t.Parallel()
	h, rec := suspendedRun(t, Request{})
	req := DecisionRequest{RunID: rec.RunID, InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved,
		Payload: "yes", DecisionID: "decision-1"}
	v, err := h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	// Within the dedup window the stream drops the repeat.
	v, err = h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)

	// Past the window (a different message id), the coordinator sees it and
	// answers duplicate, changing nothing.
	data, _ := json.Marshal(subjects.Decision{Version: 1, DecisionID: "decision-1", InterruptID: req.InterruptID,
		Status: subjects.StatusResolved, Payload: json.RawMessage(`"yes"`)})
	v = h.rawVerdict(h.resumeSubject(rec.RunID), data, "another-msg-id")
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)
	assert.Empty(t, v.Code)

	done := h.waitFor(rec.RunID, Finished)
	assert.Equal(t, subjects.RunCompleted, done.Status)
	assert.Len(t, h.events(rec.RunID, subjects.EventDecisionAccepted), 1)
	assert.Len(t, h.replays(rec.RunID), 1, "one replay")
	assert.Len(t, h.waitEvents(rec.RunID, subjects.EventDecisionDuplicate, 1), 1)
}

// Resending a rejected decision (same id) reports the same rejection, not a
// duplicate of something that was never applied.
func TestResentRejectedDecision(t *testing.T) {
	t.Parallel()
	h, rec := suspendedRun(t, Request{Approvers: []string{"alice"}})
	req := DecisionRequest{RunID: rec.RunID, InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved,
		Approver: "bob", DecisionID: "bob-1"}
	_, err := h.client.Decide(h.ctx(), req)
	require.ErrorIs(t, err, ErrRejected)
	v, err := h.client.Decide(h.ctx(), req)
	require.ErrorIs(t, err, ErrRejected)
	assert.Equal(t, subjects.CodeNotAllowed, v.Code)
}

func TestDecideRefusesBadTokens(t *testing.T) {
	t.Parallel()
	h, _ := suspendedRun(t, Request{})
	for _, run := range []string{"a.b", "a*", "a>", "a b", "a\tb", ""} {
		_, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: "i", Status: subjects.StatusResolved})
		assert.ErrorIs(t, err, subjects.ErrInvalidToken, "run %q", run)
	}
	_, err := h.client.Start(h.ctx(), "bad.agent", nil)
	assert.ErrorIs(t, err, subjects.ErrInvalidToken)
}

// Attack: bob resends ada's decision id, through the client (which used to
// get "duplicate" from the stream's dedup) and past the dedup window (which
// the coordinator used to answer "duplicate"). Both are not_allowed,
// recorded as rejected, and ada's decision stands.
func TestReusedDecisionIDOfAnotherIdentity(t *testing.T) {
	t.Parallel()
	h, rec := suspendedRun(t, Request{Approvers: []string{"ada", "bob"}})
	id := rec.Pending()[0].ID
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: rec.RunID, InterruptID: id, Status: subjects.StatusResolved,
		Payload: "ada's", Approver: "ada", DecisionID: "ada-1"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	v, err = h.client.Decide(h.ctx(), DecisionRequest{RunID: rec.RunID, InterruptID: id, Status: subjects.StatusResolved,
		Payload: "bob's", Approver: "bob", DecisionID: "ada-1"})
	assertRejected(t, h, v, err, subjects.CodeNotAllowed)
	assert.Equal(t, "bob", v.Approver)

	subject, err := h.admin.Namespace().ResumeAs(rec.RunID, "bob")
	require.NoError(t, err)
	data, _ := json.Marshal(subjects.Decision{Version: 1, DecisionID: "ada-1", InterruptID: id,
		Status: subjects.StatusResolved, Payload: json.RawMessage(`"bob's"`)})
	v = h.rawVerdict(subject, data, "past-the-window")
	assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
	assert.Equal(t, subjects.CodeNotAllowed, v.Code)

	// Ada's own resend is still a duplicate.
	v, err = h.client.Decide(h.ctx(), DecisionRequest{RunID: rec.RunID, InterruptID: id, Status: subjects.StatusResolved,
		Payload: "ada's", Approver: "ada", DecisionID: "ada-1"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)
	done := h.waitFor(rec.RunID, Finished)
	assert.JSONEq(t, `"ada's"`, string(done.Result))
	assert.Len(t, h.waitEvents(rec.RunID, subjects.EventDecisionRejected, 2), 2, "each reuse is audited")
}

// A rejected attempt never consumes its decision id: the same id sent again
// with a corrected answer is checked afresh and accepted at once, and a
// copy of the accepted attempt is then a duplicate, not the old rejection.
func TestRejectedAttemptDoesNotBurnTheDecisionID(t *testing.T) {
	t.Parallel()
	schema := map[string]any{"type": "object", "required": []any{"amount"},
		"properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	h, rec := suspendedRun(t, Request{Message: "refund?", Approvers: []string{"ada"}, ResponseSchema: schema})
	in := rec.Pending()[0].ID
	req := DecisionRequest{RunID: rec.RunID, InterruptID: in, Status: subjects.StatusResolved, Approver: "ada",
		DecisionID: "retry-1", Payload: map[string]any{"amount": "twelve"}}
	v, err := h.client.Decide(h.ctx(), req)
	assertRejected(t, h, v, err, subjects.CodeSchemaMismatch)
	// The same wrong answer again is checked again, not swallowed.
	v, err = h.client.Decide(h.ctx(), req)
	assertRejected(t, h, v, err, subjects.CodeSchemaMismatch)
	assert.Len(t, h.events(rec.RunID, subjects.EventDecisionRejected), 2, "each attempt is audited")

	req.Payload = map[string]any{"amount": 12.5}
	v, err = h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome, v.Detail)
	assert.Equal(t, "retry-1", v.DecisionID)
	v, err = h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome, "a copy of the accepted attempt")
	done := h.waitFor(rec.RunID, func(r *subjects.Run) bool { return r.Status == subjects.RunCompleted })
	assert.JSONEq(t, `{"amount":12.5}`, string(done.Result))
}
