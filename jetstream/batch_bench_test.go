package jetstream_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// BenchmarkAtomicBatch measures what it costs JetStream to store messages
// one publish each against atomic batches (nats-server 2.12+, stored all
// or none with one fsync), on one server and on a three-node cluster, with
// fsync before every acknowledgement. It is the evidence for why the
// coordinator does not write a record and its events as one batch on a
// single server: there every batch is staged in a file store of its own
// first (see docs/benchmarks.md).
//
//	go test -run '^$' -bench BenchmarkAtomicBatch -benchtime 2000x ./jetstream
func BenchmarkAtomicBatch(b *testing.B) {
	const publishers = 8
	for _, nodes := range []int{1, 3} {
		for _, size := range []int{0, 1, 2, 8} {
			name := fmt.Sprintf("servers=%d/batch=%d", nodes, size)
			if size == 0 {
				name = fmt.Sprintf("servers=%d/single", nodes)
			}
			b.Run(name, func(b *testing.B) {
				var url string
				if nodes > 1 {
					url = jstest.URLs(jstest.SyncedCluster(b, nodes, embedded.SyncAlways))
				} else {
					url = jstest.Server(b, embedded.Config{Sync: embedded.SyncAlways}).URL()
				}
				nc, err := nats.Connect(url)
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				// On a new cluster the stream is created once the nodes have
				// elected a meta leader, and takes writes once its replicas
				// have elected theirs and settled; a request sent before finds
				// no responder or no answer (in CI a create timed out after
				// nats.go's 5 s). Both are asked again until one goes
				// through, and the measurement starts from the first write.
				cfg := jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}, Replicas: nodes, AllowAtomicPublish: true}
				until(b, "stream B is created", func(ctx context.Context) error {
					_, err := js.CreateOrUpdateStream(ctx, cfg)
					return err
				})
				until(b, "stream B takes a write", func(ctx context.Context) error {
					_, err := js.Publish(ctx, "b.warm", nil)
					return err
				})
				body := make([]byte, 400) // about an event's size
				// Each of b.N operations stores max(size, 1) messages.
				work := make(chan int, b.N)
				for i := range b.N {
					work <- i
				}
				close(work)
				errs := make(chan error, publishers)
				b.ResetTimer()
				start := time.Now()
				for p := range publishers {
					go func() {
						for i := range work {
							var err error
							if size == 0 {
								_, err = js.Publish(ctx, "b."+strconv.Itoa(p), body)
							} else {
								err = jstest.PublishBatch(nc, fmt.Sprintf("%d-%d", p, i), "b."+strconv.Itoa(p), body, size)
							}
							if err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range publishers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				msgs := b.N * max(size, 1)
				b.ReportMetric(float64(msgs)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}

// until runs op, each attempt bounded by 5 s, until it succeeds, and fails
// b when none has within a minute.
func until(b *testing.B, what string, op func(context.Context) error) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not after a minute: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond) // the nodes settle on their own; nothing to wait on
	}
}
