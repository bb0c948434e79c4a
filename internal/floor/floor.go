// Package floor is the yardstick of Interlock's benchmarks: the minimal
// hand-written nats.go program doing the same durable steps as one
// Interlock cycle (work item, suspension, record, decision, record update,
// replay work item, completion, record update), with no events, no
// validation and no audit. Interlock's figures are reported as ratios to it,
// measured in the same run.
package floor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/internal/waiter"
)

// Phases are the timings of one cycle.
type Phases struct {
	// Suspend is from publishing the work item to the suspension recorded.
	Suspend time.Duration
	// Replay is from publishing the decision to the completion recorded.
	Replay time.Duration
	Total  time.Duration
}

// Cycle runs floor cycles against one server.
type Cycle struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	ccs   []jetstream.ConsumeContext
	waits waiter.Set
}

// Config is where the floor runs.
type Config struct {
	// URL is the server's, or a cluster's servers' separated by commas.
	URL string
	// Replicas of the floor's streams and bucket; default 1 (3 on a
	// cluster, as Interlock's).
	Replicas int
	// Records is where Interlock's runs bucket keeps the run records (the
	// floor has none): jetstream.Config.RecordsStorage; default file, as
	// `interlock serve` keeps them.
	Records string
}

// New provisions the floor's streams (FLOOR_*) and starts its worker and
// coordinator loops.
func New(ctx context.Context, cfg Config) (*Cycle, error) {
	nc, err := nats.Connect(cfg.URL)
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc)
	c := &Cycle{nc: nc, js: js}
	for name, subj := range map[string]string{"FLOOR_WORK": "floor.work.>", "FLOOR_RUNS": "floor.runs.>",
		"FLOOR_DECISIONS": "floor.resume.>"} {
		sc := jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas}
		if name == "FLOOR_WORK" {
			sc.Retention = jetstream.WorkQueuePolicy
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if c.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "floor_runs", Replicas: cfg.Replicas}); err != nil {
		nc.Close()
		return nil, err
	}
	consume := func(stream string, h func(m jetstream.Msg)) error {
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "c",
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096})
		if err != nil {
			return err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { go h(m) })
		if err != nil {
			return err
		}
		c.ccs = append(c.ccs, cc)
		return nil
	}
	bg := context.Background()
	// The worker: a pass publishes its outcome, then acks.
	err = consume("FLOOR_WORK", func(m jetstream.Msg) {
		run, pass := string(m.Data()[1:]), m.Data()[0]
		kind := "suspended"
		if pass == '1' {
			kind = "completed"
		}
		if _, err := js.Publish(bg, "floor.runs."+kind+"."+run, []byte(run), jetstream.WithMsgID(run+string(pass))); err != nil {
			retry(m, err)
			return
		}
		_ = m.Ack()
	})
	if err == nil {
		// The coordinator: record outcomes and decisions, queue the replay.
		err = consume("FLOOR_RUNS", func(m jetstream.Msg) {
			run := string(m.Data())
			var err error
			if m.Subject() == "floor.runs.suspended."+run {
				_, err = c.kv.Put(bg, run, []byte(`{"status":"suspended"}`))
			} else {
				err = c.update(bg, run, `{"status":"completed"}`)
			}
			if err != nil {
				retry(m, err)
				return
			}
			_ = m.Ack()
			c.waits.Signal(m.Subject())
		})
	}
	if err == nil {
		err = consume("FLOOR_DECISIONS", func(m jetstream.Msg) {
			run := string(m.Data())
			err := c.update(bg, run, `{"status":"resuming"}`)
			if err == nil {
				_, err = js.Publish(bg, "floor.work.bench", []byte("1"+run), jetstream.WithMsgID(run+"w1"))
			}
			if err != nil {
				retry(m, err)
				return
			}
			_ = m.Ack()
		})
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// retry hands m back to come again a moment later after err (a timeout on
// a loaded cluster, say), or drops it when its record is missing, which
// no retry mends.
func retry(m jetstream.Msg, err error) {
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		_ = m.Term()
		return
	}
	_ = m.NakWithDelay(100 * time.Millisecond)
}

// update reads run's record and writes value over it with
// compare-and-set.
func (c *Cycle) update(ctx context.Context, run, value string) error {
	e, err := c.kv.Get(ctx, run)
	if err != nil {
		return err
	}
	_, err = c.kv.Update(ctx, run, []byte(value), e.Revision())
	return err
}

// Run does one cycle of run id.
func (c *Cycle) Run(ctx context.Context, id string) (Phases, error) {
	var p Phases
	start := time.Now()
	suspended, completed := c.waits.Wait("floor.runs.suspended."+id), c.waits.Wait("floor.runs.completed."+id)
	if _, err := c.js.Publish(ctx, "floor.work.bench", []byte("0"+id), jetstream.WithMsgID(id+"w0")); err != nil {
		return p, err
	}
	if err := waiter.Await(ctx, suspended); err != nil {
		return p, fmt.Errorf("suspend: %w", err)
	}
	p.Suspend = time.Since(start)
	decided := time.Now()
	if _, err := c.js.Publish(ctx, "floor.resume."+id, []byte(id), jetstream.WithMsgID(id+"d")); err != nil {
		return p, err
	}
	if err := waiter.Await(ctx, completed); err != nil {
		return p, fmt.Errorf("replay: %w", err)
	}
	p.Replay, p.Total = time.Since(decided), time.Since(start)
	return p, nil
}

// Park suspends run id (work item, suspension, record) and returns once
// the record is written.
func (c *Cycle) Park(ctx context.Context, id string) error {
	suspended := c.waits.Wait("floor.runs.suspended." + id)
	if _, err := c.js.Publish(ctx, "floor.work.bench", []byte("0"+id), jetstream.WithMsgID(id+"w0")); err != nil {
		return err
	}
	return waiter.Await(ctx, suspended)
}

// Bytes is what the floor's streams and bucket store.
func (c *Cycle) Bytes(ctx context.Context) (uint64, error) {
	var total uint64
	for _, name := range []string{"FLOOR_WORK", "FLOOR_RUNS", "FLOOR_DECISIONS", "KV_floor_runs"} {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		total += info.State.Bytes
	}
	return total, nil
}

// Close stops the loops and the connection.
func (c *Cycle) Close() {
	for _, cc := range c.ccs {
		cc.Stop()
	}
	c.nc.Close()
}
