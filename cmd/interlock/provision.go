package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/mcpbridge"
	"github.com/interlockhq/interlock/processor/notifier"
)

func newProvision(g *globals) *cobra.Command {
	var (
		replicas       int
		agents         []string
		pendingStorage string
		recordsStorage string
		notify         string
		ackWait        time.Duration
		emb            embeddedFlags
	)
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or raise Interlock's streams, buckets and consumers (needs admin rights)",
		Long: `provision creates what every Interlock role works on: the streams, the KV
buckets, the coordinator's durable consumers, those of the agents named with
--agent and of the sinks in --notifier-config, and the gateway's buckets and
consumer (gateway_slack: the Slack messages to update once decided).
Existing ones are kept and only ever raised (replicas, retention), never
lowered. The decisions and events streams deny deletes and purges. Run it
with the admin user before starting the coordinator, agents, notifiers and
gateways: none of them may create streams or consumers, and they fail until
these exist. Only serve on an open server (no NATS user: the local default)
provisions itself. Run it again after adding an agent or a notifier sink.

With --data-dir (or --nats-config) and no --nats-url, provision starts an
embedded server on that data directory, provisions it and stops: the
one-shot step before serve's embedded server (deploy/systemd).`,
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
			url := g.natsURL
			if url == "" && (changed(cmd, "data-dir") || changed(cmd, "nats-config")) {
				log, err := g.logger(cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				srv, err := emb.start(log)
				if err != nil {
					return err
				}
				defer srv.Shutdown()
				url = srv.URL()
			}
			storage, err := storageFlag("pending-storage", pendingStorage)
			if err != nil {
				return err
			}
			records, err := storageFlag("records-storage", recordsStorage)
			if err != nil {
				return err
			}
			if err := checkRecordsReplicas(records, replicas); err != nil {
				return err
			}
			return g.withClient(ctx, url, "interlock-provision", jetstream.Config{Replicas: replicas, PendingStorage: storage, RecordsStorage: records}, func(client *jetstream.Client) error {
				ctx, cancel := context.WithTimeout(ctx, g.timeout+30*time.Second)
				defer cancel()
				// Progress on stderr, for people: on a cluster still
				// electing a step can take seconds.
				sinks, err := provision(ctx, client, agents, ncfg, coordinator.Config{AckWait: ackWait}, func(step string, took time.Duration) {
					fmt.Fprintf(cmd.ErrOrStderr(), "provision: %s (%s)\n", step, took.Round(time.Millisecond))
				})
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
			})
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of new streams and buckets, and the least existing ones are raised to (3 on a NATS cluster); never lowers")
	cmd.Flags().StringVar(&pendingStorage, "pending-storage", "auto", "where a new pending index keeps its entries: memory (no fsyncs; "+
		"rebuilt from the run records after a restart), file, or auto: memory on a NATS cluster, file on a single server "+
		"(where a restart removes a memory bucket, and only this command creates it again under per-role permissions)")
	cmd.Flags().StringVar(&recordsStorage, "records-storage", "file", recordsStorageHelp)
	cmd.Flags().StringSliceVar(&agents, "agent", nil, "create the work consumer of this agent (repeat, or comma-separate)")
	cmd.Flags().StringVar(&notify, "notifier-config", "", "create the consumers of this notifier configuration's sinks")
	cmd.Flags().DurationVar(&ackWait, "ack-wait", 0, "the coordinator's consumers: how long a message a crashed coordinator held waits before another takes it "+
		"(serve --ack-wait on an open server; default: keep theirs, 30s for new ones)")
	emb.register(cmd, "interlock-data", "127.0.0.1:0")
	return cmd
}

// provision creates or raises everything the roles bind to: streams and
// buckets, the coordinator's consumers (as co describes), the gateway's
// buckets, the work consumers of agents and the sink consumers of ncfg
// (when set). It returns the number of sinks. done, when set, is told each
// step as it ends and how long it took (on a cluster still electing, a
// step waits for its leaders).
func provision(ctx context.Context, client *jetstream.Client, agents []string, ncfg *notifier.Config, co coordinator.Config,
	done func(step string, took time.Duration)) (int, error) {
	w := processor.NewWorker(client, processor.WorkerConfig{})
	for _, a := range agents {
		if err := w.Register(a, nil); err != nil {
			return 0, usage(err)
		}
	}
	var n *notifier.Notifier
	if ncfg != nil {
		var err error
		if n, err = notifier.New(client, ncfg, notifier.Options{}); err != nil {
			return 0, usage(err)
		}
	}
	steps := []provisionStep{
		{"streams and buckets", client.Provision},
		{"the coordinator's consumers", func(ctx context.Context) error { return coordinator.Provision(ctx, client, co) }},
		{"the gateway's buckets and consumer", func(ctx context.Context) error { return gateway.Provision(ctx, client) }},
		{"the MCP proxy's bucket", func(ctx context.Context) error { return mcpbridge.Provision(ctx, client) }},
		{"the OpenAI Agents adapter's bucket", func(ctx context.Context) error {
			_, err := client.Bucket(ctx, jetstream.OpenAIAgentsBucket, "Interlock OpenAI Agents adapter: run states waiting on approvals", 0)
			return err
		}},
	}
	if len(agents) > 0 {
		steps = append(steps, provisionStep{fmt.Sprintf("%d agent consumer(s)", len(agents)), w.Provision})
	}
	if n != nil {
		steps = append(steps, provisionStep{fmt.Sprintf("%d notifier sink consumer(s)", len(ncfg.Sinks)), n.Provision})
	}
	for _, st := range steps {
		began := time.Now()
		if err := st.run(ctx); err != nil {
			return 0, err
		}
		if done != nil {
			done(st.name, time.Since(began))
		}
	}
	if ncfg == nil {
		return 0, nil
	}
	return len(ncfg.Sinks), nil
}

// provisionStep is one step of provision, named for its progress line.
type provisionStep struct {
	name string
	run  func(context.Context) error
}

// storageFlag is the value v of a storage flag (--pending-storage,
// --records-storage) as a storage.
func storageFlag(flag, v string) (jetstream.Storage, error) {
	switch s := jetstream.Storage(v); s {
	case jetstream.MemoryStorage, jetstream.FileStorage:
		return s, nil
	case jetstream.AutoStorage:
		if flag != "records-storage" {
			return s, nil
		}
		return "", usagef("--records-storage is memory or file, not auto: records are kept in memory only where asked for, on one replica")
	}
	if flag == "records-storage" {
		return "", usagef("--%s %q is not memory or file", flag, v)
	}
	return "", usagef("--%s %q is not memory, file or auto", flag, v)
}

// checkRecordsReplicas refuses --records-storage memory with --replicas
// above one before anything is started or written
// (jetstream.ErrReplicatedMemoryRecords).
func checkRecordsReplicas(records jetstream.Storage, replicas int) error {
	if jetstream.RecordsReplicasRefused(records == jetstream.MemoryStorage, replicas) {
		return usagef("--records-storage memory needs one replica, not --replicas %d: %v (on a cluster, keep records on disk)",
			replicas, jetstream.ErrReplicatedMemoryRecords)
	}
	return nil
}

// recordsStorageHelp is what --records-storage says, in provision and serve.
const recordsStorageHelp = "where a new runs bucket keeps the run records: file, memory (no fsyncs; the coordinator " +
	"carries each record sealed in the audit trail and puts the records back from it after a restart, re-creating the " +
	"bucket when it provisions; one replica only, so not with --replicas 3)"
