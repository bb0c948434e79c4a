package processor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestWireMessagesMatchSchemas drives real runs (a completion, a failure, a
// rejection, a duplicate, a malformed input) and checks every message the
// system stored against docs/schema.
func TestWireMessagesMatchSchemas(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newHarness(t, map[string]AgentFunc{
		"refunds": approvalAgent(&calls),
		"broken":  func(context.Context, json.RawMessage) (any, error) { return nil, assert.AnError },
	})
	run := h.start("refunds", map[string]int{"order": 7}, WithThreadID("t-1"))
	rec := h.suspendedAtPass(run, 0)
	id := rec.Pending()[0].ID
	_, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved,
		Payload: map[string]any{"amount": "bad"}})
	require.ErrorIs(t, err, ErrRejected)
	req := DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved, DecisionID: "d-1",
		Payload: map[string]any{"amount": 3}, Approver: "alice", Comment: "ok", Metadata: map[string]any{"via": "test"}}
	v, err := h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	v, err = h.client.Decide(h.ctx(), req)
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeDuplicate, v.Outcome)
	rec = h.waitFor(run, Finished)
	broken := h.start("broken", nil)
	h.waitFor(broken, Finished)
	_, err = h.admin.Publish(h.ctx(), h.resumeSubject(run), []byte(`{"version":1}`), "", nil)
	require.NoError(t, err)
	h.waitEvents(run, subjects.EventDecisionRejected, 2)
	h.waitEvents(run, subjects.EventCompleted, 1) // events are written after the record
	h.waitEvents(broken, subjects.EventFailed, 1)

	ns := h.admin.Namespace()
	check := func(stream jetstream.Stream, filter string, schemaOf func(subject string) string) int {
		msgs, err := h.admin.Messages(h.ctx(), stream, filter, 0, 1000)
		require.NoError(t, err)
		n := 0
		for _, m := range msgs {
			name := schemaOf(m.Subject)
			if name == "" {
				continue
			}
			assert.NoError(t, wireschema.Validate(name, m.Data))
			n++
		}
		return n
	}
	kindSchema := map[subjects.Kind]string{subjects.KindSuspended: "suspension", subjects.KindCompleted: "completion",
		subjects.KindFailed: "failure", subjects.KindEvents: "event"}
	byKind := func(subject string) string {
		a, err := ns.Parse(subject)
		require.NoError(t, err)
		return kindSchema[a.Kind]
	}
	runsChecked := 0
	for _, k := range []subjects.Kind{subjects.KindSuspended, subjects.KindCompleted, subjects.KindFailed} {
		runsChecked += check(jetstream.StreamRuns, ns.All(k), byKind)
	}
	assert.Equal(t, 3, runsChecked, "a suspension, a completion, a failure")
	assert.GreaterOrEqual(t, check(jetstream.StreamEvents, ns.All(subjects.KindEvents), byKind), 6)
	// Decisions that were accepted or sent by the SDK match; the malformed
	// one is what the schema is for refusing.
	decisions, err := h.admin.Messages(h.ctx(), jetstream.StreamDecisions, ns.All(subjects.KindResume), 0, 100)
	require.NoError(t, err)
	require.Len(t, decisions, 3, "the rejected, the accepted and the malformed; the duplicate was dropped")
	for _, m := range decisions[:2] {
		assert.NoError(t, wireschema.Validate("decision", m.Data))
	}
	assert.Error(t, wireschema.Validate("decision", decisions[2].Data), "the schema refuses what the coordinator refuses")

	for _, r := range []string{run} {
		b, err := h.admin.OpenBucket(h.ctx(), jetstream.RunsBucket)
		require.NoError(t, err)
		value, err := b.Get(h.ctx(), r)
		require.NoError(t, err)
		assert.NoError(t, wireschema.Validate("run", value))
	}
	// Work items are consumed from the work queue; check the ones the code
	// builds by publishing a replay to a stream no worker reads.
	w := subjects.Work{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds", Pass: 1, Input: json.RawMessage(`{}`)},
		Decisions: []subjects.Decision{*rec.Interrupts[0].Decision}, Journal: rec.Journal}
	data, _ := json.Marshal(w)
	assert.NoError(t, wireschema.Validate("work", data))

	// A verdict as sent to Interlock-Reply-To.
	v, err = h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusCancelled})
	require.ErrorIs(t, err, ErrRejected)
	data, _ = json.Marshal(v)
	assert.NoError(t, wireschema.Validate("verdict", data))
}
