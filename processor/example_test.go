package processor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
)

type refund struct {
	Order  string  `json:"order"`
	Amount float64 `json:"amount"`
}

// refundAgent asks before it refunds. Everything before Interrupt runs on
// every pass, except the journaled step.
func refundAgent(ctx context.Context, in refund) (string, error) {
	ticket, err := processor.Step(ctx, "open-ticket", func(context.Context) (string, error) {
		fmt.Println("ticket opened (once)")
		return "T-" + in.Order, nil
	})
	if err != nil {
		return "", err
	}
	tool := processor.WithToolCall(ctx, "call_issue_refund")
	if !processor.IsResuming(tool) {
		fmt.Println("asking for approval")
	}
	d, err := processor.Interrupt(tool, processor.Request{
		Message:        fmt.Sprintf("Refund %.2f for %s?", in.Amount, in.Order),
		ResponseSchema: map[string]any{"type": "object", "required": []string{"amount"}},
	})
	if errors.Is(err, processor.ErrCancelled) {
		return "denied, " + ticket, nil
	}
	if err != nil {
		return "", err
	}
	var answer struct{ Amount float64 }
	if err := d.Decode(&answer); err != nil {
		return "", err
	}
	return fmt.Sprintf("refunded %.2f, %s, approved by %s", answer.Amount, ticket, d.Approver), nil
}

// A whole run: start, suspend, decide, replay, complete.
func Example() {
	dir, _ := os.MkdirTemp("", "interlock-example-")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	if err := nc.Provision(ctx); err != nil {
		panic(err)
	}

	co := coordinator.New(nc, coordinator.Config{})
	if err := co.Start(ctx); err != nil {
		panic(err)
	}
	defer co.Stop(context.Background())
	w := processor.NewWorker(nc, processor.WorkerConfig{})
	_ = w.Register("refunds", processor.Typed(refundAgent))
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()

	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "refunds", refund{Order: "A-1", Amount: 40})
	rec, _ := client.Wait(ctx, run, processor.Suspended)
	in := rec.Pending()[0]
	fmt.Println("waiting on:", in.Message)

	v, _ := client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: in.ID,
		Status: processor.StatusResolved, Payload: map[string]any{"amount": 35}, Approver: "ada"})
	fmt.Println("decision:", v.Outcome)

	rec, _ = client.Wait(ctx, run, processor.Finished)
	fmt.Println(rec.Status, string(rec.Result))
	// Output:
	// ticket opened (once)
	// asking for approval
	// waiting on: Refund 40.00 for A-1?
	// decision: accepted
	// completed "refunded 35.00, T-A-1, approved by ada"
}

// system is an embedded server with a coordinator and a worker running
// agents, for the examples; stop ends it.
func system(agents map[string]processor.AgentFunc) (ctx context.Context, nc *jetstream.Client, stop func()) {
	dir, _ := os.MkdirTemp("", "interlock-example-")
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	nc, err = jetstream.Dial(ctx, jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	if err != nil {
		panic(err)
	}
	if err := nc.Provision(ctx); err != nil {
		panic(err)
	}
	co := coordinator.New(nc, coordinator.Config{})
	if err := co.Start(ctx); err != nil {
		panic(err)
	}
	w := processor.NewWorker(nc, processor.WorkerConfig{})
	for name, fn := range agents {
		if err := w.Register(name, fn); err != nil {
			panic(err)
		}
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	return ctx, nc, func() {
		_ = w.Stop(context.Background())
		_ = co.Stop(context.Background())
		nc.Close()
		srv.Shutdown()
		cancel()
		_ = os.RemoveAll(dir)
	}
}

// Interrupt suspends the run on its first pass and returns the decision on
// the replay. A denial is an error matching ErrCancelled.
func ExampleInterrupt() {
	deploy := func(ctx context.Context, env string) (string, error) {
		d, err := processor.Interrupt(ctx, processor.Request{Message: "Deploy to " + env + "?"})
		if errors.Is(err, processor.ErrCancelled) {
			return "not deployed: " + d.Comment, nil
		}
		if err != nil {
			return "", err // ErrSuspended on the first pass
		}
		return "deployed to " + env, nil
	}
	ctx, nc, stop := system(map[string]processor.AgentFunc{"deploy": processor.Typed(deploy)})
	defer stop()
	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "deploy", "prod")
	rec, _ := client.Wait(ctx, run, processor.Suspended)
	_, _ = client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: processor.StatusCancelled, Comment: "freeze until Monday"})
	rec, _ = client.Wait(ctx, run, processor.Finished)
	fmt.Println(string(rec.Result))
	// Output: "not deployed: freeze until Monday"
}

