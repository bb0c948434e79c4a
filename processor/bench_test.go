package processor_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/interlockhq/interlock/internal/benchmark"
	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// BenchmarkCycle measures one full suspend-decide-replay-complete cycle, one
// run in flight, through Interlock and through the floor (internal/floor:
// the same durable steps in raw nats.go), interleaved on one embedded
// server, in each durability mode, and reports the ratio. `interlock bench`
// measures more scenarios, at concurrency.
//
//	go test -run '^$' -bench BenchmarkCycle -benchtime 1000x ./processor
func BenchmarkCycle(b *testing.B) {
	for _, sync := range []embedded.Sync{embedded.SyncAlways, embedded.SyncInterval} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			ctx := context.Background()
			srv, err := embedded.Start(embedded.Config{DataDir: b.TempDir(), Port: -1, Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			il, err := benchmark.New(ctx, floor.Config{URL: srv.URL()})
			if err != nil {
				b.Fatal(err)
			}
			defer il.Close()
			fl, err := floor.New(ctx, floor.Config{URL: srv.URL()})
			if err != nil {
				b.Fatal(err)
			}
			defer fl.Close()
			var hIL, hFloor histogram.Histogram
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("c%07d", i)
				p, err := il.Run(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				hIL.Record(p.Total)
				if p, err = fl.Run(ctx, id); err != nil {
					b.Fatal(err)
				}
				hFloor.Record(p.Total)
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

// BenchmarkCycles measures full cycles per second with 32 in flight,
// through Interlock and through the floor, interleaved in rounds of 64
// cycles each on the same servers: one server, and a three-node cluster
// with every stream and bucket replicated three times, each with fsync
// before every acknowledgement. `interlock bench` measures the single
// server in both durability modes.
//
//	go test -run '^$' -bench BenchmarkCycles -benchtime 10x ./processor
func BenchmarkCycles(b *testing.B) {
	const inFlight, round = 32, 64
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("servers=%d", nodes), func(b *testing.B) {
			ctx := context.Background()
			var cfg floor.Config
			if nodes > 1 {
				cfg = floor.Config{URL: jstest.URLs(jstest.SyncedCluster(b, nodes, embedded.SyncAlways)), Replicas: nodes}
			} else {
				cfg = floor.Config{URL: jstest.Server(b, embedded.Config{Sync: embedded.SyncAlways}).URL()}
			}
			cfg.Records = os.Getenv("INTERLOCK_BENCH_RECORDS")
			il, err := benchmark.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer il.Close()
			fl, err := floor.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer fl.Close()
			// CPU of the whole process, the embedded servers included: on a
			// cluster of embedded nodes on a machine of few cores, what a
			// side's cycles cost in CPU bounds its rate.
			sides := []struct {
				name string
				run  func(ctx context.Context, id string) (floor.Phases, error)
				took time.Duration
				cpu  time.Duration
			}{{name: "interlock", run: il.Run}, {name: "floor", run: fl.Run}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for s := range sides {
					ids := make(chan string, round)
					for j := range round {
						ids <- fmt.Sprintf("r%d-%d-%d", s, i, j)
					}
					close(ids)
					start := time.Now()
					cpu0, _ := benchmark.ProcessCPU()
					errs := make(chan error, inFlight)
					for range inFlight {
						go func() {
							for id := range ids {
								if _, err := sides[s].run(ctx, id); err != nil {
									errs <- err
									return
								}
							}
							errs <- nil
						}()
					}
					for range inFlight {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
					sides[s].took += time.Since(start)
					cpu1, _ := benchmark.ProcessCPU()
					sides[s].cpu += cpu1 - cpu0
				}
			}
			b.StopTimer()
			perSecond := func(d time.Duration) float64 { return float64(b.N*round) / d.Seconds() }
			msPerCycle := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.N*round) }
			b.ReportMetric(perSecond(sides[0].took), "interlock-cycles/s")
			b.ReportMetric(perSecond(sides[1].took), "floor-cycles/s")
			b.ReportMetric(float64(sides[1].took)/float64(sides[0].took), "ratio")
			b.ReportMetric(msPerCycle(sides[0].cpu), "interlock-cpu-ms/cycle")
			b.ReportMetric(msPerCycle(sides[1].cpu), "floor-cpu-ms/cycle")
			// The rate ratio CPU alone allows: the floor's CPU per cycle
			// over Interlock's. Close to "ratio", the cycles are CPU-bound.
			b.ReportMetric(float64(sides[1].cpu)/float64(sides[0].cpu), "cpu-ratio")
		})
	}
}
