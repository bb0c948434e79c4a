package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func newPending(g *globals) *cobra.Command {
	var agent, reason, approver string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List the interrupts waiting for a decision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			api, closeAPI, err := g.api(ctx)
			if err != nil {
				return err
			}
			defer closeAPI()
			list, err := api.Pending(ctx)
			if err != nil {
				return err
			}
			var out []processor.PendingInterrupt
			now := time.Now()
			for _, p := range list {
				switch {
				case agent != "" && p.Agent != agent,
					reason != "" && p.Reason != reason,
					olderThan > 0 && now.Sub(p.SuspendedAt) < olderThan,
					approver != "" && len(p.Approvers) > 0 && !slices.Contains(p.Approvers, approver):
					continue
				}
				out = append(out, p)
			}
			if g.json {
				if out == nil {
					out = []processor.PendingInterrupt{}
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			if len(out) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no interrupts are waiting for a decision")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tAGENT\tINTERRUPT\tREASON\tWAITING\tEXPIRES\tMESSAGE")
			for _, p := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.RunID, p.Agent, p.ID, p.Reason,
					now.Sub(p.SuspendedAt).Round(time.Second), expires(p.ExpiresAt, now), oneLine(p.Message, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's interrupts")
	cmd.Flags().StringVar(&reason, "reason", "", "only interrupts with this reason (tool_call, input_required, ...)")
	cmd.Flags().StringVar(&approver, "approver", "", "only interrupts this approver is named on, or that name nobody")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "only interrupts waiting at least this long")
	return cmd
}

func expires(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	if d := t.Sub(now); d > 0 {
		return "in " + d.Round(time.Second).String()
	}
	return "expired"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func newShow(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run's status, interrupts, decisions and history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			api, closeAPI, err := g.api(ctx)
			if err != nil {
				return err
			}
			defer closeAPI()
			rec, err := api.Run(ctx, args[0])
			if err != nil {
				return err
			}
			// Answers to sensitive interrupts are shown to nobody.
			rec = authz.Redact(rec)
			if g.json {
				return printJSON(cmd.OutOrStdout(), rec)
			}
			printRun(cmd.OutOrStdout(), rec)
			return nil
		},
	}
}

func printRun(w io.Writer, r *subjects.Run) {
	fmt.Fprintf(w, "run      %s\nagent    %s\n", r.RunID, r.Agent)
	if r.ThreadID != "" {
		fmt.Fprintf(w, "thread   %s\n", r.ThreadID)
	}
	fmt.Fprintf(w, "status   %s (pass %d)\n", r.Status, r.Pass)
	if len(r.Result) > 0 {
		fmt.Fprintf(w, "result   %s\n", r.Result)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error    %s\n", r.Error)
	}
	if len(r.Interrupts) > 0 {
		fmt.Fprintln(w, "\ninterrupts:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tPASS\tREASON\tDECISION\tBY\tMESSAGE")
		for _, in := range r.Interrupts {
			decision, by := "waiting", "-"
			if d := in.Decision; d != nil {
				decision, by = string(d.Status), d.Approver
				if len(d.Payload) > 0 {
					decision += " " + oneLine(string(d.Payload), 40)
				}
				if in.AnswerWithheld {
					decision += " (answer withheld: sensitive)"
				}
				if by == "" {
					by = "(anonymous)"
				}
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", in.ID, in.Pass, in.Reason, decision, by, oneLine(in.Message, 50))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w, "\nhistory:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range r.History {
		detail := h.Detail
		if h.InterruptID != "" {
			detail = strings.TrimSpace(h.InterruptID + " " + detail)
		}
		fmt.Fprintf(tw, "  %s\t%s\tpass %d\t%s\n", h.At.Format(time.RFC3339), h.Type, h.Pass, detail)
	}
	_ = tw.Flush()
}
