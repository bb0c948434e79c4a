package processor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/promreg"
)

// workerMetrics are the worker's Prometheus metrics.
type workerMetrics struct {
	passes   *prometheus.CounterVec   // by agent and outcome
	duration *prometheus.HistogramVec // pass duration by agent
}

// newWorkerMetrics returns the metrics, not registered yet (register).
func newWorkerMetrics() *workerMetrics {
	m := &workerMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_passes_total",
			Help: "Passes run, by agent and outcome (suspended, completed, failed, retried)."}, []string{"agent", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "interlock_pass_seconds",
			Help: "Time a pass took, by agent.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"agent"}),
	}
	return m
}

// register registers m with reg (nil: nowhere); where another worker of
// the process registered them first, m uses (and counts into) those.
func (m *workerMetrics) register(reg prometheus.Registerer) error {
	var err error
	if m.passes, err = promreg.Register(reg, m.passes); err != nil {
		return err
	}
	m.duration, err = promreg.Register(reg, m.duration)
	return err
}
