package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/interlockhq/interlock/internal/benchmark"
	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

// cycler is one system's cycle as the Go drivers run it: start a run, wait
// until its durable wait is recorded, decide, wait for its completion.
// resumed is from publishing the decision to the waiting code running again
// (Interlock), or to the completion recorded where no code of ours runs
// after the wait (the floor).
type cycler interface {
	cycle(ctx context.Context, id string) (resumed time.Duration, err error)
	close()
}

// goInterlock is Interlock's Go SDK as internal/benchmark runs it (a
// coordinator and a worker with 32 handlers each, the agent asking one
// question, decisions through the Go client, which waits for each
// verdict), timed from the decision to the agent running again.
type goInterlock struct {
	c  *benchmark.Cycle
	mu sync.Mutex
	// hook, when set, is also called with "decide" and "resumed"
	// (streams_test.go marks its strace log with it).
	hook    func(run, what string)
	decided map[string]time.Time
	resumed map[string]time.Duration
}

func newGoInterlock(ctx context.Context, url string, replicas int, records string) (*goInterlock, error) {
	c, err := benchmark.New(ctx, floor.Config{URL: url, Replicas: replicas, Records: records})
	if err != nil {
		return nil, err
	}
	g := &goInterlock{c: c, decided: map[string]time.Time{}, resumed: map[string]time.Duration{}}
	c.SetHooks(&benchmark.Hooks{
		Decide: func(run string) {
			g.mu.Lock()
			hook := g.hook
			g.mu.Unlock()
			if hook != nil {
				hook(run, "decide")
			}
			g.mu.Lock()
			g.decided[run] = time.Now()
			g.mu.Unlock()
		},
		Resumed: func(run string) {
			g.mu.Lock()
			if at, ok := g.decided[run]; ok {
				g.resumed[run] = time.Since(at)
			}
			hook := g.hook
			g.mu.Unlock()
			if hook != nil {
				hook(run, "resumed")
			}
		},
	})
	return g, nil
}

func (g *goInterlock) cycle(ctx context.Context, id string) (time.Duration, error) {
	if _, err := g.c.Run(ctx, id); err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.resumed[id]
	delete(g.decided, id)
	delete(g.resumed, id)
	if !ok {
		return 0, fmt.Errorf("run %s completed without its agent running again after the decision", id)
	}
	return d, nil
}

func (g *goInterlock) setHook(h func(run, what string)) {
	g.mu.Lock()
	g.hook = h
	g.mu.Unlock()
}

func (g *goInterlock) close() { g.c.Close() }

// goFloor is internal/floor: the same durable steps in raw nats.go. Its
// resume figure is from the decision to the completion recorded.
type goFloor struct{ c *floor.Cycle }

func (f goFloor) cycle(ctx context.Context, id string) (time.Duration, error) {
	p, err := f.c.Run(ctx, id)
	return p.Replay, err
}

func (f goFloor) close() { f.c.Close() }

// drive runs the Go side named (interlock-go or floor) on an embedded
// server in this process with fsync before every ack, speaking the
// runner's protocol (see driver) on stdin and stdout.
func drive(side string, o driveOptions) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "interlock-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, Sync: embedded.SyncAlways})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	var c cycler
	switch side {
	case "interlock-go":
		c, err = newGoInterlock(ctx, srv.URL(), 0, "")
	case "interlock-go-memory":
		c, err = newGoInterlock(ctx, srv.URL(), 0, "memory")
	case "floor":
		var fc *floor.Cycle
		fc, err = floor.New(ctx, floor.Config{URL: srv.URL()})
		c = goFloor{fc}
	default:
		return fmt.Errorf("drive: no Go side %q (interlock-go, interlock-go-memory, floor)", side)
	}
	if err != nil {
		return err
	}
	defer c.close()
	return runProtocol(ctx, o, c.cycle)
}
