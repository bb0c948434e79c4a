package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/notifier"
)

func newNotifier(g *globals) *cobra.Command {
	var config, metricsAddr string
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
			ctx := cmd.Context()
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := notifier.LoadConfig(config)
			if err != nil {
				return usageError{err}
			}
			return runService(ctx, g, log, "interlock-notifier", g.natsURL, jetstream.Config{}, nil, metricsAddr,
				func(client *jetstream.Client, reg *prometheus.Registry) (func(), error) {
					stop, err := startNotifier(ctx, client, cfg, log, reg)
					if err == nil {
						log.Info("notifier running", "config", config, "sinks", len(cfg.Sinks), "routes", len(cfg.Routes))
					}
					return stop, err
				})
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "notifier configuration file (YAML)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// runService connects to NATS, provisions with provision when it is set
// (serve; the other roles bind to what `interlock provision` made), starts
// a component with start, serves its metrics and health on
// metricsAddr, and on SIGINT or SIGTERM stops it, letting the work under
// way finish.
func runService(ctx context.Context, g *globals, log *slog.Logger, name, url string, cfg jetstream.Config, provision func(context.Context, *jetstream.Client) error, metricsAddr string,
	start func(client *jetstream.Client, reg *prometheus.Registry) (stop func(), err error)) error {
	client, err := g.dialConfig(ctx, url, name, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	if provision != nil {
		if err := provision(ctx, client); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	stop, err := start(client, reg)
	if err != nil {
		return err
	}
	stopOps, err := startOps(metricsAddr, reg, client, log)
	if err != nil {
		stop()
		return err
	}
	defer stopOps()
	<-ctx.Done()
	log.Info("shutting down: finishing the work under way")
	stop()
	if err := client.Drain(); err != nil {
		log.Warn("drain", "error", err)
	}
	log.Info("stopped")
	return nil
}

// startNotifier runs a notifier until the returned stop is called.
func startNotifier(ctx context.Context, client *jetstream.Client, cfg *notifier.Config, log *slog.Logger, reg *prometheus.Registry) (func(), error) {
	n, err := notifier.New(client, cfg, notifier.Options{Logger: log, Registry: reg})
	if err != nil {
		return nil, usageError{err}
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	return n.Stop, nil
}

// startOps serves /metrics, /healthz (the process is up) and /readyz (NATS
// answers and the streams are there) on addr, until the returned stop.
func startOps(addr string, reg *prometheus.Registry, client *jetstream.Client, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError{fmt.Errorf("--metrics-addr %s: %w", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := client.MsgCount(ctx, jetstream.StreamRuns); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		// Detail for operators: work no worker consumes (its runs stay in
		// resuming). This process is ready all the same.
		work, err := processor.NewClient(client).WorkBacklog(ctx)
		if err != nil {
			fmt.Fprintf(w, "work backlog unknown: %v\n", err)
		}
		for _, a := range work {
			if !a.Served {
				fmt.Fprintf(w, "unserved: agent %s has %d work items waiting and no worker consuming them\n", a.Agent, a.Waiting)
			}
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	log.Info("metrics and health", "url", "http://"+l.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
