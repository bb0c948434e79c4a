package processor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// One W3C trace from the run's start through its suspension, decision,
// replay and completion.
func TestTraceContextFlows(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	tp := trace.New()
	run := h.start("refunds", nil, WithTraceParent(tp))
	rec := h.suspendedAtPass(run, 0)
	assert.Equal(t, trace.TraceID(tp), trace.TraceID(rec.TraceParent), "the record keeps the trace")
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 1})
	h.waitFor(run, Finished)
	ns := h.admin.Namespace()
	for _, kind := range []subjects.Kind{subjects.KindSuspended, subjects.KindCompleted} {
		subject, _ := ns.Suspended("refunds", run)
		if kind == subjects.KindCompleted {
			subject, _ = ns.Completed("refunds", run)
		}
		msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamRuns, subject, 0, 10)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		got := msgs[0].Header.Get(trace.Header)
		assert.Equal(t, trace.TraceID(tp), trace.TraceID(got), "%s carries the trace", kind)
		assert.NotEqual(t, tp, got, "each hop is its own span")
	}
	filter, _ := ns.RunEvents(run)
	evs, err := h.admin.Messages(h.ctx(), jetstream.StreamEvents, filter, 0, 50)
	require.NoError(t, err)
	traced := 0
	for _, m := range evs {
		if trace.TraceID(m.Header.Get(trace.Header)) == trace.TraceID(tp) {
			traced++
		}
	}
	assert.GreaterOrEqual(t, traced, 2, "the suspended and completed events carry it")
}
