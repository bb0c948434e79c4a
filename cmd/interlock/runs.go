package main

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/processor"
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
					return usageError{fmt.Errorf("--status %q: use one of %s", s, strings.Join(runStatuses, ", "))}
				}
			}
			ctx := cmd.Context()
			api, closeAPI, err := g.api(ctx)
			if err != nil {
				return err
			}
			defer closeAPI()
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
				return withCode(exitNotFound, errors.New("no run matches"))
			}
			return nil
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", r.RunID, r.Agent, r.Status, r.Pass,
				now.Sub(r.UpdatedAt).Round(time.Second), r.Waiting, cmp.Or(r.Stuck, "-"))
		}
		_ = tw.Flush()
	}
	for _, a := range out.Work {
		if !a.Served {
			fmt.Fprintf(w, "agent %s: %d work items wait and no worker consumes them; start a worker for %s\n", a.Agent, a.Waiting, a.Agent)
		}
	}
}
