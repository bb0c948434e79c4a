package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
)

func TestServeWithNotifier(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer hook.Close()
	cfg := filepath.Join(t.TempDir(), "notifier.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sinks:
  ops: {type: webhook, url: `+hook.URL+`}
routes:
  - {match: 'agent == "refunds"', sinks: [ops]}
`), 0o600))
	srv := serve(t, t.TempDir(), "--notifier-config", cfg, "--metrics-addr", "127.0.0.1:0")
	url, stop := srv.URL, srv.Stop
	metrics := srv.addr("metrics and health")
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "refunds").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("refunds", demoAgent(func(string, ...any) {})))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	run, err := processor.NewClient(conn).Start(ctx, "refunds", refundRequest{Order: "A-9", Amount: 5, Customer: "Kim"})
	require.NoError(t, err)
	select {
	case b := <-got:
		assert.Contains(t, string(b), run)
		assert.Contains(t, string(b), "Refund 5.00 to Kim")
	case <-time.After(15 * time.Second):
		t.Fatal("no notification")
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metrics + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The notifier and the coordinator read the suspension each on its own
	// consumer: the notification may go out before the coordinator has
	// counted the suspension (asserting that it had was this test's
	// flakiness under load). Each metric is awaited.
	for _, want := range []string{
		`interlock_notifications_total{outcome="delivered",sink="ops"} 1`,
		`interlock_pass_outcomes_total{kind="suspended"} 1`,
		`interlock_coordinator_handle_seconds_bucket{input="outcome"`,
	} {
		require.Eventually(t, func() bool {
			_, body := get("/metrics")
			return strings.Contains(body, want)
		}, 10*time.Second, 20*time.Millisecond, want)
	}
	status, _ := get("/healthz")
	assert.Equal(t, 200, status)
	status, _ = get("/readyz")
	assert.Equal(t, 200, status)
	_ = w.Stop(context.Background())
	assert.Equal(t, 0, stop())
}

func TestNotifierConfigErrors(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("sinks:\n  a: {type: pager}\nroutes: []\n"), 0o600))
	r := cli(t, "notifier", "--config", cfg)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, cfg+`:2: sink "a": type "pager"`)
	r = cli(t, "serve", "--notifier-config", cfg, "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code, "checked before anything starts")
	r = cli(t, "notifier")
	assert.Equal(t, exitUsage, r.code)
}
