package processor

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/jetstream"
)

// coordinatorMetrics are the coordinator's Prometheus metrics.
type coordinatorMetrics struct {
	runs      *prometheus.CounterVec   // runs entering each status
	decisions *prometheus.CounterVec   // by outcome and code
	outcomes  *prometheus.CounterVec   // pass outcomes by kind
	timers    *prometheus.CounterVec   // timer actions
	handle    *prometheus.HistogramVec // handler latency by input
}

func newCoordinatorMetrics(reg prometheus.Registerer) *coordinatorMetrics {
	m := &coordinatorMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_runs_total",
			Help: "Runs entering each status (suspended, resuming, completed, failed); how many wait right now is interlock_pending_interrupts."},
			[]string{"status"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_decisions_total",
			Help: "Decisions by outcome (accepted, rejected, duplicate) and rejection code."}, []string{"outcome", "code"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_pass_outcomes_total",
			Help: "Pass outcomes recorded, by kind (suspended, completed, failed)."}, []string{"kind"}),
		timers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_timers_total",
			Help: "Timers handled, by action (reminded, escalated, expired, none)."}, []string{"action"}),
		handle: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "interlock_coordinator_handle_seconds",
			Help: "Time to handle one input, by input (outcome, decision, timer).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)},
			[]string{"input"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.runs, m.decisions, m.outcomes, m.timers, m.handle} {
			_ = reg.Register(c)
		}
	}
	return m
}

// timed wraps a handler so its latency is observed.
func (m *coordinatorMetrics) timed(input string, start time.Time) {
	m.handle.WithLabelValues(input).Observe(time.Since(start).Seconds())
}

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

// registerLag exports a consumer's backlog (messages not yet delivered plus
// delivered and not yet acked), read from the server at each scrape.
func registerLag(reg prometheus.Registerer, c *jetstream.Client, stream jetstream.Stream, durable string) {
	if reg == nil {
		return
	}
	_ = reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "interlock_consumer_pending",
		Help:        "Messages a consumer has yet to handle: not yet delivered plus not yet acked.",
		ConstLabels: prometheus.Labels{"consumer": durable}}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := c.ConsumerState(ctx, stream, durable)
		if err != nil {
			return -1
		}
		return float64(st.Pending + st.AckPending)
	}))
}

// registerPending exports the number of interrupts waiting for a decision,
// counted in the pending index at each scrape.
func registerPending(reg prometheus.Registerer, c *jetstream.Client) {
	if reg == nil {
		return
	}
	_ = reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "interlock_pending_interrupts",
		Help: "Interrupts waiting for a decision."}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := c.OpenBucket(ctx, jetstream.PendingBucket)
		if err != nil {
			return -1
		}
		n, err := b.Len(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	}))
}
