package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/internal/waiter"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
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

// goInterlock is Interlock's Go SDK: a coordinator and a worker on their own
// connections, the agent asking one question, decisions through the Go
// client (which waits for each verdict), as internal/benchmark runs it; its
// agent also says when it runs again after the decision.
type goInterlock struct {
	conns  []*jetstream.Client
	co     *coordinator.Coordinator
	w      *processor.Worker
	client *processor.Client
	subs   []*jetstream.Subscription
	waits  waiter.Set
	// hook, when set, is called with "decide" just before a decision is
	// published and with "resumed" when the agent runs again after it
	// (streams_test.go marks its strace log with it).
	hook func(run, what string)
}

func newGoInterlock(ctx context.Context, url string, replicas int) (*goInterlock, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := &goInterlock{}
	dial := func() (*jetstream.Client, error) {
		nc, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url, InboxPrefix: subjects.InboxPrefix("")},
			jetstream.Config{Prefix: "peers", Replicas: replicas})
		if err != nil {
			return nil, err
		}
		c.conns = append(c.conns, nc)
		return nc, nc.Provision(ctx)
	}
	admin, err := dial()
	if err != nil {
		c.close()
		return nil, err
	}
	c.client = processor.NewClient(admin)
	for _, t := range []subjects.EventType{subjects.EventSuspended, subjects.EventCompleted} {
		sub, err := admin.Subscribe("peers.events.*."+string(t), func(_ string, data []byte) {
			var ev subjects.Event
			if json.Unmarshal(data, &ev) == nil {
				c.waits.Signal(ev.RunID + "." + string(ev.Type))
			}
		})
		if err != nil {
			c.close()
			return nil, err
		}
		c.subs = append(c.subs, sub)
	}
	cc, err := dial()
	if err != nil {
		c.close()
		return nil, err
	}
	c.co = coordinator.New(cc, coordinator.Config{Logger: quiet, Concurrency: 32})
	wc, err := dial()
	if err != nil {
		c.close()
		return nil, err
	}
	c.w = processor.NewWorker(wc, processor.WorkerConfig{Logger: quiet, Concurrency: 32})
	_ = c.w.Register("peers", func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(processor.WithToolCall(ctx, "call"), processor.Request{Message: "ok?"})
		if err != nil {
			return nil, err
		}
		if info, ok := processor.RunOf(ctx); ok {
			if c.hook != nil {
				c.hook(info.RunID, "resumed")
			}
			c.waits.Signal(info.RunID + ".resumed")
		}
		return d.Payload, nil
	})
	if err := c.co.Start(ctx); err != nil {
		c.close()
		return nil, err
	}
	if err := c.w.Start(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *goInterlock) cycle(ctx context.Context, id string) (time.Duration, error) {
	suspended := c.waits.Wait(id + "." + string(subjects.EventSuspended))
	completed := c.waits.Wait(id + "." + string(subjects.EventCompleted))
	resumed := c.waits.Wait(id + ".resumed")
	if _, err := c.client.Start(ctx, "peers", nil, processor.WithRunID(id)); err != nil {
		return 0, err
	}
	if err := waiter.Await(ctx, suspended); err != nil {
		return 0, fmt.Errorf("suspend: %w", err)
	}
	if c.hook != nil {
		c.hook(id, "decide")
	}
	decided := time.Now()
	var ran time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if waiter.Await(ctx, resumed) == nil {
			ran = time.Since(decided)
		}
	}()
	if _, err := c.client.Decide(ctx, processor.DecisionRequest{RunID: id,
		InterruptID: processor.InterruptID(id, "call", 0), Status: subjects.StatusResolved, Payload: true}); err != nil {
		return 0, err
	}
	if err := waiter.Await(ctx, completed); err != nil {
		return 0, fmt.Errorf("complete: %w", err)
	}
	wg.Wait()
	return ran, nil
}

func (c *goInterlock) close() {
	for _, s := range c.subs {
		s.Unsubscribe()
	}
	if c.w != nil {
		_ = c.w.Stop(context.Background())
	}
	if c.co != nil {
		_ = c.co.Stop(context.Background())
	}
	for _, nc := range c.conns {
		nc.Close()
	}
}

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
		c, err = newGoInterlock(ctx, srv.URL(), 0)
	case "floor":
		var fc *floor.Cycle
		fc, err = floor.New(ctx, floor.Config{URL: srv.URL()})
		c = goFloor{fc}
	default:
		return fmt.Errorf("drive: no Go side %q (interlock-go, floor)", side)
	}
	if err != nil {
		return err
	}
	defer c.close()
	return runProtocol(ctx, o, c.cycle)
}
