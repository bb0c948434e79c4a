package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// runsOut is what `interlock runs --json` prints: the runs and, for the
// agents with work waiting, whether a worker consumes it.
type runsOut struct {
	Runs []runLine             `json:"runs"`
	Work []processor.AgentWork `json:"work"`
}

type runLine struct {
	RunID     string             `json:"runId"`
	Agent     string             `json:"agent"`
	Status    subjects.RunStatus `json:"status"`
	Pass      int                `json:"pass"`
	UpdatedAt time.Time          `json:"updatedAt"`
	// Waiting counts the interrupts waiting for a decision.
	Waiting int `json:"waiting"`
	// Stuck says why the run does not move, when it is resuming and no
	// worker consumes its agent's work.
	Stuck string `json:"stuck,omitempty"`
}

var runStatuses = []string{string(subjects.RunSuspended), string(subjects.RunResuming), string(subjects.RunCompleted),
	string(subjects.RunFailed)}

func newRuns(g *globals) *cobra.Command {
	var statuses []string
	var agent string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List runs by status, agent and age, and say which are stuck",
		Long: `runs lists run records, least recently changed first, with the work waiting
for each agent. A run resuming while no worker consumes its agent's work is
marked stuck. Exit codes: 0 one or more runs listed, 4 none matched (so
"interlock runs --status resuming --older-than 10m" can drive an alert),
1 NATS unreachable, 2 bad flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range statuses {
				if !slices.Contains(runStatuses, s) {
					return usagef("--status %q: use one of %s", s, strings.Join(runStatuses, ", "))
				}
			}
			ctx := cmd.Context()
			return g.withAPI(ctx, func(api *processor.Client) error {
				all, err := api.Runs(ctx)
				if err != nil {
					return err
				}
				work, err := api.WorkBacklog(ctx)
				if err != nil {
					return err
				}
				unserved := map[string]uint64{}
				for _, w := range work {
					if !w.Served {
						unserved[w.Agent] = w.Waiting
					}
				}
				now := time.Now()
				out := runsOut{Runs: []runLine{}, Work: work}
				if out.Work == nil {
					out.Work = []processor.AgentWork{}
				}
				for _, rec := range all {
					if len(statuses) > 0 && !slices.Contains(statuses, string(rec.Status)) ||
						agent != "" && rec.Agent != agent || olderThan > 0 && now.Sub(rec.UpdatedAt) < olderThan {
						continue
					}
					line := runLine{RunID: rec.RunID, Agent: rec.Agent, Status: rec.Status, Pass: rec.Pass,
						UpdatedAt: rec.UpdatedAt, Waiting: len(rec.Pending())}
					if n, ok := unserved[rec.Agent]; ok && rec.Status == subjects.RunResuming {
						line.Stuck = fmt.Sprintf("no worker consumes agent %s's work (%d items waiting)", rec.Agent, n)
					}
					out.Runs = append(out.Runs, line)
				}
				if g.json {
					if err := printJSON(cmd.OutOrStdout(), out); err != nil {
						return err
					}
				} else {
					printRuns(cmd, out, now)
				}
				if len(out.Runs) == 0 {
					return errNoMatch
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&statuses, "status", nil, "only runs in these statuses: "+strings.Join(runStatuses, ", "))
	f.StringVar(&agent, "agent", "", "only this agent's runs")
	f.DurationVar(&olderThan, "older-than", 0, "only runs unchanged for at least this long, e.g. 10m")
	return cmd
}

func printRuns(cmd *cobra.Command, out runsOut, now time.Time) {
	w := cmd.OutOrStdout()
	if len(out.Runs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tPASS\tUNCHANGED FOR\tWAITING\tNOTE")
		for _, r := range out.Runs {
			say(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", r.RunID, r.Agent, r.Status, r.Pass,
				now.Sub(r.UpdatedAt).Round(time.Second), r.Waiting, cmp.Or(r.Stuck, "-"))
		}
		_ = tw.Flush()
	}
	for _, a := range out.Work {
		if !a.Served {
			say(w, "agent %s: %d work items wait and no worker consumes them; start a worker for %s\n", a.Agent, a.Waiting, a.Agent)
		}
	}
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
			return g.withAPI(ctx, func(api *processor.Client) error {
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
					say(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.RunID, p.Agent, p.ID, p.Reason,
						now.Sub(p.SuspendedAt).Round(time.Second), expires(p.ExpiresAt, now), oneLine(p.Message, 60))
				}
				return tw.Flush()
			})
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

// oneLine is s for one cell of a table: its newlines and tabs as spaces,
// runs of spaces as one, anything else that could steer the terminal
// escaped (printable), at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(printable(strings.NewReplacer("\n", " ", "\t", " ").Replace(s))), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
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
			return g.withAPI(ctx, func(api *processor.Client) error {
				rec, err := api.Run(ctx, args[0])
				if err != nil {
					return err
				}
				// The CLI reads with NATS credentials that read every record (an
				// auditor's): authz.View shows it all but the answers to
				// sensitive interrupts, which are shown to nobody.
				rec, _ = authz.View(authz.Principal{Auditor: true}, rec, nil)
				if g.json {
					return printJSON(cmd.OutOrStdout(), rec)
				}
				// The run's history is its audit trail: the record keeps none.
				evs, err := api.Events(ctx, args[0])
				if err != nil {
					return err
				}
				printRun(cmd.OutOrStdout(), rec)
				fmt.Fprintln(cmd.OutOrStdout(), "\nhistory:")
				return printTrail(cmd.OutOrStdout(), evs)
			})
		},
	}
}

func printRun(w io.Writer, r *subjects.Run) {
	say(w, "run      %s\nagent    %s\n", r.RunID, r.Agent)
	if r.ThreadID != "" {
		say(w, "thread   %s\n", r.ThreadID)
	}
	if r.Requester != "" {
		say(w, "started  by %s\n", r.Requester)
	}
	say(w, "status   %s (pass %d)\n", r.Status, r.Pass)
	if len(r.Result) > 0 {
		say(w, "result   %s\n", r.Result)
	}
	if r.Error != "" {
		say(w, "error    %s\n", r.Error)
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
			say(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", in.ID, in.Pass, in.Reason, decision, by, oneLine(in.Message, 50))
		}
		_ = tw.Flush()
		printPolicies(w, r)
	}
}

func newHistory(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history RUN",
		Short: "Show a run's audit trail: every transition and every decision attempt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return g.withAPI(ctx, func(api *processor.Client) error {
				evs, err := api.Events(ctx, args[0])
				if err != nil {
					return err
				}
				if g.json {
					if evs == nil {
						evs = []subjects.Event{}
					}
					return printJSON(cmd.OutOrStdout(), evs)
				}
				if len(evs) == 0 {
					say(cmd.OutOrStdout(), "no events for run %s\n", args[0])
					return nil
				}
				return printTrail(cmd.OutOrStdout(), evs)
			})
		},
	}
}

// trailDetail is how much of an event's detail `history` and `show`
// print (a suspension's deadline policy fits); --json has all of it.
const trailDetail = 160

// printTrail prints a run's events as a table, oldest first, each detail
// cut to trailDetail.
func printTrail(w io.Writer, evs []subjects.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tEVENT\tPASS\tWHO\tDETAIL")
	for _, ev := range evs {
		say(tw, "%s\t%s\t%d\t%s\t%s\n", ev.At.Format(time.RFC3339), ev.Type, ev.Pass, who(ev), oneLine(eventDetail(ev), trailDetail))
	}
	return tw.Flush()
}

func who(ev subjects.Event) string {
	switch {
	case ev.Sink != "":
		return "notifier " + ev.Sink
	case ev.Verdict != nil:
		who := ev.Verdict.Approver
		if who == "" {
			who = "anonymous"
		}
		if ev.Verdict.Via != "" {
			who += " via " + ev.Verdict.Via
		}
		return who
	}
	return "-"
}

func eventDetail(ev subjects.Event) string {
	parts := []string{}
	if v := ev.Verdict; v != nil {
		parts = append(parts, "interrupt "+v.InterruptID, string(v.Outcome))
		if v.Code != "" {
			parts = append(parts, string(v.Code)+": "+v.Detail)
		}
	} else if len(ev.InterruptIDs) > 0 {
		parts = append(parts, strings.Join(ev.InterruptIDs, ","))
	}
	if ev.Verdict == nil && ev.Detail != "" {
		parts = append(parts, ev.Detail)
	}
	return strings.Join(parts, " ")
}

func newWatch(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "watch",
		Short: "Follow suspensions, decisions and every other event as they happen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return g.withClient(ctx, g.natsURL, "interlock-watch", jetstream.Config{}, func(client *jetstream.Client) error {
				out := cmd.OutOrStdout()
				lines := make(chan subjects.Event, 256)
				sub, err := client.Subscribe(client.Namespace().All(subjects.KindEvents), func(subject string, data []byte) {
					if ev, err := subjects.StoredEvent(client.Namespace(), subject, data); err == nil {
						select {
						case lines <- ev:
						default: // a slow terminal drops lines rather than block NATS
						}
					}
				})
				if err != nil {
					return err
				}
				defer sub.Unsubscribe()
				// On stderr, with --json too: it says when the feed is
				// followed, and stdout holds events only.
				fmt.Fprintln(cmd.ErrOrStderr(), "watching events (Ctrl-C to stop)")
				for {
					select {
					case <-ctx.Done():
						return nil
					case ev := <-lines:
						printWatched(out, g.json, ev)
					}
				}
			})
		},
	}
}

func printWatched(w io.Writer, asJSON bool, ev subjects.Event) {
	if asJSON {
		if b, err := json.Marshal(ev); err == nil {
			_, _ = w.Write(append(jsonEscapeSteering(b), '\n'))
		}
		return
	}
	say(w, "%s  %-18s run %s  %s\n", ev.At.Format("15:04:05"), ev.Type, ev.RunID, oneLine(eventDetail(ev), 90))
}

// printPolicies shows, for each interrupt with a call or a policy
// (protocol version 2), the call and its digest, what the votes are and
// what is still needed, and every vote: who, when, what.
func printPolicies(w io.Writer, r *subjects.Run) {
	var tallies rules.Set
	for i, in := range r.Interrupts {
		if in.Call == nil && in.Policy == nil {
			continue
		}
		say(w, "\n%s:\n", in.ID)
		if c := in.Call; c != nil {
			say(w, "  call     %s %s\n  digest   %s\n", c.Tool, oneLine(string(c.Arguments), 80), c.Digest)
		}
		if in.Policy == nil {
			continue
		}
		if len(in.Policy.Rules) > 0 {
			say(w, "  rules    %s\n", strings.Join(in.Policy.Rules, ", "))
		}
		t := tallies.Tally(r, i, subjects.Decision{Status: subjects.StatusWithdrawn})
		if in.Decision == nil {
			say(w, "  needs    %s\n", t.Remaining())
		} else {
			say(w, "  decided  %s (%s)\n", in.Decision.Status, t.Remaining())
		}
		votes := in.Votes
		if in.Decision != nil {
			votes = in.Decision.Votes
		}
		for _, v := range votes {
			what := string(v.Status)
			if len(v.Payload) > 0 {
				what += " " + oneLine(string(v.Payload), 40)
			}
			if len(v.Arguments) > 0 {
				what += " with edited arguments " + oneLine(string(v.Arguments), 40)
			}
			if v.CallDigest != "" && (in.Call == nil || v.CallDigest != in.Call.Digest) {
				what += " (call " + v.CallDigest[:12] + ")"
			}
			say(w, "  vote     %s  %s  %s\n", v.At.Format(time.RFC3339), v.Approver, what)
		}
	}
}
