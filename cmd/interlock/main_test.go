package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) {
	jstest.RunNode() // when this binary is started as a cluster node
	goleak.VerifyTestMain(m)
}

type result struct {
	out, err string
	code     int
}

func cli(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serve runs `interlock serve` on dir until the returned stop is called,
// which returns serve's exit code.
func serve(t *testing.T, dir string, port int, extra ...string) (url string, stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	errOut := &syncbuf.Buffer{}
	go func() {
		args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:" + strconv.Itoa(port),
			"--log-level", "info"}, extra...)
		done <- run(ctx, args, &bytes.Buffer{}, errOut)
	}()
	url = "nats://127.0.0.1:" + strconv.Itoa(port)
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "coordinator running") },
		15*time.Second, 20*time.Millisecond, "serve did not come up: %s", errOut)
	return url, func() int {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Logf("serve: %s", errOut)
			}
			return code
		case <-time.After(15 * time.Second):
			t.Fatal("serve did not stop on cancel")
			return -1
		}
	}
}

func TestServeApproveShowPending(t *testing.T) {
	dir, port := t.TempDir(), freePort(t)
	url, stop := serve(t, dir, port, "--default-timeout", "1h", "--remind-before", "30m")

	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "refunds").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("refunds", demoAgent(func(string, ...any) {})))
	require.NoError(t, w.Start(ctx))
	api := processor.NewClient(conn)
	run, err := api.Start(ctx, "refunds", refundRequest{Order: "A-7", Amount: 30, Customer: "Lin"})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = api.Wait(wctx, run, processor.Suspended)
	require.NoError(t, err)

	// The pending index is written just after the record.
	var pending []processor.PendingInterrupt
	var r result
	require.Eventually(t, func() bool {
		r = cli(t, "pending", "--nats-url", url, "--json")
		require.Equal(t, 0, r.code, r.err)
		require.NoError(t, json.Unmarshal([]byte(r.out), &pending))
		return len(pending) == 1
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, run, pending[0].RunID)
	r = cli(t, "pending", "--nats-url", url)
	assert.Contains(t, r.out, pending[0].ID)
	assert.Contains(t, r.out, "Refund 30.00 to Lin")
	assert.Regexp(t, `in (59m\d+s|1h0m0s)`, r.out, "the deadline and the time left")
	require.NotNil(t, pending[0].ExpiresAt)

	// A rejected attempt does not burn its --decision-id: the corrected one
	// below reuses it and is accepted.
	r = cli(t, "approve", "--nats-url", url, run, "--payload", `{"amount": 1000}`, "--approver", "ada", "--decision-id", "cli-1")
	assert.Equal(t, exitRejected, r.code)
	assert.Contains(t, r.out, "rejected (schema_mismatch)")

	r = cli(t, "approve", "--nats-url", url, run, "--payload", `{"amount":`)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "not valid JSON")

	r = cli(t, "approve", "--nats-url", url, run, "--payload", `{"amount": 1}`, "--edit", `{"amount": 2}`)
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "approve", "--nats-url", url, run, "--edit", `[1]`)
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "approve", "--nats-url", url, run, "--edit", `{"amount": 12}`, "--approver", "ada", "--json",
		"--decision-id", "cli-1")
	require.Equal(t, 0, r.code, r.err)
	var v subjects.Verdict
	require.NoError(t, json.Unmarshal([]byte(r.out), &v))
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	assert.True(t, v.Replay)

	_, err = api.Wait(wctx, run, processor.Finished)
	require.NoError(t, err)
	r = cli(t, "show", "--nats-url", url, run, "--json")
	require.Equal(t, 0, r.code, r.err)
	var rec subjects.Run
	require.NoError(t, json.Unmarshal([]byte(r.out), &rec))
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `{"refunded":true,"amount":12,"approver":"ada"}`, string(rec.Result))

	r = cli(t, "deny", "--nats-url", url, run, pending[0].ID, "--comment", "too late")
	assert.Equal(t, exitRejected, r.code)
	assert.Contains(t, r.out, "already_decided")

	r = cli(t, "show", "--nats-url", url, "no-such-run")
	assert.Equal(t, exitNotFound, r.code)
	r = cli(t, "show", "--nats-url", url, "bad.run")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "'.'")
	r = cli(t, "approve", "--nats-url", url)
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "pending", "--nats-url", url)
	assert.Contains(t, r.out, "no interrupts are waiting")

	_ = w.Stop(context.Background())
	conn.Close()
	assert.Equal(t, 0, stop(), "serve exits 0 on SIGTERM/SIGINT (context cancel)")

	// The data directory survives: a new serve on it still knows the run.
	url, stop = serve(t, dir, port)
	r = cli(t, "show", "--nats-url", url, run)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "completed (pass 1)")
	assert.Contains(t, r.out, "decision_accepted")
	assert.Contains(t, r.out, "timer_armed", "the timer history")
	assert.Contains(t, r.out, "reminders [30m0s] before")
	assert.Equal(t, 0, stop())
}

