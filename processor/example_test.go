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
	"github.com/interlockhq/interlock/subjects"
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

	co := processor.NewCoordinator(nc, processor.CoordinatorConfig{})
	if err := co.Start(ctx); err != nil {
		panic(err)
	}
	defer co.Stop()
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
		Status: subjects.StatusResolved, Payload: map[string]any{"amount": 35}, Approver: "ada"})
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
