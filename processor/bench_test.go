package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// BenchmarkCycle measures one full suspend-decide-replay-complete cycle, one
// run in flight, through Interlock and through the floor: the same durable
// steps written directly with nats.go (work item, suspension, record, decision,
// record update, replay work item, completion, record update), without
// events or validation. Both run interleaved on one embedded server, in each
// durability mode, and the ratio is reported.
//
//	go test -run '^$' -bench BenchmarkCycle -benchtime 300x ./processor
func BenchmarkCycle(b *testing.B) {
	for _, sync := range []embedded.Sync{embedded.SyncAlways, embedded.SyncInterval} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			dir := b.TempDir()
			srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			il := newInterlockCycle(b, srv.URL())
			defer il.close()
			fl := newFloorCycle(b, srv.URL())
			defer fl.close()
			var hIL, hFloor histogram.Histogram
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				hIL.Record(il.cycle(b, i))
				hFloor.Record(fl.cycle(b, i))
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			b.ReportMetric(ms(hIL.Quantile(0.5)), "interlock-p50-ms")
			b.ReportMetric(ms(hIL.Quantile(0.99)), "interlock-p99-ms")
			b.ReportMetric(ms(hFloor.Quantile(0.5)), "floor-p50-ms")
			b.ReportMetric(ms(hFloor.Quantile(0.99)), "floor-p99-ms")
			b.ReportMetric(float64(hIL.Quantile(0.5))/float64(hFloor.Quantile(0.5)), "ratio-p50")
			b.ReportMetric(float64(hIL.Quantile(0.99))/float64(hFloor.Quantile(0.99)), "ratio-p99")
		})
	}
}

type interlockCycle struct {
	nc        *jetstream.Client
	co        *processor.Coordinator
	w         *processor.Worker
	client    *processor.Client
	suspended chan string
	completed chan string
	subs      []*jetstream.Subscription
}

func newInterlockCycle(b *testing.B, url string) *interlockCycle {
	ctx := context.Background()
	nc, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	c := &interlockCycle{nc: nc, client: processor.NewClient(nc),
		suspended: make(chan string, 16), completed: make(chan string, 16)}
	c.co = processor.NewCoordinator(nc, processor.CoordinatorConfig{Logger: quietLogger()})
	c.w = processor.NewWorker(nc, processor.WorkerConfig{Logger: quietLogger()})
	_ = c.w.Register("bench", func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(processor.WithToolCall(ctx, "call"), processor.Request{Message: "ok?"})
		if err != nil {
			return nil, err
		}
		return d.Payload, nil
	})
	for _, t := range []struct {
		ev subjects.EventType
		ch chan string
	}{{subjects.EventSuspended, c.suspended}, {subjects.EventCompleted, c.completed}} {
		ch := t.ch
		sub, err := nc.Subscribe("bench.events.*."+string(t.ev), func(_ string, data []byte) {
			var ev subjects.Event
			_ = json.Unmarshal(data, &ev)
			ch <- ev.RunID
		})
		if err != nil {
			b.Fatal(err)
		}
		c.subs = append(c.subs, sub)
	}
	if err := c.co.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	return c
}

func waitFor(b *testing.B, ch chan string, run string) {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == run {
				return
			}
		case <-timeout:
			b.Fatalf("run %s: no event", run)
		}
	}
}

func (c *interlockCycle) cycle(b *testing.B, i int) time.Duration {
	ctx := context.Background()
	run := fmt.Sprintf("il-%d", i)
	start := time.Now()
	if _, err := c.client.Start(ctx, "bench", nil, processor.WithRunID(run)); err != nil {
		b.Fatal(err)
	}
	waitFor(b, c.suspended, run)
	if _, err := c.client.Decide(ctx, processor.DecisionRequest{RunID: run,
		InterruptID: processor.InterruptID(run, "call", 0), Status: subjects.StatusResolved, Payload: true}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, c.completed, run)
	return time.Since(start)
}

func (c *interlockCycle) close() {
	for _, s := range c.subs {
		s.Unsubscribe()
	}
	c.w.Stop()
	c.co.Stop()
	c.nc.Close()
}

