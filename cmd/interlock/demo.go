package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

type refundRequest struct {
	Order    string  `json:"order"`
	Amount   float64 `json:"amount"`
	Customer string  `json:"customer"`
}

type order struct {
	ID    string  `json:"id"`
	Total float64 `json:"total"`
}

type refundResult struct {
	Refunded bool    `json:"refunded"`
	Amount   float64 `json:"amount,omitempty"`
	Approver string  `json:"approver,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// demoAgent is the sample agent: a journaled look-up, then a tool call that
// needs a person's approval, with the amount the person approves.
func demoAgent(say func(format string, args ...any)) processor.AgentFunc {
	return processor.Typed(func(ctx context.Context, in refundRequest) (refundResult, error) {
		o, err := processor.Step(ctx, "look-up-order", func(context.Context) (order, error) {
			say("  step: looked up order %s (journaled: it runs once, not again on replay)", in.Order)
			return order{ID: in.Order, Total: in.Amount}, nil
		})
		if err != nil {
			return refundResult{}, err
		}
		tool := processor.WithToolCall(ctx, "call_issue_refund")
		if processor.IsResuming(tool) {
			say("  replay: the decision is here; Interrupt returns it")
		}
		d, err := processor.Interrupt(tool, processor.Request{
			Reason:  subjects.ReasonToolCall,
			Message: fmt.Sprintf("Refund %.2f to %s for order %s?", o.Total, in.Customer, o.ID),
			ResponseSchema: map[string]any{
				"type": "object", "required": []string{"amount"},
				"properties": map[string]any{"amount": map[string]any{"type": "number", "minimum": 0, "maximum": o.Total}},
			},
			Metadata: map[string]any{"tool": "issue_refund", "arguments": in},
		})
		if errors.Is(err, processor.ErrCancelled) {
			return refundResult{Note: "refund denied: " + err.Error()}, nil
		}
		if err != nil {
			return refundResult{}, err
		}
		var answer struct {
			Amount float64 `json:"amount"`
		}
		if err := d.Decode(&answer); err != nil {
			return refundResult{}, err
		}
		return refundResult{Refunded: true, Amount: answer.Amount, Approver: d.Approver}, nil
	})
}

// selfCommand is how the user runs this binary again.
func selfCommand() string {
	if strings.Contains(os.Args[0], "go-build") {
		return "go run ./cmd/interlock"
	}
	return os.Args[0]
}

func newDemo(g *globals) *cobra.Command {
	var (
		emb         embeddedFlags
		autoApprove bool
		autoDeny    bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a sample agent whose refund tool needs approval, end to end",
		Long: `demo starts an embedded NATS server (in a temporary directory unless --data-dir
is set), a coordinator and a worker, and runs a sample agent that asks for
approval before issuing a refund. It prints the suspension and the exact
commands to approve or deny it from another terminal, then the replayed
result. --auto-approve or --auto-deny decide by themselves, for unattended runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if autoApprove && autoDeny {
				return usage(errors.New("--auto-approve and --auto-deny exclude each other"))
			}
			return runDemo(cmd.Context(), g, &emb, cmd.OutOrStdout(), cmd.ErrOrStderr(), autoApprove, autoDeny)
		},
	}
	emb.register(cmd, "", "127.0.0.1:0")
	cmd.Flags().BoolVar(&autoApprove, "auto-approve", false, "approve the refund without waiting for a person")
	cmd.Flags().BoolVar(&autoDeny, "auto-deny", false, "deny the refund without waiting for a person")
	return cmd
}

