package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/subjects"
)

func TestServeApproveShowPending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := serve(t, dir, "--default-timeout", "1h", "--remind-before", "30m")
	url, stop := srv.URL, srv.Stop

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
	srv = serve(t, dir)
	url, stop = srv.URL, srv.Stop
	r = cli(t, "show", "--nats-url", url, run)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "completed (pass 1)")
	assert.Contains(t, r.out, "decision_accepted")
	assert.Regexp(t, `suspended .* expires \S+, then cancel; reminders \[30m0s\] before`, r.out,
		"the deadline's timers, in the suspended event")
	assert.Equal(t, 0, stop())
}

// TestServeAckWait: --ack-wait sets how long the coordinator's messages wait
// for an ack, and a value too short for heartbeats is a usage error.
func TestServeAckWait(t *testing.T) {
	t.Parallel()
	r := cli(t, "serve", "--data-dir", t.TempDir(), "--ack-wait", "10ms")
	assert.Equal(t, exitUsage, r.code, r.err)
	assert.Contains(t, r.err, "--ack-wait 10ms is shorter than 1s")
	r = cli(t, "serve", "--data-dir", t.TempDir(), "--topology-interval", "-1s")
	assert.Equal(t, exitUsage, r.code, r.err)
	assert.Contains(t, r.err, "--topology-interval -1s is negative")

	srv := serve(t, t.TempDir(), "--ack-wait", "3s")
	url, stop := srv.URL, srv.Stop
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	check := func(want time.Duration) {
		t.Helper()
		for _, durable := range []string{"coordinator_runs", "coordinator_decisions"} {
			stream := jetstream.StreamRuns
			if durable == "coordinator_decisions" {
				stream = jetstream.StreamDecisions
			}
			st, err := conn.ConsumerState(ctx, stream, durable)
			require.NoError(t, err)
			assert.Equal(t, want, st.AckWait, durable)
		}
	}
	check(3 * time.Second)
	// Provisioning again (an agent added) keeps it; --ack-wait sets it.
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "more").code)
	check(3 * time.Second)
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--ack-wait", "5s").code)
	check(5 * time.Second)
}

// Flag help names what a flag takes, not a stray quoted phrase.
func TestServeHelpNamesTheNotifierFile(t *testing.T) {
	t.Parallel()
	r := cli(t, "serve", "--help")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "--notifier-config FILE")
	assert.NotContains(t, r.out, "--notifier-config interlock")
}

// TestServeConcurrentStartCluster starts the shipped three-node configs as
// three separate nats-server processes and, at the same moment, three
// `interlock serve --replicas 3` and an `interlock provision --replicas 3`
// (each its own command with its own connection, in this process): every
// serve comes up and the provision succeeds, without a restart.
func TestServeConcurrentStartCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Parallel()
	nodes := jstest.ProcessCluster(t, 3, "../../deploy/nats/cluster/n1.conf", "../../deploy/nats/cluster/n2.conf",
		"../../deploy/nats/cluster/n3.conf")
	// As admin, with --provision: a named user's serve provisions only when
	// told to (the coordinator's user may not).
	urls := jstest.As("admin", jstest.NodeURLs(nodes))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const serves = 3
	logs := make([]*syncbuf.Buffer, serves)
	codes := make(chan int, serves)
	start := make(chan struct{})
	for i := range serves {
		logs[i] = &syncbuf.Buffer{}
		go func() {
			<-start
			codes <- run(ctx, []string{"serve", "--nats-url", urls, "--replicas", "3", "--provision", "--log-level", "info"}, nil, &bytes.Buffer{}, logs[i])
		}()
	}
	var prov result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		// Not cli's 30 s: four provisioners at once on three nodes that
		// are still electing took over 30 s under the whole suite's load
		// (the command's own deadline, --timeout plus 30 s, is 40 s), and
		// the test failed where the command would have finished.
		var out, errOut bytes.Buffer
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		code := run(pctx, []string{"provision", "--nats-url", urls, "--replicas", "3", "--agent", "refunds"}, nil, &out, &errOut)
		prov = result{out.String(), errOut.String(), code}
	}()
	close(start)
	wg.Wait()
	require.Zero(t, prov.code, "provision: %s", prov.err)
	assert.Contains(t, prov.out, "replicas at least 3")
	up := func() bool {
		for _, l := range logs {
			if !strings.Contains(l.String(), "coordinator running") {
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, up, 60*time.Second, 50*time.Millisecond, "every serve comes up") {
		for i, l := range logs {
			t.Logf("serve %d: %s", i, l)
		}
		t.FailNow()
	}
	require.Empty(t, codes, "no serve exited")
	cancel()
	for range serves {
		select {
		case code := <-codes:
			assert.Zero(t, code)
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not stop on cancel")
		}
	}
}

// TestServeOpenDefaultProvisions: the embedded server without a
// configuration admits anyone, so serve provisions it even when a NATS user
// is named (NATS_USER left in the environment); against a server with
// users, a named user's serve does not (TestDeploySystemdUnit).
func TestServeOpenDefaultProvisions(t *testing.T) {
	// A named user needs a password (TestAttackEmptyPassword), even one
	// the open server does not check: t.Setenv, so not parallel.
	t.Setenv("NATS_PASSWORD", "unchecked")
	d := runDaemon(t, "coordinator running", "serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0",
		"--nats-user", "someone")
	assert.NotContains(t, d.logs.String(), "not provisioning")
	assert.Equal(t, 0, d.Stop())
}

// TestServeReadyFile: --ready-file says where serve listens, started on
// port 0 everywhere, once everything listens; written atomically (a stale
// file is removed at start), removed when serve stops; --help names it.
func TestServeReadyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready := filepath.Join(dir, "run", "ready.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(ready), 0o755))
	require.NoError(t, os.WriteFile(ready, []byte(`{"nats":"nats://stale"}`), 0o600))
	ids := filepath.Join(dir, "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	srv := serve(t, filepath.Join(dir, "data"), "--identities", ids, "--gateway-listen", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0", "--ready-file", ready)
	var info struct {
		NATS    string `json:"nats"`
		Gateway string `json:"gateway"`
		Metrics string `json:"metrics"`
		PID     int    `json:"pid"`
	}
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(ready)
		return err == nil && json.Unmarshal(data, &info) == nil && info.NATS != "nats://stale"
	}, 15*time.Second, 20*time.Millisecond)
	assert.Equal(t, srv.URL, info.NATS)
	assert.Equal(t, "http://"+srv.addr("gateway listening"), info.Gateway)
	assert.Equal(t, "http://"+srv.addr("metrics and health"), info.Metrics)
	assert.Equal(t, os.Getpid(), info.PID)
	// What it names answers.
	resp, err := http.Get(info.Metrics + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	conn, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URL: info.NATS}, jetstream.Config{})
	require.NoError(t, err)
	conn.Close()
	// No temporary file left beside it.
	entries, err := os.ReadDir(filepath.Dir(ready))
	require.NoError(t, err)
	assert.Len(t, entries, 1)

	require.Equal(t, 0, srv.Stop())
	_, err = os.Stat(ready)
	assert.ErrorIs(t, err, os.ErrNotExist, "removed when serve stops")

	r := cli(t, "serve", "--help")
	assert.Contains(t, r.out, "--ready-file")
}
