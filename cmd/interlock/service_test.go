package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestStopAllOneDeadline: stopAll stops the parts in the reverse of their
// start, every one within the same context, and reports every error.
func TestStopAllOneDeadline(t *testing.T) {
	t.Parallel()
	var order []string
	var deadlines []time.Time
	errLate := errors.New("late")
	part := func(name string, err error) stopFunc {
		return func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			require.True(t, ok, "%s stops within a deadline", name)
			order = append(order, name)
			deadlines = append(deadlines, d)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := stopAll([]stopFunc{part("coordinator", nil), part("notifier", errLate), part("gateway", nil)})(ctx)
	require.ErrorIs(t, err, errLate)
	assert.Equal(t, []string{"gateway", "notifier", "coordinator"}, order)
	want, _ := ctx.Deadline()
	for _, d := range deadlines {
		assert.Equal(t, want, d, "one deadline for all")
	}
}

// TestRunServiceStopsWithinStopTimeout: on the signal (ctx done) the
// service's parts are stopped within one deadline, StopTimeout from then.
func TestRunServiceStopsWithinStopTimeout(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	g := &globals{natsURL: srv.URL(), timeout: 10 * time.Second, prefix: "interlock"}
	ctx, signal := context.WithCancel(context.Background())
	deadline := make(chan time.Time, 1)
	var signalled time.Time
	err := g.runService(ctx, service{Name: "test", URL: srv.URL(), StopTimeout: 42 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Start: func(*jetstream.Client, *prometheus.Registry) (stopFunc, error) {
			return func(ctx context.Context) error {
				d, _ := ctx.Deadline()
				deadline <- d
				return nil
			}, nil
		},
		Ready: func(string) error { signalled = time.Now(); signal(); return nil }})
	require.NoError(t, err)
	d := <-deadline
	assert.WithinDuration(t, signalled.Add(42*time.Second), d, 5*time.Second, "the stop's deadline is --stop-timeout from the signal")
}

// TestStopTimeoutFlag: every command that runs a service takes
// --stop-timeout (default 30s, in its help), and refuses one that is not
// positive as a usage error.
func TestStopTimeoutFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--data-dir", t.TempDir()},
		{"gateway", "--identities", "none.yaml"},
		{"notifier", "--config", "none.yaml"},
	} {
		r := cli(t, append(args[:1:1], "--help")...)
		assert.Contains(t, r.out, "--stop-timeout duration", args[0])
		assert.Contains(t, r.out, "(default 30s)", args[0])
		r = cli(t, append(args, "--stop-timeout", "0s")...)
		assert.Equal(t, exitUsage, r.code, "%s: %s", args[0], r.err)
		assert.Contains(t, r.err, "--stop-timeout 0s is not positive", args[0])
	}
}
