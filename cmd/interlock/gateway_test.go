package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/subjects"
)

func TestGatewayHistoryAndWatch(t *testing.T) {
	t.Parallel()
	ids := filepath.Join(t.TempDir(), "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	srv := serve(t, t.TempDir(), "--identities", ids, "--gateway-listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	url, stop := srv.URL, srv.Stop
	gw, metrics := srv.addr("gateway listening"), srv.addr("metrics and health")
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "refunds").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()

	// watch, in the background, until cancelled; the run starts once it
	// follows the feed.
	wctx, wcancel := context.WithCancel(ctx)
	watched, watching := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	wdone := make(chan int, 1)
	go func() {
		wdone <- run(wctx, []string{"watch", "--nats-url", url, "--json"}, nil, watched, watching)
	}()
	require.Eventually(t, func() bool { return strings.Contains(watching.String(), "watching events") },
		15*time.Second, 20*time.Millisecond)

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

	// The coordinator puts the index entry after the record it follows from.
	var r result
	require.Eventually(t, func() bool {
		r = cli(t, "pending", "--nats-url", url, "--reason", "tool_call", "--json")
		require.Equal(t, 0, r.code, r.err)
		return strings.Contains(r.out, runID)
	}, 15*time.Second, 20*time.Millisecond, "the suspension listed")
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
	types := map[subjects.EventType]bool{}
	for _, ev := range evs {
		types[ev.Type] = true
	}
	for _, want := range []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted, subjects.EventCompleted} {
		assert.True(t, types[want], "history has %s: %v", want, types)
	}

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

// The gateway and the notifier run as their own processes against a
// server, and stop cleanly.
func TestStandaloneGatewayAndNotifier(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url, stopServe := srv.URL, srv.Stop
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
	r = cli(t, "provision", "--nats-url", url, "--notifier-config", ncfg, "--agent", "refunds")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "provisioned")
	// Progress on stderr, a line per step as it ends (a step on a cluster
	// still electing takes seconds).
	for _, step := range []string{"streams and buckets", "the coordinator's consumers", "the gateway's buckets and consumer",
		"1 agent consumer(s)", "1 notifier sink consumer(s)"} {
		assert.Regexp(t, `(?m)^provision: `+regexp.QuoteMeta(step)+` \([0-9.]+m?s\)$`, r.err)
	}
	for _, args := range [][]string{
		{"gateway", "--identities", ids, "--gateway-listen", "127.0.0.1:0"},
		{"notifier", "--config", ncfg},
	} {
		d := runDaemon(t, "metrics and health", append(args, "--nats-url", url, "--metrics-addr", "127.0.0.1:0")...)
		ops := d.addr("metrics and health")
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + ops + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, 15*time.Second, 20*time.Millisecond, "%s ready", args[0])
		assert.Equal(t, 0, d.Stop(), "%s stops cleanly", args[0])
	}
	assert.Equal(t, 0, stopServe())
}

