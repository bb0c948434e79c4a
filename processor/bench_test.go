package processor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/interlockhq/interlock/internal/benchmark"
	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/jetstream/embedded"
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
			il, err := benchmark.New(ctx, srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer il.Close()
			fl, err := floor.New(ctx, srv.URL())
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
