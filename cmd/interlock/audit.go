package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/subjects"
)

func newHistory(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history RUN",
		Short: "Show a run's audit trail: every transition and every decision attempt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			api, closeAPI, err := g.api(ctx)
			if err != nil {
				return err
			}
			defer closeAPI()
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
				fmt.Fprintf(cmd.OutOrStdout(), "no events for run %s\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WHEN\tEVENT\tPASS\tWHO\tDETAIL")
			for _, ev := range evs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", ev.At.Format(time.RFC3339), ev.Type, ev.Pass, who(ev), oneLine(eventDetail(ev), 80))
			}
			return tw.Flush()
		},
	}
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
			client, err := g.dial(ctx, g.natsURL, "interlock-watch")
			if err != nil {
				return err
			}
			defer client.Close()
			out := cmd.OutOrStdout()
			lines := make(chan subjects.Event, 256)
			sub, err := client.Subscribe(client.Namespace().All(subjects.KindEvents), func(_ string, data []byte) {
				var ev subjects.Event
				if json.Unmarshal(data, &ev) == nil {
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
			if !g.json {
				fmt.Fprintln(out, "watching events (Ctrl-C to stop)")
			}
			for {
				select {
				case <-ctx.Done():
					return nil
				case ev := <-lines:
					printWatched(out, g.json, ev)
				}
			}
		},
	}
}

func printWatched(w io.Writer, asJSON bool, ev subjects.Event) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(ev)
		return
	}
	fmt.Fprintf(w, "%s  %-18s run %s  %s\n", ev.At.Format("15:04:05"), ev.Type, ev.RunID, oneLine(eventDetail(ev), 90))
}
