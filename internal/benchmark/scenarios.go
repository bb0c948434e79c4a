package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/internal/writes"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

// cycler is what both Interlock and the floor do.
type cycler interface {
	Run(ctx context.Context, id string) (floor.Phases, error)
	Park(ctx context.Context, id string) error
	Bytes(ctx context.Context) (uint64, error)
	Close()
}

// Result is one scenario's figures for one side, as `interlock bench
// --json` prints them.
type Result struct {
	Scenario  string  `json:"scenario"`
	Sync      string  `json:"sync"`
	Side      string  `json:"side"` // interlock or floor
	Runs      int     `json:"runs"`
	PerSecond float64 `json:"perSecond,omitempty"`
	P50ms     float64 `json:"p50ms,omitempty"`
	P99ms     float64 `json:"p99ms,omitempty"`
	// Parked runs: bytes stored per run, and the process heap (the embedded
	// server included) per run.
	BytesPerRun float64 `json:"bytesPerRun,omitempty"`
	HeapPerRun  float64 `json:"heapBytesPerRun,omitempty"`
	// Cycles: messages stored and bytes published on the streams per
	// cycle, over every stream and bucket the side uses.
	MsgsPerCycle  float64 `json:"msgsPerCycle,omitempty"`
	BytesPerCycle float64 `json:"bytesPerCycle,omitempty"`
	// StreamBytesPerCycle splits BytesPerCycle by stream (a bucket's
	// stream is KV_<bucket>).
	StreamBytesPerCycle map[string]float64 `json:"streamBytesPerCycle,omitempty"`
	// CPUPerCycleMs is the CPU time the whole bench process used per cycle
	// (user and system): the embedded server's work for the side included,
	// as it runs in the same process. Absent where it cannot be read.
	CPUPerCycleMs float64 `json:"cpuPerCycleMs,omitempty"`
}

// Options are what RunSide runs.
type Options struct {
	// Scenarios: suspend, replay, cycle, paced, parked, gated.
	Scenarios []string
	// Runs per scenario, Concurrency the cycles in flight in cycle, Parked
	// the runs left suspended in parked, Rate the cycles started per second
	// in paced.
	Runs, Concurrency, Parked int
	Rate                      float64
	// Records is where Interlock's runs bucket keeps the run records
	// (jetstream.Config.RecordsStorage); default file (floor.Config).
	Records string
	// Progress, when set, is told as each scenario starts (its label) and
	// returns what is called with each run done and when it ends.
	Progress func(label string) (tick func(done, total int), end func())
}

// ErrUsage is RunSide's error for scenarios it cannot run as asked (an
// unknown one, paced without a rate).
var ErrUsage = errors.New("benchmark")

