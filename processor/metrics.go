package processor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// workerMetrics are the worker's Prometheus metrics.
type workerMetrics struct {
	passes   *prometheus.CounterVec   // by agent and outcome
	duration *prometheus.HistogramVec // pass duration by agent
}

func newWorkerMetrics(reg prometheus.Registerer) *workerMetrics {
	m := &workerMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_passes_total",
			Help: "Passes run, by agent and outcome (suspended, completed, failed, retried)."}, []string{"agent", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "interlock_pass_seconds",
			Help: "Time a pass took, by agent.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"agent"}),
	}
	if reg != nil {
		_ = reg.Register(m.passes)
		_ = reg.Register(m.duration)
	}
	return m
}
