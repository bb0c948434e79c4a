package processor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 5 * time.Second

// workerDurable is the durable consumer through which workers take agent's
// work.
func workerDurable(agent string) string { return "worker_" + agent }

// AgentWork is the work waiting for one agent: first passes and replays no
// worker has finished yet.
type AgentWork struct {
	Agent string `json:"agent"`
	// Waiting counts work items in the work queue for the agent.
	Waiting uint64 `json:"waiting"`
	// Served says whether a worker is consuming the agent's work now: it
	// is pulling, or holds items it has not acked. Work waiting unserved
	// is stuck until a worker for the agent starts; its runs stay in
	// resuming.
	Served bool `json:"served"`
}

// WorkBacklog lists, by agent name, the agents with work waiting.
func (cl *Client) WorkBacklog(ctx context.Context) ([]AgentWork, error) {
	// First passes wait on <prefix>.start.<agent>, replays on
	// <prefix>.work.<agent>: both are the agent's work.
	counts := map[string]uint64{}
	for _, kind := range []string{subjects.KindStart, subjects.KindWork} {
		bySubject, err := cl.c.SubjectCounts(ctx, jetstream.StreamWork, cl.c.Namespace().All(kind))
		if err != nil {
			return nil, err
		}
		for subject, n := range bySubject {
			counts[subject[strings.LastIndexByte(subject, '.')+1:]] += n
		}
	}
	var out []AgentWork
	for agent, n := range counts {
		if n == 0 {
			continue
		}
		st, err := cl.c.ConsumerState(ctx, jetstream.StreamWork, workerDurable(agent))
		if err != nil && !errors.Is(err, jetstream.ErrNotFound) {
			return nil, err
		}
		out = append(out, AgentWork{Agent: agent, Waiting: n, Served: err == nil && (st.Waiting > 0 || st.AckPending > 0)})
	}
	slices.SortFunc(out, func(a, b AgentWork) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}

// backlogCollector exports the work waiting per agent, and the part of it
// no worker consumes, read from the server at each scrape.
type backlogCollector struct {
	client            *Client
	waiting, unserved *prometheus.Desc
	mu                sync.Mutex // one scrape at a time
}

func registerBacklog(reg prometheus.Registerer, c *jetstream.Client) {
	if reg == nil {
		return
	}
	_ = reg.Register(&backlogCollector{client: NewClient(c),
		waiting: prometheus.NewDesc("interlock_work_waiting",
			"Work items (first passes and replays) waiting in the work queue, by agent.", []string{"agent"}, nil),
		unserved: prometheus.NewDesc("interlock_work_unserved",
			"Work items waiting for an agent no worker is consuming (no pull, nothing in flight): its runs are stuck in resuming until one starts.",
			[]string{"agent"}, nil)})
}

func (b *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.waiting; ch <- b.unserved }

func (b *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	work, err := b.client.WorkBacklog(ctx)
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
