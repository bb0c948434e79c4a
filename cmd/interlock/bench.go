package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/internal/benchmark"
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

// benchResult is one scenario's figures for one side.
type benchResult struct {
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
	// CPUPerCycleMs is the CPU time the whole bench process used per cycle
	// (user and system): the embedded server's work for the side included,
	// as it runs in the same process. Absent where it cannot be read.
	CPUPerCycleMs float64 `json:"cpuPerCycleMs,omitempty"`
}

func newBench(g *globals) *cobra.Command {
	var (
		scenarios   []string
		syncModes   []string
		runs        int
		concurrency int
		parked      int
		rate        float64
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Interlock against raw JetStream (the floor) on an embedded server",
		Long: `bench runs each scenario twice on a fresh embedded server per durability mode:
through Interlock, then the same durable steps written directly with nats.go
(the floor), and prints both with their ratio. Latencies are p50/p99 from
histograms.

  suspend   start a run until its suspension is recorded (one in flight)
  replay    a decision until the replayed run's completion is recorded (one in flight)
  cycle     full start-suspend-decide-replay-complete cycles per second at --concurrency,
            the messages and bytes written per cycle (the "writes" row), and the
            CPU the process (embedded server included) used per cycle (the "cpu" row)
  paced     cycles started at --rate per second: decision-to-replay p50/p99 under load
  parked    --parked runs left suspended: bytes stored and heap per run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var all []benchResult
			for _, mode := range syncModes {
				if mode != string(embedded.SyncAlways) && mode != string(embedded.SyncInterval) {
					return usagef("--sync %q is not always or interval", mode)
				}
				for _, side := range []string{"interlock", "floor"} {
					res, err := benchSide(cmd.Context(), cmd.ErrOrStderr(), side, embedded.Sync(mode), scenarios, runs, concurrency, parked, rate)
					if err != nil {
						return err
					}
					all = append(all, res...)
				}
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), all)
			}
			printBench(cmd.OutOrStdout(), all)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&scenarios, "scenario", []string{"suspend", "replay", "cycle", "parked"}, "scenarios to run")
	f.StringSliceVar(&syncModes, "sync", []string{"always", "interval"}, "durability modes to run them in")
	f.IntVar(&runs, "runs", 500, "runs per scenario")
	f.IntVar(&concurrency, "concurrency", 16, "cycles in flight in the cycle scenario")
	f.IntVar(&parked, "parked", 10000, "runs left suspended in the parked scenario")
	f.Float64Var(&rate, "rate", 0, "cycles started per second in the paced scenario (try half the floor's cycle rate)")
	return cmd
}

func benchSide(ctx context.Context, progress io.Writer, side string, mode embedded.Sync, scenarios []string, runs, concurrency, parked int, rate float64) ([]benchResult, error) {
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
	if side == "interlock" {
		c, err = benchmark.New(ctx, floor.Config{URL: srv.URL()})
	} else {
		c, err = floor.New(ctx, floor.Config{URL: srv.URL()})
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []benchResult
	seq := 0
	id := func() string { seq++; return fmt.Sprintf("b%07d", seq) }
	for _, sc := range scenarios {
		r := benchResult{Scenario: sc, Sync: string(mode), Side: side}
		tick := progressPrinter(progress, fmt.Sprintf("%s %s sync=%s", sc, side, mode))
		switch sc {
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
				return nil, usagef("--scenario paced needs --rate (cycles per second)")
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
			cpu0, cpuKnown := processCPU()
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
			if cpu1, ok := processCPU(); ok && cpuKnown {
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
			return nil, usagef("--scenario %q is not suspend, replay, cycle, paced or parked", sc)
		}
		fmt.Fprintln(progress)
		out = append(out, r)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// progressPrinter rewrites one progress line at most every 200ms.
func progressPrinter(w io.Writer, label string) func(done, total int) {
	var mu sync.Mutex
	var last time.Time
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if done < total && time.Since(last) < 200*time.Millisecond {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "\r%-40s %7d/%d", label, done, total)
	}
}

func printBench(w io.Writer, all []benchResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SCENARIO\tSYNC\tINTERLOCK\tFLOOR\tRATIO\t")
	find := func(sc, mode, side string) *benchResult {
		for i := range all {
			if all[i].Scenario == sc && all[i].Sync == mode && all[i].Side == side {
				return &all[i]
			}
		}
		return nil
	}
	for _, r := range all {
		if r.Side != "interlock" {
			continue
		}
		f := find(r.Scenario, r.Sync, "floor")
		if f == nil {
			continue
		}
		var il, fl, ratio string
		switch r.Scenario {
		case "cycle":
			il = fmt.Sprintf("%.0f/s p50 %.2fms p99 %.2fms", r.PerSecond, r.P50ms, r.P99ms)
			fl = fmt.Sprintf("%.0f/s p50 %.2fms p99 %.2fms", f.PerSecond, f.P50ms, f.P99ms)
			ratio = fmt.Sprintf("%.2f (throughput)", r.PerSecond/f.PerSecond)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Sync, il, fl, ratio)
			il = fmt.Sprintf("%.1f msgs, %.0f B per cycle", r.MsgsPerCycle, r.BytesPerCycle)
			fl = fmt.Sprintf("%.1f msgs, %.0f B per cycle", f.MsgsPerCycle, f.BytesPerCycle)
			ratio = fmt.Sprintf("%.2f (msgs) %.2f (bytes)", r.MsgsPerCycle/f.MsgsPerCycle, r.BytesPerCycle/f.BytesPerCycle)
			r.Scenario = "writes"
			if r.CPUPerCycleMs > 0 && f.CPUPerCycleMs > 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Sync, il, fl, ratio)
				il = fmt.Sprintf("%.2f ms CPU per cycle", r.CPUPerCycleMs)
				fl = fmt.Sprintf("%.2f ms CPU per cycle", f.CPUPerCycleMs)
				ratio = fmt.Sprintf("%.2f (CPU)", r.CPUPerCycleMs/f.CPUPerCycleMs)
				r.Scenario = "cpu"
			}
		case "parked":
			il = fmt.Sprintf("%.0f B/run stored, %.0f B/run heap", r.BytesPerRun, r.HeapPerRun)
			fl = fmt.Sprintf("%.0f B/run stored", f.BytesPerRun)
			ratio = fmt.Sprintf("%.2f (bytes)", r.BytesPerRun/f.BytesPerRun)
		case "paced":
			il = fmt.Sprintf("%.0f/s replay p50 %.2fms p99 %.2fms", r.PerSecond, r.P50ms, r.P99ms)
			fl = fmt.Sprintf("%.0f/s replay p50 %.2fms p99 %.2fms", f.PerSecond, f.P50ms, f.P99ms)
			ratio = fmt.Sprintf("%.2f (p99)", r.P99ms/f.P99ms)
		default:
			il = fmt.Sprintf("p50 %.2fms p99 %.2fms", r.P50ms, r.P99ms)
			fl = fmt.Sprintf("p50 %.2fms p99 %.2fms", f.P50ms, f.P99ms)
			ratio = fmt.Sprintf("%.2f (p99)", r.P99ms/f.P99ms)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Sync, il, fl, ratio)
	}
	_ = tw.Flush()
}
