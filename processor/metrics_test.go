package processor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newBareHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	reg := prometheus.NewRegistry()
	co := coordinator.New(h.conn(), coordinator.Config{Logger: quiet, Registry: reg})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	w := NewWorker(h.conn(), WorkerConfig{Logger: quiet, Registry: reg})
	require.NoError(t, w.Register("refunds", h.agents["refunds"]))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { stopWorker(t, w) })

	run := h.start("refunds", nil)
	id := h.suspendedAtPass(run, 0).Pending()[0].ID
	_, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved,
		Payload: map[string]any{}})
	require.ErrorIs(t, err, ErrRejected)
	h.decide(run, id, subjects.StatusResolved, map[string]any{"amount": 1})
	h.waitFor(run, Finished)

	assert.Equal(t, 1.0, counterValue(t, reg, "interlock_decisions_total", "outcome", "accepted", "code", ""))
	assert.Equal(t, 1.0, counterValue(t, reg, "interlock_decisions_total", "outcome", "rejected", "code", "schema_mismatch"))
	assert.Equal(t, 1.0, counterValue(t, reg, "interlock_pass_outcomes_total", "kind", "suspended"))
	assert.Equal(t, 1.0, counterValue(t, reg, "interlock_pass_outcomes_total", "kind", "completed"))
	for _, st := range []string{"suspended", "resuming", "completed"} {
		assert.Equal(t, 1.0, counterValue(t, reg, "interlock_runs_total", "status", st), st)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(w.metrics.passes.WithLabelValues("refunds", "suspended")))
	assert.Equal(t, 1.0, testutil.ToFloat64(w.metrics.passes.WithLabelValues("refunds", "completed")))
	n, err := testutil.GatherAndCount(reg, "interlock_pass_seconds", "interlock_coordinator_handle_seconds")
	require.NoError(t, err)
	assert.Positive(t, n)
	lag, err := testutil.GatherAndCount(reg, "interlock_consumer_pending")
	require.NoError(t, err)
	assert.Equal(t, 4, lag, "one backlog gauge per coordinator input (runs, decisions, timers, observations)")
	pending, err := testutil.GatherAndCount(reg, "interlock_pending_interrupts")
	require.NoError(t, err)
	assert.Equal(t, 1, pending)
	// A removed entry's marker is counted until it expires, within a second.
	assert.Eventually(t, func() bool { return gaugeValue(t, reg, "interlock_pending_interrupts") == 0 },
		10*time.Second, 20*time.Millisecond, "nothing waits once decided")
	run2 := h.start("refunds", nil)
	h.suspendedAtPass(run2, 0)
	assert.Equal(t, 1.0, gaugeValue(t, reg, "interlock_pending_interrupts"))
}

// gaugeValue is the value of the gauge or counter name (its first series)
// in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// counterValue is the value of the counter name with the given label pairs.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s %v", name, labels)
	return 0
}