func TestDemoUnattended(t *testing.T) {
	r := cli(t, "demo", "--auto-approve", "--log-level", "warn")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "suspended: the run waits for a decision")
	assert.Contains(t, r.out, `completed after 2 passes: {"refunded":true,"amount":42.5,"approver":"demo"}`)
	assert.Equal(t, 1, strings.Count(r.out, "step: looked up order"), "the journaled step runs once")

	r = cli(t, "demo", "--auto-deny", "--json", "--log-level", "warn")
	require.Equal(t, 0, r.code, r.err)
	var last map[string]any
	var events []string
	sc := bufio.NewScanner(strings.NewReader(r.out))
	for sc.Scan() {
		last = nil
		require.NoError(t, json.Unmarshal(sc.Bytes(), &last), sc.Text())
		events = append(events, last["event"].(string))
	}
	assert.Equal(t, []string{"started", "suspended", "completed"}, events)
	res := last["result"].(map[string]any)
	assert.Equal(t, false, res["refunded"])
	assert.Contains(t, res["note"], "denied")

	r = cli(t, "demo", "--auto-approve", "--auto-deny")
	assert.Equal(t, exitUsage, r.code)
}

func TestConnectionFlagErrors(t *testing.T) {
	r := cli(t, "pending", "--tls-ca", "/no/such/ca.pem")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "--tls-ca")
	r = cli(t, "pending", "--tls-cert", "/no/such.pem", "--tls-key", "/no/such.key")
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "pending", "--nats-url", "nats://127.0.0.1:1", "--timeout", "500ms")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.err, "connect to nats://127.0.0.1:1")
	r = cli(t, "serve", "--sync", "sometimes", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "serve", "--listen", "nonsense", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "serve", "--on-expiry", "approve", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code, "silence is never approval")
	r = cli(t, "serve", "--on-expiry", "escalate", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "no-such-command")
	assert.Equal(t, exitUsage, r.code)
}

