package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/promreg"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
)

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 5 * time.Second

// backlogCollector exports the work waiting per agent, and the part of it
// no worker consumes, read from the server at each scrape.
type backlogCollector struct {
	client            *jetstream.Client
	waiting, unserved *prometheus.Desc
	mu                sync.Mutex // one scrape at a time
}

func registerBacklog(reg prometheus.Registerer, c *jetstream.Client) error {
	_, err := promreg.Register(reg, &backlogCollector{client: c,
		waiting: prometheus.NewDesc("interlock_work_waiting",
			"Work items (first passes and replays) waiting in the work queue, by agent.", []string{"agent"}, nil),
		unserved: prometheus.NewDesc("interlock_work_unserved",
			"Work items waiting for an agent no worker is consuming (no pull, nothing in flight): its runs are stuck in resuming until one starts.",
			[]string{"agent"}, nil)})
	return err
}

func (b *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.waiting; ch <- b.unserved }

func (b *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	work, err := store.WorkBacklog(ctx, b.client)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(b.waiting, err)
		return
	}
	for _, w := range work {
		unserved := float64(0)
		if !w.Served {
			unserved = float64(w.Waiting)
		}
		ch <- prometheus.MustNewConstMetric(b.waiting, prometheus.GaugeValue, float64(w.Waiting), w.Agent)
		ch <- prometheus.MustNewConstMetric(b.unserved, prometheus.GaugeValue, unserved, w.Agent)
	}
}

// metrics are the coordinator's Prometheus metrics.
type metrics struct {
	runs      *prometheus.CounterVec   // runs entering each status
	decisions *prometheus.CounterVec   // by outcome and code
	outcomes  *prometheus.CounterVec   // pass outcomes by kind
	timers    *prometheus.CounterVec   // timer actions
	votes     *prometheus.CounterVec   // votes accepted on interrupts with a policy, by status
	auto      *prometheus.CounterVec   // decisions operator rules made, by status
	handle    *prometheus.HistogramVec // handler latency by input
	drift     prometheus.Gauge         // fields of streams and buckets drifted from what was provisioned
	// indexBuilds counts builds of the pending index from the records.
	indexBuilds prometheus.Counter
}

// newMetrics returns the metrics, not registered yet (register).
func newMetrics() *metrics {
	m := &metrics{
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
	m.votes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_votes_total",
		Help: "Votes accepted on interrupts with a decision policy, by status (resolved, cancelled, withdrawn), the deciding vote included."},
		[]string{"status"})
	m.auto = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_policy_decisions_total",
		Help: "Decisions an operator rule made (approver interlock:policy), by status."}, []string{"status"})
	m.drift = prometheus.NewGauge(prometheus.GaugeOpts{Name: "interlock_topology_drift",
		Help: "Fields of Interlock's streams and buckets that no longer keep what was provisioned (a limit lowered, republish or sources added, subjects changed; a missing stream counts one); 0 when intact. Alert on > 0."})
	m.indexBuilds = prometheus.NewCounter(prometheus.CounterOpts{Name: "interlock_pending_index_builds_total",
		Help: "Builds of the pending index from the run records: once for a new deployment, and once each time the index (memory-backed by default) was lost with a server restart."})
	return m
}

// register registers m with reg (nil: nowhere); where another coordinator
// of the process registered them first, m uses (and counts into) those.
func (m *metrics) register(reg prometheus.Registerer) error {
	var err error
	for _, v := range []**prometheus.CounterVec{&m.runs, &m.decisions, &m.outcomes, &m.timers, &m.votes, &m.auto} {
		if *v, err = promreg.Register(reg, *v); err != nil {
			return err
		}
	}
	if m.handle, err = promreg.Register(reg, m.handle); err != nil {
		return err
	}
	if m.drift, err = promreg.Register(reg, m.drift); err != nil {
		return err
	}
	m.indexBuilds, err = promreg.Register(reg, m.indexBuilds)
	return err
}

// timed wraps a handler so its latency is observed.
func (m *metrics) timed(input string, start time.Time) {
	m.handle.WithLabelValues(input).Observe(time.Since(start).Seconds())
}

// registerLag exports a consumer's backlog (messages not yet delivered plus
// delivered and not yet acked), read from the server at each scrape.
func registerLag(reg prometheus.Registerer, c *jetstream.Client, stream jetstream.Stream, durable string) error {
	if reg == nil {
		return nil
	}
	_, err := promreg.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "interlock_consumer_pending",
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
	return err
}

// registerPending exports the number of interrupts waiting for a decision,
// read from the store at each scrape without listing them
// (Store.PendingCount: one request, however many are pending).
func registerPending(reg prometheus.Registerer, s store.Store) error {
	if reg == nil {
		return nil
	}
	_, err := promreg.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "interlock_pending_interrupts",
		Help: "Interrupts waiting for a decision (entries removed in the last second may still be counted)."}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := s.PendingCount(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	}))
	return err
}
