package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/internal/benchmark"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

func newBench(g *globals) *cobra.Command {
	var (
		scenarios   []string
		syncModes   []string
		runs        int
		concurrency int
		parked      int
		rate        float64
		records     string
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
  parked    --parked runs left suspended: bytes stored and heap per run
  gated     a run whose one tool call an operator rule approves in one round trip
            (the worker asks the coordinator; docs/policies.md), start to completion,
            against the same run with no gate (Interlock only; not run by default)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := storageFlag("records-storage", records); err != nil {
				return err
			}
			var all []benchmark.Result
			for _, mode := range syncModes {
				if mode != string(embedded.SyncAlways) && mode != string(embedded.SyncInterval) {
					return usagef("--sync %q is not always or interval", mode)
				}
				for _, side := range []string{"interlock", "floor"} {
					res, err := benchmark.RunSide(cmd.Context(), side, embedded.Sync(mode), benchmark.Options{Scenarios: scenarios,
						Runs: runs, Concurrency: concurrency, Parked: parked, Rate: rate, Records: records, Progress: progressPrinter(cmd.ErrOrStderr())})
					if errors.Is(err, benchmark.ErrUsage) {
						return usage(err)
					}
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
	f.StringVar(&records, "records-storage", "file", "where Interlock's runs bucket keeps the run records: file or memory (as serve --records-storage)")
	f.Float64Var(&rate, "rate", 0, "cycles started per second in the paced scenario (try half the floor's cycle rate)")
	return cmd
}

// progressPrinter shows each scenario's progress on w: one line, rewritten
// at most every 200ms, ended when the scenario is.
func progressPrinter(w io.Writer) func(label string) (func(done, total int), func()) {
	return func(label string) (func(done, total int), func()) {
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
		}, func() { fmt.Fprintln(w) }
	}
}

func printBench(w io.Writer, all []benchmark.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SCENARIO\tSYNC\tINTERLOCK\tFLOOR\tRATIO\t")
	find := func(sc, mode, side string) *benchmark.Result {
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
		if r.Scenario == "gated" {
			if u := find("ungated", r.Sync, "interlock"); u != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", "gated", r.Sync,
					fmt.Sprintf("gated p50 %.2fms p99 %.2fms", r.P50ms, r.P99ms),
					fmt.Sprintf("ungated p50 %.2fms p99 %.2fms", u.P50ms, u.P99ms),
					fmt.Sprintf("%+.2fms p50 %+.2fms p99 per gated call", r.P50ms-u.P50ms, r.P99ms-u.P99ms))
			}
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
