package processor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// Emitted events are kept in the AGUI stream once each: a retried pass does
// not store its events again, and a replay skips exactly the events the run
// already holds, including one emitted after a decided interrupt.
func TestEmitStoresEachEventOnce(t *testing.T) {
	t.Parallel()
	var calls counter
	emit := func(ctx context.Context, name string) {
		require.NoError(t, Emit(ctx, map[string]any{"type": "CUSTOM", "name": name}))
	}
	h := newHarness(t, map[string]AgentFunc{"chatty": func(ctx context.Context, _ json.RawMessage) (any, error) {
		calls.inc("body")
		emit(ctx, "a")
		emit(ctx, "b")
		if calls.get("body") < 3 {
			return nil, Retryable(errors.New("model API busy"))
		}
		if _, err := Interrupt(WithToolCall(ctx, "t1"), Request{Message: "first?"}); err != nil {
			return nil, err
		}
		emit(ctx, "after first")
		if _, err := Interrupt(WithToolCall(ctx, "t2"), Request{Message: "second?"}); err != nil {
			return nil, err
		}
		emit(ctx, "after second")
		return "done", nil
	}})
	run := h.start("chatty", nil)
	for pass := range 2 {
		rec := h.suspendedAtPass(run, pass)
		h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, nil)
	}
	rec := h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)

	subject, err := h.admin.Namespace().AGUI("chatty", run)
	require.NoError(t, err)
	msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamAGUI, subject, 0, 100)
	require.NoError(t, err)
	var names []string
	for _, m := range msgs {
		var ev struct{ Name string }
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		names = append(names, ev.Name)
	}
	assert.Equal(t, []string{"a", "b", "after first", "after second"}, names)
	assert.Equal(t, 5, calls.get("body"), "three attempts of pass 0, then two replays")
}

func TestEmitOutsideRun(t *testing.T) {
	t.Parallel()
	assert.ErrorIs(t, Emit(context.Background(), map[string]any{"type": "CUSTOM"}), ErrNotInRun)
}
