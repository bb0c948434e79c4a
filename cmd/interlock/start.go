package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// startOut is what `interlock start --json` prints.
type startOut struct {
	RunID    string `json:"runId"`
	Agent    string `json:"agent"`
	ThreadID string `json:"threadId,omitempty"`
	// Status is "started" until --wait sees the run suspend or end.
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Waiting are the interrupts a suspended run waits for.
	Waiting []subjects.Interrupt `json:"waiting,omitempty"`
}

func newStart(g *globals) *cobra.Command {
	var (
		input, inputFile, thread, runID string
		wait                            bool
		waitTimeout                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "start AGENT [--input JSON | --input-file FILE]",
		Short: "Start a run of an agent and print its run id",
		Long: `start queues the first pass of a run of AGENT and prints the run id; a worker
that serves AGENT runs it. The input is the JSON of --input, or of the file
--input-file names (- reads standard input); without either it is null.
--run-id names the run instead of a fresh UUIDv7: a retry with the same id
starts it once, and once the run has a record start exits 3. --thread groups
the run into a conversation. --wait waits (up to --wait-timeout) until the run
suspends, and prints what it waits for, or ends; a run that failed exits 5.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			agent := args[0]
			if err := subjects.ValidateToken("agent", agent); err != nil {
				return err
			}
			raw, err := startInput(cmd, input, inputFile)
			if err != nil {
				return err
			}
			opts := []processor.StartOption{processor.WithThreadID(thread)}
			if runID != "" {
				if err := subjects.ValidateToken("run id", runID); err != nil {
					return err
				}
				opts = append(opts, processor.WithRunID(runID))
			}
			ctx := cmd.Context()
			return g.withAPI(ctx, func(api *processor.Client) error {
				sctx, cancel := context.WithTimeout(ctx, g.timeout)
				defer cancel()
				var in any
				if raw != nil {
					in = raw
				}
				run, err := api.Start(sctx, agent, in, opts...)
				if err != nil {
					return err
				}
				out := startOut{RunID: run, Agent: agent, ThreadID: thread, Status: "started"}
				if !wait {
					return printStarted(cmd, g.json, out)
				}
				if !g.json {
					say(cmd.OutOrStdout(), "started run %s of agent %s; waiting for it to suspend or end\n", run, agent)
				}
				wctx, cancel := context.WithTimeout(ctx, waitTimeout)
				defer cancel()
				rec, err := api.Wait(wctx, run, func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended || r.Status.Terminal() })
				if err != nil {
					return err
				}
				out.Status, out.Result, out.Error = string(rec.Status), rec.Result, rec.Error
				for _, p := range rec.Pending() {
					out.Waiting = append(out.Waiting, p.Interrupt)
				}
				if err := printStarted(cmd, g.json, out); err != nil {
					return err
				}
				if rec.Status == subjects.RunFailed {
					return &runFailedError{fmt.Errorf("run %s failed: %s", run, rec.Error)}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", "the run's input, as JSON")
	f.StringVar(&inputFile, "input-file", "", "read the run's input (JSON) from `FILE`; - reads standard input")
	f.StringVar(&thread, "thread", "", "the conversation thread the run belongs to")
	f.StringVar(&runID, "run-id", "", "the run's id (letters, digits, - and _; default a fresh UUIDv7)")
	f.BoolVar(&wait, "wait", false, "wait until the run suspends or ends, and print how")
	f.DurationVar(&waitTimeout, "wait-timeout", processor.DefaultWaitTimeout, "with --wait: how long to wait")
	cmd.MarkFlagsMutuallyExclusive("input", "input-file")
	return cmd
}

// startInput is the JSON of --input or --input-file (- is stdin); nil when
// neither is given.
func startInput(cmd *cobra.Command, input, file string) (json.RawMessage, error) {
	flag, data := "--input", []byte(input)
	switch {
	case file == "-":
		flag = "--input-file -"
		b, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return nil, fmt.Errorf("standard input: %w", err)
		}
		data = b
	case file != "":
		flag = "--input-file " + file
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("--input-file: %w", err)
		}
		data = b
	case !changed(cmd, "input"):
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		at := ""
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			at = fmt.Sprintf(" (offset %d)", syntax.Offset)
		}
		return nil, usagef("%s is not valid JSON: %v%s: %s", flag, err, at, oneLine(string(data), 60))
	}
	return json.RawMessage(data), nil
}

func printStarted(cmd *cobra.Command, asJSON bool, out startOut) error {
	w := cmd.OutOrStdout()
	if asJSON {
		return printJSON(w, out)
	}
	switch subjects.RunStatus(out.Status) {
	case subjects.RunSuspended:
		say(w, "run %s suspended, waiting for a decision:\n", out.RunID)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  INTERRUPT\tREASON\tEXPIRES\tMESSAGE")
		now := time.Now()
		for _, p := range out.Waiting {
			say(tw, "  %s\t%s\t%s\t%s\n", p.ID, p.Reason, expires(p.ExpiresAt, now), oneLine(p.Message, 60))
		}
		return tw.Flush()
	case subjects.RunCompleted:
		say(w, "run %s completed: %s\n", out.RunID, out.Result)
	case subjects.RunFailed:
		say(w, "run %s failed: %s\n", out.RunID, out.Error)
	default:
		fmt.Fprintln(w, out.RunID)
	}
	return nil
}
