package processor

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// schemaHarness runs a coordinator logging to log, with budget, and a
// worker whose agent "ask" asks with the schema in its input.
func schemaHarness(t *testing.T, budget time.Duration) (*harness, *syncbuf.Buffer) {
	log := &syncbuf.Buffer{}
	h := newBareHarness(t, map[string]AgentFunc{"ask": func(ctx context.Context, input json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, Request{Reason: subjects.ReasonInputRequired, ResponseSchema: input})
		if err != nil {
			return nil, err
		}
		return len(d.Payload), nil
	}})
	co := coordinator.New(h.conn(), coordinator.Config{AckWait: testAckWait, SchemaBudget: budget,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	h.co = co
	h.startWorker(nil)
	return h, log
}

// Attack (found 6): a suspension, published by hand, whose responseSchema
// $refs a file on the coordinator's disk. It is refused (schema_unsafe)
// before anything is read; the run fails with the reason.
func TestAttackSchemaReadsCoordinatorDisk(t *testing.T) {
	t.Parallel()
	h, _ := schemaHarness(t, 0)
	secret := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"const":"top-secret-content"}`), 0o600))
	run := "run-file-ref"
	subject, err := h.admin.Namespace().Suspended("py", run)
	require.NoError(t, err)
	body := `{"version":1,"runId":"run-file-ref","agent":"py","pass":0,
		"interrupts":[{"id":"ask-1","reason":"confirmation","responseSchema":{"$ref":"file://` + secret + `"}}]}`
	_, err = h.admin.Publish(h.ctx(), subject, []byte(body), run+":0", nil)
	require.NoError(t, err)
	ev := h.waitEvents(run, subjects.EventInputRejected, 1)[0]
	assert.Equal(t, subjects.CodeSchemaUnsafe, ev.Code, ev.Detail)
	assert.NotContains(t, ev.Detail, "top-secret-content")
	// The run fails with the reason rather than wait on a question nobody
	// may be asked (before, no record was written and a client waiting on
	// the run waited for good).
	rec, err := h.client.Wait(h.ctx(), run, Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "schema")
	assert.NotContains(t, rec.Error, "top-secret-content")
}

// Attack (found 8): a mistyped PIN is echoed in the rejection: the
// verdict, the decision_rejected event and the coordinator's log.
func TestAttackRejectionEchoesTheAnswer(t *testing.T) {
	t.Parallel()
	h, log := schemaHarness(t, 0)
	run := h.start("ask", map[string]any{"type": "string", "pattern": "^[0-9]{4}$"})
	rec := h.suspendedAtPass(run, 0)
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusResolved, Payload: "98a7-mistyped"})
	require.ErrorIs(t, err, ErrRejected)
	assert.Equal(t, subjects.CodeSchemaMismatch, v.Code)
	assert.Contains(t, v.Detail, `"pattern"`, "the rule is named")
	assert.NotContains(t, v.Detail, "98a7")
	for _, ev := range h.waitEvents(run, subjects.EventDecisionRejected, 1) {
		data, _ := json.Marshal(ev)
		assert.NotContains(t, string(data), "98a7")
	}
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "decision rejected") }, 10*time.Second, 10*time.Millisecond)
	assert.NotContains(t, log.String(), "98a7")
}

// Attack (found 6): an answer that is slow to check (uniqueItems is
// quadratic in the array's length) used to hold the decision consumer for
// as long as it took. It is refused at the budget (schema_budget), and a
// decision for another run right behind it is accepted. The budget is a
// microsecond, so the refusal does not depend on how fast this machine
// checks 4,000 items (a 2 ms budget was met without -race); the array is
// kept to 4,000 items so the abandoned check ends soon after the test.
// That the consumer does not wait for the check is proven by order, not by
// the clock, in processor/schema TestValidationDoesNotWaitForTheCheck (its
// check blocks until the test ends it).
func TestAttackSlowAnswerStallsDecisions(t *testing.T) {
	t.Parallel()
	h, _ := schemaHarness(t, time.Microsecond)
	slow := h.start("ask", map[string]any{"type": "array", "uniqueItems": true})
	other := h.start("ask", nil) // no schema
	slowRec, otherRec := h.suspendedAtPass(slow, 0), h.suspendedAtPass(other, 0)
	items := make([]int, 0, 4000)
	for i := 0; len(items) < cap(items); i++ {
		items = append(items, i)
	}
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: slow, InterruptID: slowRec.Pending()[0].ID,
		Status: subjects.StatusResolved, Payload: items})
	require.ErrorIs(t, err, ErrRejected)
	assert.Equal(t, subjects.CodeSchemaBudget, v.Code, v.Detail)
	start := time.Now()
	v, err = h.client.Decide(h.ctx(), DecisionRequest{RunID: other, InterruptID: otherRec.Pending()[0].ID,
		Status: subjects.StatusResolved, Payload: "fine"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	t.Logf("the next decision took %v", time.Since(start))
	rec, err := h.client.Run(h.ctx(), slow)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status, "nothing changed")
}

// The Go SDK refuses an unsafe responseSchema in Interrupt, before anything
// is published: the body gets ErrInvalidRequest, the run fails.
func TestInterruptRefusesUnsafeSchema(t *testing.T) {
	t.Parallel()
	got := make(chan error, 1)
	h := newHarness(t, map[string]AgentFunc{"ask": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := Interrupt(ctx, Request{ResponseSchema: map[string]any{"$ref": "https://example.com/s.json"}})
		select {
		case got <- err:
		default:
		}
		return nil, err
	}})
	h.start("ask", nil)
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrInvalidRequest)
		assert.ErrorIs(t, err, schema.ErrUnsafe)
	case <-time.After(15 * time.Second):
		t.Fatal("the body never ran")
	}
}
