package processor

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A registry that refuses the worker's metrics (the name taken by another
// metric) fails its start instead of leaving them unexported; two workers
// of one process share them.
func TestWorkerMetricsRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "interlock_passes_total", Help: "other"})))
	assert.Error(t, NewWorker(nil, WorkerConfig{Logger: quiet, Registry: reg}).Start(context.Background()))

	shared := prometheus.NewRegistry()
	a, b := NewWorker(nil, WorkerConfig{Logger: quiet, Registry: shared}), NewWorker(nil, WorkerConfig{Logger: quiet, Registry: shared})
	require.NoError(t, a.Start(context.Background()))
	require.NoError(t, b.Start(context.Background()))
	a.metrics.passes.WithLabelValues("x", "completed").Inc()
	b.metrics.passes.WithLabelValues("x", "completed").Inc()
	assert.Equal(t, 2.0, counterValue(t, shared, "interlock_passes_total", "agent", "x", "outcome", "completed"))
}
