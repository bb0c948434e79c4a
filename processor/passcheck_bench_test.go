package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// BenchmarkPassCheck measures the check a worker makes on every delivery
// (has this pass already reported?) on a runs stream holding the outcomes
// of 20,000 runs, half of the checks for runs with an outcome and half for
// runs without, next to the floor: one stored publish on the same server,
// in each durability mode.
//
//	go test -run '^$' -bench BenchmarkPassCheck -benchtime 2000x ./processor
func BenchmarkPassCheck(b *testing.B) {
	for _, sync := range []embedded.Sync{embedded.SyncAlways, embedded.SyncInterval} {
		b.Run("sync="+string(sync), func(b *testing.B) {
			srv := jstest.Server(b, embedded.Config{Sync: sync})
			c := jstest.Client(b, srv)
			w := NewWorker(c, WorkerConfig{})
			ctx := context.Background()
			const runs = 20000
			var batch []jetstream.OutMsg
			for i := range runs {
				run := fmt.Sprintf("r%05d", i)
				subject, _ := c.Namespace().Completed("bench", run)
				data, _ := json.Marshal(subjects.Completion{PassRef: subjects.PassRef{Version: subjects.Version,
					Agent: "bench", RunID: run}, Result: json.RawMessage(`1`), CompletedAt: time.Now()})
				batch = append(batch, jetstream.OutMsg{Subject: subject, Data: data})
				if len(batch) == 500 {
					if err := c.PublishAll(ctx, batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			floorSubject, _ := c.Namespace().Failed("bench", "floor")
			var hCheck, hFloor histogram.Histogram
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run := fmt.Sprintf("r%05d", (i*7919)%(2*runs))
				began := time.Now()
				if _, err := w.passDone(ctx, subjects.Work{PassRef: subjects.PassRef{Agent: "bench", RunID: run}}, "key"); err != nil {
					b.Fatal(err)
				}
				hCheck.Record(time.Since(began))
				began = time.Now()
				if _, err := c.Publish(ctx, floorSubject, []byte(`{}`), "", nil); err != nil {
					b.Fatal(err)
				}
				hFloor.Record(time.Since(began))
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			b.ReportMetric(ms(hCheck.Quantile(0.5)), "check-p50-ms")
			b.ReportMetric(ms(hCheck.Quantile(0.99)), "check-p99-ms")
			b.ReportMetric(ms(hFloor.Quantile(0.5)), "publish-p50-ms")
			b.ReportMetric(ms(hFloor.Quantile(0.99)), "publish-p99-ms")
			b.ReportMetric(float64(hCheck.Quantile(0.5))/float64(hFloor.Quantile(0.5)), "ratio-p50")
			b.ReportMetric(float64(hCheck.Quantile(0.99))/float64(hFloor.Quantile(0.99)), "ratio-p99")
		})
	}
}
