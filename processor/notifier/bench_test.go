package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// BenchmarkFanOut measures notifications per second to one local webhook
// receiver: the notifier (decode, route, check and record the delivery,
// render, POST, ack) against the floor, a raw nats.go consumer of the same
// suspensions that POSTs each message body and acks. Same server, same
// receiver, same messages, one after the other.
//
//	go test -run '^$' -bench BenchmarkFanOut -benchtime 2000x ./processor/notifier
func BenchmarkFanOut(b *testing.B) {
	srv := jstest.Server(b)
	admin := jstest.Client(b, srv)
	var received atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
	}))
	defer recv.Close()
	ctx := context.Background()
	cfg, err := ParseConfig("bench", []byte(fmt.Sprintf("sinks:\n  ops: {type: webhook, url: %s}\nroutes:\n  - {match: 'true', sinks: [ops]}\n", recv.URL)))
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Create the notifier's consumer, positioned before the messages.
	n, err := New(jstest.Client(b, srv), cfg, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		b.Fatal(err)
	}
	_ = n.Stop(context.Background())
	for i := 0; i < b.N; i++ {
		s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: fmt.Sprintf("r%d", i), Agent: "bench"},
			Interrupts: []subjects.Interrupt{{ID: "i", Reason: "tool_call", Message: "ok?"}}}
		data, _ := json.Marshal(s)
		subject, _ := admin.Namespace().Suspended("bench", s.RunID)
		if _, err := admin.Publish(ctx, subject, data, "", nil); err != nil {
			b.Fatal(err)
		}
	}
	wait := func(target int64) {
		for received.Load() < target {
			time.Sleep(time.Millisecond)
		}
	}
	b.ResetTimer()

	// The floor.
	start := time.Now()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	js, _ := natsjs.New(nc)
	cons, err := js.CreateOrUpdateConsumer(ctx, admin.StreamName("RUNS"), natsjs.ConsumerConfig{Durable: "floor",
		AckPolicy: natsjs.AckExplicitPolicy, FilterSubject: "interlock.suspended.>", MaxAckPending: 64})
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{}
	sem := make(chan struct{}, 16) // the notifier's default MaxInFlight
	cc, err := cons.Consume(func(m natsjs.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			resp, err := client.Post(recv.URL, "application/json", strings.NewReader(string(m.Data())))
			if err == nil {
				resp.Body.Close()
				_ = m.Ack()
			}
		}()
	})
	if err != nil {
		b.Fatal(err)
	}
	wait(int64(b.N))
	floor := time.Since(start)
	cc.Stop()
	nc.Close()

	// Interlock.
	start = time.Now()
	n2, err := New(jstest.Client(b, srv), cfg, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := n2.Start(ctx); err != nil {
		b.Fatal(err)
	}
	wait(int64(2 * b.N))
	il := time.Since(start)
	b.StopTimer()
	_ = n2.Stop(context.Background())
	b.ReportMetric(float64(b.N)/floor.Seconds(), "floor-msgs/s")
	b.ReportMetric(float64(b.N)/il.Seconds(), "interlock-msgs/s")
	b.ReportMetric(floor.Seconds()/il.Seconds(), "ratio")
}
