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
)

// service is one long-running role of the command (serve, gateway,
// notifier), as runService runs it.
type service struct {
	// Name is the NATS connection's name; URL where it connects (empty:
	// the default local server), with the stream settings NATS.
	Name string
	URL  string
	NATS jetstream.Config
	// Provision, when set, provisions through the connection before Start
	// (serve; the other roles bind to what `interlock provision` made).
	Provision func(context.Context, *jetstream.Client) error
	// Start starts the role's components on the connection, their metrics
	// in reg, and returns what stops them: stop waits for the work under
	// way while its context lasts, then cancels what is left.
	Start func(client *jetstream.Client, reg *prometheus.Registry) (stop stopFunc, err error)
	// StopTimeout bounds the whole shutdown after SIGINT or SIGTERM
	// (--stop-timeout); default DefaultStopTimeout.
	StopTimeout time.Duration
	// MetricsAddr, when set, is where /metrics, /healthz and /readyz are
	// served.
	MetricsAddr string
	Log         *slog.Logger
	// Ready, when set, is called once everything listens, with the
	// metrics URL ("" without MetricsAddr).
	Ready func(metricsURL string) error
}

// stopFunc stops a role's components: it waits for the work under way while
// ctx lasts, then cancels what is left and returns an error wrapping ctx's.
type stopFunc func(ctx context.Context) error

// DefaultStopTimeout is how long a service lets the work under way finish
// on SIGINT or SIGTERM before it cancels the rest: what a handler has not
// acked by then is redelivered to another process.
const DefaultStopTimeout = 30 * time.Second

// stopTimeoutFlag registers --stop-timeout, the one deadline of a service's
// shutdown, into d.
func stopTimeoutFlag(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "stop-timeout", DefaultStopTimeout, "on SIGINT or SIGTERM, how long the work under way may finish "+
		"before it is cancelled: one deadline for every part of the process; what is cancelled is redelivered to another process")
}

// checkStopTimeout refuses a --stop-timeout that is not positive.
func checkStopTimeout(d time.Duration) error {
	if d <= 0 {
		return usagef("--stop-timeout %s is not positive", d)
	}
	return nil
}

// stopAll is one stopFunc stopping each of stops in reverse order (the last
// started first), all within one context.
func stopAll(stops []stopFunc) stopFunc {
	return func(ctx context.Context) error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i](ctx))
		}
		return errors.Join(errs...)
	}
}

// runService connects to NATS, provisions when s says so, starts s, serves
// its metrics and health, and on SIGINT or SIGTERM (ctx done) stops it,
// letting the work under way finish within one deadline (s.StopTimeout).
func (g *globals) runService(ctx context.Context, s service) error {
	return g.withClient(ctx, s.URL, s.Name, s.NATS, func(client *jetstream.Client) error {
		if s.Provision != nil {
			if err := s.Provision(ctx, client); err != nil {
				return err
			}
		}
		reg := prometheus.NewRegistry()
		stop, err := s.Start(client, reg)
		if err != nil {
			return err
		}
		stopOps, metricsURL, err := startOps(s.MetricsAddr, reg, client, s.Log)
		if err != nil {
			_ = stop(context.Background())
			return err
		}
		defer stopOps()
		if s.Ready != nil {
			if err := s.Ready(metricsURL); err != nil {
				_ = stop(context.Background())
				return err
			}
		}
		<-ctx.Done()
		timeout := s.StopTimeout
		if timeout <= 0 {
			timeout = DefaultStopTimeout
		}
		s.Log.Info("shutting down: finishing the work under way", "timeout", timeout)
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := stop(sctx); err != nil {
			s.Log.Warn("stopped before the work under way finished; it will be redelivered", "error", err)
		}
		if err := client.Drain(); err != nil {
			s.Log.Warn("drain", "error", err)
		}
		s.Log.Info("stopped")
		return nil
	})
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