// IsResuming says whether the next Interrupt returns a decision: work that
// only the first pass should do (telling someone) goes behind it.
func ExampleIsResuming() {
	ask := func(ctx context.Context, _ struct{}) (bool, error) {
		fmt.Println("resuming:", processor.IsResuming(ctx))
		d, err := processor.Interrupt(ctx, processor.Request{Message: "Go on?"})
		if err != nil {
			return false, err
		}
		return d.Status == processor.StatusResolved, nil
	}
	ctx, nc, stop := system(map[string]processor.AgentFunc{"ask": processor.Typed(ask)})
	defer stop()
	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "ask", struct{}{})
	rec, _ := client.Wait(ctx, run, processor.Suspended)
	_, _ = client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: processor.StatusResolved})
	rec, _ = client.Wait(ctx, run, processor.Finished)
	fmt.Println("result:", string(rec.Result))
	// Output:
	// resuming: false
	// resuming: true
	// result: true
}

// Step runs its function on the first pass only; every replay gets the
// journaled result.
func ExampleStep() {
	ticket := func(ctx context.Context, _ struct{}) (string, error) {
		id, err := processor.Step(ctx, "open-ticket", func(context.Context) (string, error) {
			fmt.Println("opening the ticket")
			return "T-42", nil
		})
		if err != nil {
			return "", err
		}
		if _, err := processor.Interrupt(ctx, processor.Request{Message: "Close " + id + "?"}); err != nil {
			return "", err
		}
		return "closed " + id, nil
	}
	ctx, nc, stop := system(map[string]processor.AgentFunc{"tickets": processor.Typed(ticket)})
	defer stop()
	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "tickets", struct{}{})
	rec, _ := client.Wait(ctx, run, processor.Suspended)
	_, _ = client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: processor.StatusResolved})
	rec, _ = client.Wait(ctx, run, processor.Finished)
	fmt.Println(string(rec.Result))
	// Output:
	// opening the ticket
	// "closed T-42"
}

// Register makes a worker run an agent's passes; Typed adapts a typed body.
// Options say how its passes behave.
func ExampleWorker_Register() {
	ctx, nc, stop := system(nil)
	defer stop()
	w := processor.NewWorker(nc, processor.WorkerConfig{Concurrency: 8})
	greet := func(_ context.Context, name string) (string, error) { return "hello " + name, nil }
	if err := w.Register("greeter", processor.Typed(greet), processor.WithPassTimeout(time.Minute)); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "greeter", "ada")
	rec, _ := client.Wait(ctx, run, processor.Finished)
	fmt.Println(rec.Status, string(rec.Result))
	// Output: completed "hello ada"
}

// Start queues a run's first pass and returns its id; WithRunID makes
// starting idempotent, for a caller that may retry.
func ExampleClient_Start() {
	echo := func(_ context.Context, in map[string]int) (int, error) { return in["n"] * 2, nil }
	ctx, nc, stop := system(map[string]processor.AgentFunc{"double": processor.Typed(echo)})
	defer stop()
	client := processor.NewClient(nc)
	run, err := client.Start(ctx, "double", map[string]int{"n": 21}, processor.WithRunID("order-7"))
	if err != nil {
		panic(err)
	}
	rec, _ := client.Wait(ctx, run, processor.Finished)
	fmt.Println(run, string(rec.Result))
	// Output: order-7 42
}

// Decide sends a decision and returns the coordinator's verdict; a refused
// one is an error matching ErrRejected, with the code in *RejectionError.
func ExampleClient_Decide() {
	approve := func(ctx context.Context, _ struct{}) (string, error) {
		_, err := processor.Interrupt(ctx, processor.Request{Message: "Approve?",
			ResponseSchema: map[string]any{"type": "object", "required": []string{"ok"}}})
		return "done", err
	}
	ctx, nc, stop := system(map[string]processor.AgentFunc{"approve": processor.Typed(approve)})
	defer stop()
	client := processor.NewClient(nc)
	run, _ := client.Start(ctx, "approve", struct{}{})
	rec, _ := client.Wait(ctx, run, processor.Suspended)
	req := processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID, Status: processor.StatusResolved,
		Payload: map[string]any{"nope": true}}
	_, err := client.Decide(ctx, req)
	var rej *processor.RejectionError
	if errors.As(err, &rej) {
		fmt.Println("rejected:", rej.Verdict.Code)
	}
	req.Payload = map[string]any{"ok": true}
	v, _ := client.Decide(ctx, req)
	fmt.Println(v.Outcome, v.Replay)
	// Output:
	// rejected: schema_mismatch
	// accepted true
}
