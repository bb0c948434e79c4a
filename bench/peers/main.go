// Command peers runs the same durable human-in-the-loop cycle (start →
// durable wait for a decision → decision → completion) on Interlock and on
// its peers, interleaved, and reports each system's figures as ratios to
// Interlock's Go SDK. It is not part of CI: bench/peers/run installs what it
// needs, builds this command and interlock, and runs it
// (docs/benchmarks.md, "Peers").
//
//	peers compare [flags]   the comparison (the runner)
//	peers drive SIDE        one Go side (interlock-go, floor) as a driver
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers compare [flags] | peers drive interlock-go|floor")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "drive":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: peers drive interlock-go|floor")
			break
		}
		var o driveOptions
		if o, err = driveOptionsFromEnv(); err == nil {
			err = drive(os.Args[2], o)
		}
	case "compare":
		fs := flag.NewFlagSet("compare", flag.ExitOnError)
		var c compareConfig
		fs.IntVar(&c.rounds, "rounds", 5, "interleaved rounds (each system once per round, in a rotating order)")
		fs.IntVar(&c.cycles, "cycles", 400, "measured cycles per system per round, at --concurrency in flight")
		fs.IntVar(&c.warmup, "warmup", 64, "cycles before the measured ones, not measured")
		fs.IntVar(&c.resumes, "resumes", 200, "cycles one at a time per system per round, for resume latency")
		fs.IntVar(&c.concurrency, "concurrency", 32, "cycles in flight")
		fs.StringVar(&c.systems, "systems", allSystems, "systems to run, comma-separated")
		fs.BoolVar(&c.json, "json", false, "print every round and the medians as JSON")
		fs.StringVar(&c.fsyncs, "fsyncs", fsyncsSeparate, "where fsyncs are counted: separate (each system timed untraced, then run again under strace to count them), timed (in the timed pass, under strace), off")
		fs.StringVar(&c.cache, "cache", os.Getenv("PEERS_CACHE"), "where bench/peers/run installed the peers")
		_ = fs.Parse(os.Args[2:])
		switch c.fsyncs {
		case fsyncsSeparate, fsyncsTimed, fsyncsOff:
			err = compare(c)
		default:
			err = fmt.Errorf("--fsyncs %q: want separate, timed or off", c.fsyncs)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}
