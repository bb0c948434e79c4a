package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/notifier"
)

func newProvision(g *globals) *cobra.Command {
	var (
		replicas int
		agents   []string
		notify   string
	)
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or raise Interlock's streams, buckets and consumers (needs admin rights)",
		Long: `provision creates what every Interlock role works on: the streams, the KV
buckets, the durable consumers of the agents named with --agent and of the
sinks in --notifier-config, and the gateway's buckets. Existing ones are kept
and only ever raised (replicas, retention), never lowered. The decisions and
events streams deny deletes and purges. Run it with the admin (or
coordinator) user before starting agents, notifiers and gateways: they have
no right to create streams or consumers and fail until these exist.
serve provisions too, so a single-process setup needs no separate step.
Run it again after adding an agent or a notifier sink.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var ncfg *notifier.Config
			if notify != "" {
				var err error
				if ncfg, err = notifier.LoadConfig(notify); err != nil {
					return usage(err)
				}
			}
			client, err := g.dialConfig(ctx, g.natsURL, "interlock-provision", jetstream.Config{Replicas: replicas})
			if err != nil {
				return err
			}
			defer client.Close()
			ctx, cancel := context.WithTimeout(ctx, g.timeout+30*time.Second)
			defer cancel()
			sinks, err := provision(ctx, client, agents, ncfg)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), map[string]any{"provisioned": true, "replicas": client.Config().Replicas,
					"agents": agents, "notifierSinks": sinks})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "provisioned: streams and buckets (replicas at least %d), %d agent consumer(s), %d notifier sink(s)\n",
				client.Config().Replicas, len(agents), sinks)
			return nil
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of new streams and buckets, and the least existing ones are raised to (3 on a NATS cluster); never lowers")
	cmd.Flags().StringSliceVar(&agents, "agent", nil, "create the work consumer of this agent (repeat, or comma-separate)")
	cmd.Flags().StringVar(&notify, "notifier-config", "", "create the consumers of this notifier configuration's sinks")
	return cmd
}

// provision creates or raises everything the roles bind to: streams and
// buckets, the gateway's buckets, the work consumers of agents and the sink
// consumers of ncfg (when set). It returns the number of sinks.
func provision(ctx context.Context, client *jetstream.Client, agents []string, ncfg *notifier.Config) (int, error) {
	if err := client.Provision(ctx); err != nil {
		return 0, err
	}
	if err := gateway.Provision(ctx, client); err != nil {
		return 0, err
	}
	w := processor.NewWorker(client, processor.WorkerConfig{})
	for _, a := range agents {
		if err := w.Register(a, nil); err != nil {
			return 0, usage(err)
		}
	}
	if err := w.Provision(ctx); err != nil {
		return 0, err
	}
	if ncfg == nil {
		return 0, nil
	}
	n, err := notifier.New(client, ncfg, notifier.Options{})
	if err != nil {
		return 0, usage(err)
	}
	return len(ncfg.Sinks), n.Provision(ctx)
}