func TestServeWithNotifier(t *testing.T) {
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
	metrics := "127.0.0.1:" + strconv.Itoa(freePort(t))
	url, stop := serve(t, t.TempDir(), freePort(t), "--notifier-config", cfg, "--metrics-addr", metrics)
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
	require.Eventually(t, func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `interlock_notifications_total{outcome="delivered",sink="ops"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
	_, body := get("/metrics")
	assert.Contains(t, body, `interlock_pass_outcomes_total{kind="suspended"} 1`)
	assert.Contains(t, body, `interlock_coordinator_handle_seconds_bucket{input="outcome"`)
	status, _ := get("/healthz")
	assert.Equal(t, 200, status)
	status, _ = get("/readyz")
	assert.Equal(t, 200, status)
	_ = w.Stop(context.Background())
	assert.Equal(t, 0, stop())
}

func TestNotifierConfigErrors(t *testing.T) {
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

func TestGatewayHistoryAndWatch(t *testing.T) {
	ids := filepath.Join(t.TempDir(), "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	gw := "127.0.0.1:" + strconv.Itoa(freePort(t))
	metrics := "127.0.0.1:" + strconv.Itoa(freePort(t))
	url, stop := serve(t, t.TempDir(), freePort(t), "--identities", ids, "--gateway-listen", gw, "--metrics-addr", metrics)
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "refunds").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()

	// watch, in the background, until cancelled.
	wctx, wcancel := context.WithCancel(ctx)
	watched := &syncbuf.Buffer{}
	wdone := make(chan int, 1)
	go func() { wdone <- run(wctx, []string{"watch", "--nats-url", url, "--json"}, watched, &bytes.Buffer{}) }()

	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("refunds", demoAgent(func(string, ...any) {})))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	api := processor.NewClient(conn)
	runID, err := api.Start(ctx, "refunds", refundRequest{Order: "A-3", Amount: 9, Customer: "Ida"})
	require.NoError(t, err)
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rec, err := api.Wait(tctx, runID, processor.Suspended)
	require.NoError(t, err)

	r := cli(t, "pending", "--nats-url", url, "--reason", "tool_call", "--json")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, runID)
	r = cli(t, "pending", "--nats-url", url, "--reason", "confirmation")
	assert.Contains(t, r.out, "no interrupts are waiting")
	r = cli(t, "pending", "--nats-url", url, "--older-than", "1h")
	assert.Contains(t, r.out, "no interrupts are waiting")

	req, _ := http.NewRequest("POST", "http://"+gw+"/v1/runs/"+runID+"/interrupts/"+rec.Pending()[0].ID+"/decision",
		strings.NewReader(`{"status":"resolved","payload":{"amount":9}}`))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	_, err = api.Wait(tctx, runID, processor.Finished)
	require.NoError(t, err)

	r = cli(t, "history", "--nats-url", url, runID)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "decision_accepted")
	assert.Contains(t, r.out, "ada via gateway")
	assert.Contains(t, r.out, "completed")
	r = cli(t, "history", "--nats-url", url, runID, "--json")
	var evs []subjects.Event
	require.NoError(t, json.Unmarshal([]byte(r.out), &evs))
	assert.GreaterOrEqual(t, len(evs), 4)

	mresp, err := http.Get("http://" + metrics + "/metrics")
	require.NoError(t, err)
	mbody, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	assert.Contains(t, string(mbody), `interlock_gateway_request_seconds_count{route="POST /v1/runs/{run}/interrupts/{interrupt}/decision",status="200"} 1`)
	assert.Contains(t, string(mbody), `interlock_runs_total{status="completed"} 1`)
	// A removed entry's marker is counted until it expires, within a second.
	assert.Eventually(t, func() bool {
		mresp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false
		}
		defer mresp.Body.Close()
		mbody, _ := io.ReadAll(mresp.Body)
		return strings.Contains(string(mbody), "interlock_pending_interrupts 0")
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(watched.String(), `"type":"completed"`) },
		10*time.Second, 20*time.Millisecond, "watch saw the run complete")
	wcancel()
	assert.Equal(t, 0, <-wdone)
	_ = w.Stop(context.Background())
	assert.Equal(t, 0, stop())
}

func TestTokenCommand(t *testing.T) {
	r := cli(t, "token", "--json")
	require.Equal(t, 0, r.code, r.err)
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &out))
	assert.Equal(t, approvers.Digest(out["token"]), out["digest"])
	dir, err := approvers.Parse("x", []byte("identities:\n  ada: {tokens: [\""+out["digest"]+"\"]}\n"))
	require.NoError(t, err)
	id, ok := dir.Authenticate(out["token"])
	assert.True(t, ok)
	assert.Equal(t, "ada", id.Name)
	assert.NotEqual(t, out["token"], cli(t, "token", "--json").out, "fresh every time")
}

func TestBenchCommand(t *testing.T) {
	r := cli(t, "bench", "--runs", "5", "--parked", "20", "--concurrency", "2", "--sync", "interval", "--json")
	require.Equal(t, 0, r.code, r.err)
	var res []benchResult
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	require.Len(t, res, 8, "four scenarios, Interlock and the floor")
	for _, x := range res {
		switch x.Scenario {
		case "cycle":
			assert.Positive(t, x.PerSecond, "%+v", x)
			assert.Positive(t, x.BytesPerCycle, "%+v", x)
			if x.Side == "floor" {
				assert.Equal(t, 8.0, x.MsgsPerCycle, "the floor's eight durable writes per cycle")
			} else {
				assert.Greater(t, x.MsgsPerCycle, 8.0, "Interlock's cycle writes the floor's eight and its events")
			}
		case "parked":
			assert.Positive(t, x.BytesPerRun, "%+v", x)
		default:
			assert.Positive(t, x.P99ms, "%+v", x)
			assert.GreaterOrEqual(t, x.P99ms, x.P50ms)
		}
	}
	assert.Contains(t, r.err, "cycle interlock sync=interval", "progress on stderr")
	r = cli(t, "bench", "--scenario", "cycle", "--runs", "3", "--sync", "interval")
	require.Equal(t, 0, r.code, r.err)
	assert.Regexp(t, `writes\s+interval\s+[\d.]+ msgs, \d+ B per cycle\s+8.0 msgs, \d+ B per cycle`, r.out)
	r = cli(t, "bench", "--scenario", "nope", "--runs", "1", "--sync", "interval")
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "bench", "--scenario", "paced", "--runs", "1", "--sync", "interval")
	assert.Equal(t, exitUsage, r.code, "paced needs --rate")
	r = cli(t, "bench", "--scenario", "paced", "--rate", "50", "--runs", "10", "--sync", "interval", "--json")
	require.Equal(t, 0, r.code, r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	require.Len(t, res, 2)
	for _, x := range res {
		// A pacer never runs faster than asked; how close it comes to the
		// rate depends on the machine, which a test must not assert.
		assert.LessOrEqual(t, x.PerSecond, 50*1.25, "paced: never faster than the rate asked")
		assert.Positive(t, x.PerSecond)
		assert.Positive(t, x.P99ms)
	}
}

// The gateway and the notifier run as their own processes against a
// server, and stop cleanly.
func TestStandaloneGatewayAndNotifier(t *testing.T) {
	url, stopServe := serve(t, t.TempDir(), freePort(t))
	dir := t.TempDir()
	ids := filepath.Join(dir, "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	ncfg := filepath.Join(dir, "notifier.yaml")
	require.NoError(t, os.WriteFile(ncfg, []byte("sinks:\n  log: {type: log, output: stderr}\nroutes:\n  - {match: 'true', sinks: [log]}\n"), 0o600))
	// A notifier may not create its consumers: provisioning is a step of
	// its own (serve provisioned the rest, the gateway's buckets included).
	r := cli(t, "notifier", "--config", ncfg, "--nats-url", url)
	require.Equal(t, exitFailure, r.code, r.err)
	require.Contains(t, r.err, "interlock provision")
	r = cli(t, "provision", "--nats-url", url, "--notifier-config", ncfg)
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "provisioned")
	for _, c := range []struct{ args []string }{
		{[]string{"gateway", "--identities", ids, "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t))}},
		{[]string{"notifier", "--config", ncfg}},
	} {
		ops := "127.0.0.1:" + strconv.Itoa(freePort(t))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, append(c.args, "--nats-url", url, "--metrics-addr", ops, "--log-level", "warn"), &bytes.Buffer{}, &bytes.Buffer{})
		}()
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + ops + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, 15*time.Second, 20*time.Millisecond, "%s ready", c.args[0])
		cancel()
		assert.Equal(t, 0, <-done, "%s stops cleanly", c.args[0])
	}
	assert.Equal(t, 0, stopServe())
}

// TestServeAckWait: --ack-wait sets how long the coordinator's messages wait
// for an ack, and a value too short for heartbeats is a usage error.
func TestServeAckWait(t *testing.T) {
	r := cli(t, "serve", "--data-dir", t.TempDir(), "--ack-wait", "10ms")
	assert.Equal(t, exitUsage, r.code, r.err)
	assert.Contains(t, r.err, "--ack-wait 10ms is shorter than 1s")

	url, stop := serve(t, t.TempDir(), freePort(t), "--ack-wait", "3s")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	for _, durable := range []string{"coordinator_runs", "coordinator_decisions"} {
		stream := jetstream.StreamRuns
		if durable == "coordinator_decisions" {
			stream = jetstream.StreamDecisions
		}
		st, err := conn.ConsumerState(ctx, stream, durable)
		require.NoError(t, err)
		assert.Equal(t, 3*time.Second, st.AckWait, durable)
	}
}
