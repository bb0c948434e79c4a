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

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
)

// runService connects to NATS, provisions with provision when it is set
// (serve; the other roles bind to what `interlock provision` made), starts
// a component with start, serves its metrics and health on
// metricsAddr, and on SIGINT or SIGTERM stops it, letting the work under
// way finish. Once everything listens it calls ready, when set, with the
// metrics URL ("" without metricsAddr).
func runService(ctx context.Context, g *globals, log *slog.Logger, name, url string, cfg jetstream.Config, provision func(context.Context, *jetstream.Client) error, metricsAddr string,
	ready func(metricsURL string) error, start func(client *jetstream.Client, reg *prometheus.Registry) (stop func(), err error)) error {
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
	stopOps, metricsURL, err := startOps(metricsAddr, reg, client, log)
	if err != nil {
		stop()
		return err
	}
	defer stopOps()
	if ready != nil {
		if err := ready(metricsURL); err != nil {
			stop()
			return err
		}
	}
	<-ctx.Done()
	log.Info("shutting down: finishing the work under way")
	stop()
	if err := client.Drain(); err != nil {
		log.Warn("drain", "error", err)
	}
	log.Info("stopped")
	return nil
}

// startOps serves /metrics, /healthz (the process is up) and /readyz (NATS
// answers and the streams are there) on addr, until the returned stop, and
// returns their base URL ("" when addr is).
func startOps(addr string, reg *prometheus.Registry, client *jetstream.Client, log *slog.Logger) (func(), string, error) {
	if addr == "" {
		return func() {}, "", nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", usagef("--metrics-addr %s: %w", addr, err)
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
	}, "http://" + l.Addr().String(), nil
}