// floorCycle is the minimal hand-written nats.go program doing the same
// durable work as one Interlock cycle.
type floorCycle struct {
	nc        *nats.Conn
	js        natsjs.JetStream
	kv        natsjs.KeyValue
	ccs       []natsjs.ConsumeContext
	suspended chan string
	completed chan string
	verdicts  chan string
}

func newFloorCycle(b *testing.B, url string) *floorCycle {
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	js, _ := natsjs.New(nc)
	f := &floorCycle{nc: nc, js: js, suspended: make(chan string, 16), completed: make(chan string, 16),
		verdicts: make(chan string, 16)}
	for name, subj := range map[string]string{"FLOOR_WORK": "floor.work.>", "FLOOR_RUNS": "floor.runs.>",
		"FLOOR_DECISIONS": "floor.resume.>"} {
		cfg := natsjs.StreamConfig{Name: name, Subjects: []string{subj}, Storage: natsjs.FileStorage}
		if name == "FLOOR_WORK" {
			cfg.Retention = natsjs.WorkQueuePolicy
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	if f.kv, err = js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: "floor_runs"}); err != nil {
		b.Fatal(err)
	}
	consume := func(stream string, h func(m natsjs.Msg)) {
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{Durable: "c", AckPolicy: natsjs.AckExplicitPolicy})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(h)
		if err != nil {
			b.Fatal(err)
		}
		f.ccs = append(f.ccs, cc)
	}
	// Worker: a pass publishes its outcome, then acks.
	consume("FLOOR_WORK", func(m natsjs.Msg) {
		run, pass := string(m.Data()[1:]), m.Data()[0]
		kind := "suspended"
		if pass == '1' {
			kind = "completed"
		}
		_, _ = js.Publish(ctx, "floor.runs."+kind+"."+run, []byte(run), natsjs.WithMsgID(run+string(pass)))
		_ = m.Ack()
	})
	// Coordinator: record outcomes and decisions, queue the replay.
	consume("FLOOR_RUNS", func(m natsjs.Msg) {
		run := string(m.Data())
		if m.Subject() == "floor.runs.suspended."+run {
			_, _ = f.kv.Put(ctx, run, []byte(`{"status":"suspended"}`))
			_ = m.Ack()
			f.suspended <- run
			return
		}
		e, _ := f.kv.Get(ctx, run)
		_, _ = f.kv.Update(ctx, run, []byte(`{"status":"completed"}`), e.Revision())
		_ = m.Ack()
		f.completed <- run
	})
	consume("FLOOR_DECISIONS", func(m natsjs.Msg) {
		run := string(m.Data())
		e, _ := f.kv.Get(ctx, run)
		_, _ = f.kv.Update(ctx, run, []byte(`{"status":"resuming"}`), e.Revision())
		_, _ = js.Publish(ctx, "floor.work.bench", []byte("1"+run), natsjs.WithMsgID(run+"w1"))
		_ = nc.Publish(m.Headers().Get("Reply"), nil)
		_ = m.Ack()
	})
	return f
}

func (f *floorCycle) cycle(b *testing.B, i int) time.Duration {
	ctx := context.Background()
	run := fmt.Sprintf("fl-%d", i)
	start := time.Now()
	if _, err := f.js.Publish(ctx, "floor.work.bench", []byte("0"+run), natsjs.WithMsgID(run+"w0")); err != nil {
		b.Fatal(err)
	}
	waitFor(b, f.suspended, run)
	inbox := nats.NewInbox()
	sub, _ := f.nc.SubscribeSync(inbox)
	msg := nats.NewMsg("floor.resume." + run)
	msg.Data = []byte(run)
	msg.Header.Set("Reply", inbox)
	msg.Header.Set(nats.MsgIdHdr, run+"d")
	if _, err := f.js.PublishMsg(ctx, msg); err != nil {
		b.Fatal(err)
	}
	if _, err := sub.NextMsg(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	_ = sub.Unsubscribe()
	waitFor(b, f.completed, run)
	return time.Since(start)
}

func (f *floorCycle) close() {
	for _, cc := range f.ccs {
		cc.Stop()
	}
	f.nc.Close()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
