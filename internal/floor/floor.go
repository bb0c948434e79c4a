// Package floor is the yardstick of Interlock's benchmarks: the minimal
// hand-written nats.go program doing the same durable steps as one
// Interlock cycle (work item, suspension, record, decision, record update,
// replay work item, completion, record update), with no events, no
// validation and no audit. Interlock's figures are reported as ratios to it,
// measured in the same run.
package floor

import (
	"context"
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

// New provisions the floor's streams (FLOOR_*) and starts its worker and
// coordinator loops.
func New(ctx context.Context, url string) (*Cycle, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc)
	c := &Cycle{nc: nc, js: js}
	for name, subj := range map[string]string{"FLOOR_WORK": "floor.work.>", "FLOOR_RUNS": "floor.runs.>",
		"FLOOR_DECISIONS": "floor.resume.>"} {
		cfg := jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage}
		if name == "FLOOR_WORK" {
			cfg.Retention = jetstream.WorkQueuePolicy
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if c.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "floor_runs"}); err != nil {
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
		_, _ = js.Publish(bg, "floor.runs."+kind+"."+run, []byte(run), jetstream.WithMsgID(run+string(pass)))
		_ = m.Ack()
	})
	if err == nil {
		// The coordinator: record outcomes and decisions, queue the replay.
		err = consume("FLOOR_RUNS", func(m jetstream.Msg) {
			run := string(m.Data())
			if m.Subject() == "floor.runs.suspended."+run {
				_, _ = c.kv.Put(bg, run, []byte(`{"status":"suspended"}`))
			} else {
				e, _ := c.kv.Get(bg, run)
				_, _ = c.kv.Update(bg, run, []byte(`{"status":"completed"}`), e.Revision())
			}
			_ = m.Ack()
			c.waits.Signal(m.Subject())
		})
	}
	if err == nil {
		err = consume("FLOOR_DECISIONS", func(m jetstream.Msg) {
			run := string(m.Data())
			e, _ := c.kv.Get(bg, run)
			_, _ = c.kv.Update(bg, run, []byte(`{"status":"resuming"}`), e.Revision())
			_, _ = js.Publish(bg, "floor.work.bench", []byte("1"+run), jetstream.WithMsgID(run+"w1"))
			_ = m.Ack()
		})
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
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
