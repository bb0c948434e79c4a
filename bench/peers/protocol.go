package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// The drivers' protocol, the same in every language (drivers.py and
// restate.mjs speak it too), read from the environment and spoken on
// stdin and stdout:
//
//	PEERS_WARMUP cycles at PEERS_CONCURRENCY in flight, not measured;
//	"MARK start", then one line read from stdin (the runner has taken its
//	  CPU and fsync readings);
//	PEERS_CYCLES cycles at PEERS_CONCURRENCY in flight;
//	"MARK end", then one line read from stdin;
//	PEERS_RESUMES cycles one at a time, each followed by "RESUME <µs>":
//	  from the decision sent to the waiting code running again;
//	"DONE".
type driveOptions struct {
	warmup, cycles, resumes, concurrency int
}

func driveOptionsFromEnv() (driveOptions, error) {
	o := driveOptions{}
	for name, p := range map[string]*int{"PEERS_WARMUP": &o.warmup, "PEERS_CYCLES": &o.cycles,
		"PEERS_RESUMES": &o.resumes, "PEERS_CONCURRENCY": &o.concurrency} {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil || n < 0 {
			return o, fmt.Errorf("%s=%q is not a count", name, os.Getenv(name))
		}
		*p = n
	}
	if o.concurrency < 1 {
		return o, fmt.Errorf("PEERS_CONCURRENCY must be at least 1")
	}
	return o, nil
}

func runProtocol(ctx context.Context, o driveOptions, cycle func(context.Context, string) (time.Duration, error)) error {
	in := bufio.NewReader(os.Stdin)
	seq := 0
	next := func() string { seq++; return fmt.Sprintf("p%07d", seq) }
	batch := func(n int) error {
		ids := make(chan string, n)
		for range n {
			ids <- next()
		}
		close(ids)
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		for range o.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ids {
					if _, err := cycle(ctx, id); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		return first
	}
	mark := func(name string) error {
		fmt.Printf("MARK %s\n", name)
		_, err := in.ReadString('\n')
		return err
	}
	if err := batch(o.warmup); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := mark("start"); err != nil {
		return err
	}
	if err := batch(o.cycles); err != nil {
		return fmt.Errorf("cycles: %w", err)
	}
	if err := mark("end"); err != nil {
		return err
	}
	for range o.resumes {
		d, err := cycle(ctx, next())
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		fmt.Printf("RESUME %d\n", d.Microseconds())
	}
	fmt.Println("DONE")
	return nil
}
