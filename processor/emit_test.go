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

// TestEmitBetweenDecidedInterrupts: a body that announces each tool, gates
// it and, once decided, reports it, going on past an undecided gate. The
// replay stores each result between the announcements the first pass
// stored, and stores neither twice; a retried attempt of the replay stores
// nothing again (issue 27, item 5.5).
func TestEmitBetweenDecidedInterrupts(t *testing.T) {
	t.Parallel()
	var calls counter
	emit := func(ctx context.Context, name string) {
		require.NoError(t, Emit(ctx, map[string]any{"type": "CUSTOM", "name": name}))
	}
	h := newHarness(t, map[string]AgentFunc{"fan": func(ctx context.Context, _ json.RawMessage) (any, error) {
		calls.inc("body")
		var suspended error
		for _, tool := range []string{"a", "b"} {
			emit(ctx, "call "+tool)
			if _, err := Interrupt(WithToolCall(ctx, tool), Request{Message: tool + "?"}); err != nil {
				suspended = err
				continue
			}
			emit(ctx, "result "+tool)
		}
		// The replay fails once after emitting, and is retried (a pass
		// that raised interrupts suspends whatever it returns).
		if calls.get("body") == 2 {
			return nil, Retryable(errors.New("model API busy"))
		}
		if suspended != nil {
			return nil, suspended
		}
		emit(ctx, "done")
		return "done", nil
	}})
	run := h.start("fan", nil)
	rec := h.suspendedAtPass(run, 0)
	require.Len(t, rec.Pending(), 2)
	for _, in := range rec.Pending() {
		h.decide(run, in.ID, subjects.StatusResolved, nil)
	}
	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)

	subject, err := h.admin.Namespace().AGUI("fan", run)
	require.NoError(t, err)
	msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamAGUI, subject, 0, 100)
	require.NoError(t, err)
	var names []string
	for _, m := range msgs {
		var ev struct{ Name string }
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		names = append(names, ev.Name)
	}
	assert.Equal(t, []string{"call a", "call b", "result a", "result b", "done"}, names)
	assert.Equal(t, 3, calls.get("body"), "the first pass, then two attempts of the replay")
}