// The gateway says where its inbox is when it starts, and / leads there.
func TestGatewayPrintsTheInboxURL(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url, stop := srv.URL, srv.Stop
	ctx := context.Background()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	dir, err := approvers.Parse("ids", []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"))
	require.NoError(t, err)
	logs := &syncbuf.Buffer{}
	stopGateway, err := startGateway(conn, dir, nil, 0, "127.0.0.1:0", nil, slog.New(slog.NewTextHandler(logs, nil)), prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	defer func() { _ = stopGateway(context.Background()) }()
	inbox := regexp.MustCompile(`inbox=(http://127\.0\.0\.1:\d+/inbox)`).FindStringSubmatch(logs.String())
	require.NotNil(t, inbox, logs.String())
	resp, err := http.Get(strings.TrimSuffix(inbox[1], "inbox"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "/inbox", resp.Request.URL.Path, "/ leads to the inbox")
	assert.NoError(t, stopGateway(context.Background()))
	assert.Equal(t, 0, stop())
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "interlock test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Attack: tokens and session cookies sniffed on the wire. The gateway
// serves HTTPS when given a certificate (serve and gateway
// --gateway-tls-cert/key), and a plain-HTTP request gets no answer from it.
func TestGatewayServesTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	ids := filepath.Join(dir, "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	srv := serve(t, t.TempDir(), "--identities", ids, "--gateway-listen", "127.0.0.1:0",
		"--gateway-tls-cert", certFile, "--gateway-tls-key", keyFile)
	defer func() { assert.Equal(t, 0, srv.Stop()) }()
	gw := srv.addr("gateway listening")

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	var resp *http.Response
	require.Eventually(t, func() bool {
		r, err := client.Get("https://" + gw + "/healthz")
		if err != nil {
			return false
		}
		resp = r
		return true
	}, 15*time.Second, 20*time.Millisecond, "the gateway answers over TLS")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"))

	plain, err := http.Get("http://" + gw + "/healthz")
	if err == nil {
		plain.Body.Close()
		assert.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP is not served")
	}

	for _, flag := range []string{"--gateway-tls-cert", "--tls-cert"} {
		r := cli(t, "gateway", "--identities", ids, flag, certFile)
		assert.Equal(t, exitUsage, r.code, "%s: a certificate without its key", flag)
	}
}

// --slack-channel maps the notifier's card sinks to channels; it needs the
// bot token (the gateway posts the cards) and the signing secret.
func TestSlackChannelFlags(t *testing.T) {
	t.Setenv("TEST_SLACK_SECRET", "a-signing-secret")
	t.Setenv("TEST_SLACK_BOT", "xoxb-test")
	f := slackFlags{secretEnv: "TEST_SLACK_SECRET", team: "T1", tokenEnv: "TEST_SLACK_BOT",
		channels: map[string]string{"finance-slack": "C0FIN"}, inboxURL: "https://gw.example.test"}
	c, err := f.config()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"finance-slack": "C0FIN"}, c.Channels)
	require.Equal(t, "https://gw.example.test", c.InboxURL)

	f.tokenEnv = ""
	_, err = f.config()
	var u *usageError
	require.ErrorAs(t, err, &u)
	require.Contains(t, err.Error(), "--slack-channel needs --slack-bot-token-env")

	_, err = slackFlags{channels: map[string]string{"s": "C1"}}.config()
	require.ErrorAs(t, err, &u)
}

// --slack-app-token-env turns on Socket Mode; the variable must hold an
// app-level token (xapp-...), and no error shows what it holds.
func TestSlackAppTokenFlags(t *testing.T) {
	t.Setenv("TEST_SLACK_SECRET", "a-signing-secret")
	t.Setenv("TEST_SLACK_APP", "xapp-1-secret-value")
	t.Setenv("TEST_SLACK_NOT_APP", "xoxb-secret-value")
	f := slackFlags{secretEnv: "TEST_SLACK_SECRET", team: "T1", appTokenEnv: "TEST_SLACK_APP", socketConns: 3}
	c, err := f.config()
	require.NoError(t, err)
	require.Equal(t, "xapp-1-secret-value", c.AppToken)
	require.Equal(t, 3, c.SocketConnections)

	var u *usageError
	for _, bad := range []slackFlags{
		{secretEnv: "TEST_SLACK_SECRET", team: "T1", appTokenEnv: "TEST_SLACK_NOT_APP", socketConns: 2},
		{secretEnv: "TEST_SLACK_SECRET", team: "T1", appTokenEnv: "TEST_SLACK_UNSET", socketConns: 2},
		{secretEnv: "TEST_SLACK_SECRET", team: "T1", appTokenEnv: "TEST_SLACK_APP", socketConns: 11},
		{appTokenEnv: "TEST_SLACK_APP", socketConns: 2},
	} {
		_, err := bad.config()
		require.ErrorAs(t, err, &u)
		require.NotContains(t, err.Error(), "secret-value")
	}
}