// RunSide runs o's scenarios for side, "interlock" (Cycle) or "floor"
// (internal/floor), on a fresh embedded server with durability mode.
func RunSide(ctx context.Context, side string, mode embedded.Sync, o Options) ([]Result, error) {
	scenarios, runs, concurrency, parked, rate := o.Scenarios, o.Runs, o.Concurrency, o.Parked, o.Rate
	progress := o.Progress
	if progress == nil {
		progress = func(string) (func(int, int), func()) { return func(int, int) {}, func() {} }
	}
	dir, err := os.MkdirTemp("", "interlock-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, Sync: mode})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	var c cycler
	if side == "interlock" && slices.Contains(scenarios, "gated") {
		c, err = NewGated(ctx, floor.Config{URL: srv.URL(), Records: o.Records})
	} else if side == "interlock" {
		c, err = New(ctx, floor.Config{URL: srv.URL(), Records: o.Records})
	} else {
		c, err = floor.New(ctx, floor.Config{URL: srv.URL()})
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []Result
	seq := 0
	id := func() string { seq++; return fmt.Sprintf("b%07d", seq) }
	for _, sc := range scenarios {
		r := Result{Scenario: sc, Sync: string(mode), Side: side}
		tick, end := progress(fmt.Sprintf("%s %s sync=%s", sc, side, mode))
		switch sc {
		case "gated":
			// Interlock only (the floor has no rules): the latency a gate an
			// operator rule settles adds to a tool call, against the same
			// run without the gate. Alternating the two keeps load alike.
			cy, ok := c.(*Cycle)
			if !ok {
				end()
				continue
			}
			var gated, ungated histogram.Histogram
			for i := range runs {
				for _, g := range []bool{true, false} {
					d, err := cy.GatedRun(ctx, id(), g)
					if err != nil {
						return nil, fmt.Errorf("%s gated: %w", side, err)
					}
					if g {
						gated.Record(d)
					} else {
						ungated.Record(d)
					}
				}
				tick(i+1, runs)
			}
			r.Runs, r.P50ms, r.P99ms = runs, ms(gated.Quantile(0.5)), ms(gated.Quantile(0.99))
			out = append(out, Result{Scenario: "ungated", Sync: string(mode), Side: side, Runs: runs,
				P50ms: ms(ungated.Quantile(0.5)), P99ms: ms(ungated.Quantile(0.99))})
		case "suspend", "replay":
			var h histogram.Histogram
			for i := range runs {
				p, err := c.Run(ctx, id())
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", side, sc, err)
				}
				if sc == "suspend" {
					h.Record(p.Suspend)
				} else {
					h.Record(p.Replay)
				}
				tick(i+1, runs)
			}
			r.Runs, r.P50ms, r.P99ms = runs, ms(h.Quantile(0.5)), ms(h.Quantile(0.99))
		case "paced":
			if rate <= 0 {
				return nil, fmt.Errorf("%w: scenario paced needs a rate (cycles per second)", ErrUsage)
			}
			var h histogram.Histogram
			var wg sync.WaitGroup
			var failed atomic.Value
			var done atomic.Int64
			interval := time.Duration(float64(time.Second) / rate)
			next := time.Now()
			start := time.Now()
			for range runs {
				time.Sleep(time.Until(next)) // the pace itself
				next = next.Add(interval)
				wg.Add(1)
				go func(run string) {
					defer wg.Done()
					p, err := c.Run(ctx, run)
					if err != nil {
						failed.Store(err)
						return
					}
					h.Record(p.Replay)
					tick(int(done.Add(1)), runs)
				}(id())
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				return nil, fmt.Errorf("%s paced: %w", side, err)
			}
			r.Runs, r.PerSecond = runs, float64(runs)/time.Since(start).Seconds()
			r.P50ms, r.P99ms = ms(h.Quantile(0.5)), ms(h.Quantile(0.99))
		case "cycle":
			var h histogram.Histogram
			var done atomic.Int64
			var firstErr error
			var once sync.Once
			ids := make(chan string, runs)
			for range runs {
				ids <- id()
			}
			close(ids)
			tap, err := writes.Start(ctx, srv.URL())
			if err != nil {
				return nil, err
			}
			cpu0, cpuKnown := ProcessCPU()
			start := time.Now()
			var wg sync.WaitGroup
			for range concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for run := range ids {
						p, err := c.Run(ctx, run)
						if err != nil {
							once.Do(func() { firstErr = err })
							return
						}
						h.Record(p.Total)
						tick(int(done.Add(1)), runs)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			if cpu1, ok := ProcessCPU(); ok && cpuKnown {
				r.CPUPerCycleMs = ms(cpu1-cpu0) / float64(runs)
			}
			written, err := tap.Stop(ctx)
			if firstErr != nil {
				return nil, fmt.Errorf("%s cycle: %w", side, firstErr)
			}
			if err != nil {
				return nil, fmt.Errorf("%s cycle: counting writes: %w", side, err)
			}
			r.Runs, r.PerSecond = runs, float64(runs)/elapsed.Seconds()
			r.MsgsPerCycle, r.BytesPerCycle = float64(written.Msgs)/float64(runs), float64(written.Bytes)/float64(runs)
			r.StreamBytesPerCycle = map[string]float64{}
			for stream, n := range written.Streams {
				r.StreamBytesPerCycle[stream] = float64(n) / float64(runs)
			}
			r.P50ms, r.P99ms = ms(h.Quantile(0.5)), ms(h.Quantile(0.99))
		case "parked":
			before, err := c.Bytes(ctx)
			if err != nil {
				return nil, err
			}
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			sem := make(chan struct{}, 64)
			var wg sync.WaitGroup
			var failed atomic.Value
			var done atomic.Int64
			for range parked {
				sem <- struct{}{}
				wg.Add(1)
				go func(run string) {
					defer wg.Done()
					defer func() { <-sem }()
					if err := c.Park(ctx, run); err != nil {
						failed.Store(err)
					}
					tick(int(done.Add(1)), parked)
				}(id())
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				return nil, fmt.Errorf("%s parked: %w", side, err)
			}
			after, err := c.Bytes(ctx)
			if err != nil {
				return nil, err
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			r.Runs = parked
			r.BytesPerRun = float64(after-before) / float64(parked)
			r.HeapPerRun = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(parked)
		default:
			return nil, fmt.Errorf("%w: scenario %q is not suspend, replay, cycle, paced, parked or gated", ErrUsage, sc)
		}
		end()
		out = append(out, r)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
