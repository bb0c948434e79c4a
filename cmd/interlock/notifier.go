package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/notifier"
)

func newNotifier(g *globals) *cobra.Command {
	var config, metricsAddr string
	var stopTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "notifier --config FILE",
		Short: "Fan suspensions out to webhooks, Slack, e-mail, logs and NATS subjects",
		Long: `notifier consumes the suspension feed with one durable consumer per sink and
tells the right people, once, that an agent is blocked and how to decide.
Several notifier processes with the same configuration share the work.
The configuration is checked at start-up; a mistake is reported with its file
and line, and the command exits 2. See docs/notifiers.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkStopTimeout(stopTimeout); err != nil {
				return err
			}
			ctx := cmd.Context()
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := notifier.LoadConfig(config)
			if err != nil {
				return usage(err)
			}
			return g.runService(ctx, service{Name: "interlock-notifier", URL: g.natsURL, MetricsAddr: metricsAddr, Log: log, StopTimeout: stopTimeout,
				Start: func(client *jetstream.Client, reg *prometheus.Registry) (stopFunc, error) {
					stop, err := startNotifier(ctx, client, cfg, log, reg)
					if err == nil {
						log.Info("notifier running", "config", config, "sinks", len(cfg.Sinks), "routes", len(cfg.Routes))
					}
					return stop, err
				}})
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "notifier configuration file (YAML)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	stopTimeoutFlag(cmd, &stopTimeout)
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// startNotifier runs a notifier until the returned stop is called.
func startNotifier(ctx context.Context, client *jetstream.Client, cfg *notifier.Config, log *slog.Logger, reg *prometheus.Registry) (stopFunc, error) {
	n, err := notifier.New(client, cfg, notifier.Options{Logger: log, Registry: reg})
	if err != nil {
		return nil, usage(err)
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n.Stop, nil
}