func runDemo(ctx context.Context, g *globals, emb *embeddedFlags, out, errOut io.Writer, autoApprove, autoDeny bool) error {
	log, err := g.logger(errOut)
	if err != nil {
		return err
	}
	// The agent prints from the worker's goroutine: one lock for all output.
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !g.json {
			fmt.Fprintf(out, format+"\n", args...)
		}
	}
	emit := func(v map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		if g.json {
			_ = json.NewEncoder(out).Encode(v)
		}
	}
	url := g.natsURL
	if url == "" {
		if emb.dataDir == "" {
			dir, err := os.MkdirTemp("", "interlock-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			emb.dataDir = dir
		}
		srv, err := emb.start(log)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.URL()
	}
	say("Interlock demo: an agent needs a person's approval before it issues a refund.")
	say("NATS JetStream at %s", url)

	return g.withClient(ctx, url, "interlock-demo", jetstream.Config{}, func(client *jetstream.Client) error {
		if err := client.Provision(ctx); err != nil {
			return err
		}
		co := coordinator.New(client, coordinator.Config{Logger: log})
		if err := co.Start(ctx); err != nil {
			return err
		}
		defer co.Stop(context.Background())
		w := processor.NewWorker(client, processor.WorkerConfig{Logger: log})
		if err := w.Register("refunds", demoAgent(say)); err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = w.Stop(context.Background()) }()

		// The demo waits for a person until it is stopped, not for Wait's default.
		api := processor.NewClient(client, processor.WithWaitTimeout(24*time.Hour))
		run, err := api.Start(ctx, "refunds", refundRequest{Order: "A-1001", Amount: 42.5, Customer: "Ada"})
		if err != nil {
			return err
		}
		say("started run %s", run)
		emit(map[string]any{"event": "started", "runId": run, "natsUrl": url})

		rec, err := api.Wait(ctx, run, func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended || r.Status.Terminal() })
		if err != nil {
			return err
		}
		if rec.Status != subjects.RunSuspended {
			return &runFailedError{fmt.Errorf("run %s %s before asking: %s", run, rec.Status, rec.Error)}
		}
		in := rec.Pending()[0]
		self := selfCommand()
		approve := fmt.Sprintf(`%s approve --nats-url %s %s %s --payload '{"amount": 42.5}'`, self, url, run, in.ID)
		deny := fmt.Sprintf(`%s deny --nats-url %s %s %s --comment "not eligible"`, self, url, run, in.ID)
		say("suspended: the run waits for a decision; no process holds it in memory.")
		say("  interrupt  %s", in.ID)
		say("  reason     %s (tool call %s)", in.Reason, in.ToolCallID)
		say("  message    %s", in.Message)
		say("  answer     %s", in.ResponseSchema)
		emit(map[string]any{"event": "suspended", "runId": run, "interrupt": in.Interrupt,
			"approveCommand": approve, "denyCommand": deny})

		switch {
		case autoApprove || autoDeny:
			req := processor.DecisionRequest{RunID: run, InterruptID: in.ID, Approver: "demo"}
			if autoApprove {
				req.Status, req.Payload = subjects.StatusResolved, map[string]any{"amount": 42.5}
				say("deciding by itself (--auto-approve): approve 42.50")
			} else {
				req.Status, req.Comment = subjects.StatusCancelled, "denied by --auto-deny"
				say("deciding by itself (--auto-deny): deny")
			}
			v, err := api.Decide(ctx, req)
			if err != nil {
				return err
			}
			say("decision %s", v.Outcome)
		default:
			say("")
			say("To approve it, run in another terminal:")
			say("  %s", approve)
			say("To deny it:")
			say("  %s", deny)
			say("")
			say("waiting for a decision (Ctrl-C to stop)...")
		}

		rec, err = api.Wait(ctx, run, processor.Finished)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("stopped before the run finished; it was suspended, waiting for %s", in.ID)
			}
			return err
		}
		emit(map[string]any{"event": string(rec.Status), "runId": run, "result": rec.Result, "error": rec.Error})
		if rec.Status == subjects.RunFailed {
			return &runFailedError{fmt.Errorf("run %s failed: %s", run, rec.Error)}
		}
		say("completed after %d passes: %s", rec.Pass+1, rec.Result)
		return nil
	})
}
