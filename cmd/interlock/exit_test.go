package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/subjects"
)

// The exit code follows the type of the error, however it is wrapped, and
// never its text.
func TestExitCodeFromErrorType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("nats: no servers available for connection"), exitFailure},
		{errors.New(`unknown command "x" for "interlock"`), exitFailure},
		{errors.New("required flag(s) \"config\" not set"), exitFailure},
		{context.Canceled, exitFailure},
		{usage(errors.New("anything")), exitUsage},
		{fmt.Errorf("loading: %w", usagef("--sync %q", "x")), exitUsage},
		{fmt.Errorf("run id: %w", subjects.ErrInvalidToken), exitUsage},
		{fmt.Errorf("option: %w", processor.ErrInvalidOption), exitUsage},
		{&processor.RejectionError{Verdict: subjects.Verdict{Code: subjects.CodeNotAllowed}}, exitRejected},
		{fmt.Errorf("%w; pass --approver", &processor.RejectionError{}), exitRejected},
		{fmt.Errorf("run r: %w", processor.ErrRunExists), exitRejected},
		{fmt.Errorf("get: %w", processor.ErrRunNotFound), exitNotFound},
		{errNoMatch, exitNotFound},
		{&runFailedError{errors.New("run r failed: boom")}, exitRunFail},
		{fmt.Errorf("%w: no", jetstream.ErrPermission), exitFailure},
		{fmt.Errorf("dial: %w", jetstream.ErrEmptyPassword), exitCredentials},
	} {
		assert.Equal(t, c.want, exitCode(c.err), "%v", c.err)
	}
}

// Each exit code, from a real command against a real server.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url := srv.URL
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "ok", "--agent", "broken").code)
	conn, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("ok", func(context.Context, json.RawMessage) (any, error) { return "done", nil }))
	require.NoError(t, w.Register("broken", func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("boom")
	}))
	require.NoError(t, w.Start(context.Background()))
	defer func() { _ = w.Stop(context.Background()) }()

	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"ok", []string{"start", "ok", "--run-id", "r-ok", "--wait"}, exitOK},
		{"ok: a listing", []string{"runs", "--agent", "ok"}, exitOK},
		{"unreachable", []string{"pending", "--nats-url", "nats://127.0.0.1:1", "--timeout", "300ms"}, exitFailure},
		{"unknown command", []string{"nosuch"}, exitUsage},
		{"unknown flag", []string{"runs", "--nosuch"}, exitUsage},
		{"bad flag value", []string{"runs", "--older-than", "soon"}, exitUsage},
		{"missing argument", []string{"show"}, exitUsage},
		{"extra argument", []string{"runs", "r-ok"}, exitUsage},
		{"required flag", []string{"notifier"}, exitUsage},
		{"exclusive flags", []string{"start", "ok", "--input", "1", "--input-file", "in.json"}, exitUsage},
		{"invalid run id", []string{"show", "bad.run"}, exitUsage},
		{"bad JSON", []string{"approve", "r-ok", "i", "--payload", "{"}, exitUsage},
		{"rejected", []string{"approve", "no-such-run", "ask", "--timeout", "5s"}, exitRejected},
		{"run exists", []string{"start", "ok", "--run-id", "r-ok"}, exitRejected},
		{"not found", []string{"show", "no-such-run"}, exitNotFound},
		{"none matches", []string{"runs", "--status", "suspended"}, exitNotFound},
		{"run failed", []string{"start", "broken", "--wait"}, exitRunFail},
	} {
		args := c.args
		if args[0] != "nosuch" && !slices.Contains(args, "--nats-url") {
			args = append(args, "--nats-url", url)
		}
		r := cli(t, args...)
		assert.Equal(t, c.want, r.code, "%s: %v\nstdout: %s\nstderr: %s", c.name, args, r.out, r.err)
		if c.want != exitOK {
			assert.Contains(t, r.err, "interlock: ", "%s: the error is printed", c.name)
		}
		if c.want == exitUsage {
			help := "see 'interlock " + args[0] + " --help'"
			if args[0] == "nosuch" {
				help = "see 'interlock --help'"
			}
			assert.Contains(t, r.err, help, "%s: where to read how", c.name)
		}
	}
}

func TestConnectionFlagErrors(t *testing.T) {
	t.Parallel()
	r := cli(t, "pending", "--nats-tls-ca", "/no/such/ca.pem")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "--nats-tls-ca")
	r = cli(t, "pending", "--nats-tls-cert", "/no/such.pem", "--nats-tls-key", "/no/such.key")
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "pending", "--nats-url", "nats://127.0.0.1:1", "--timeout", "500ms")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.err, "connect to nats://127.0.0.1:1")
	r = cli(t, "serve", "--sync", "sometimes", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "serve", "--nats-listen", "nonsense", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "--nats-listen")
	r = cli(t, "serve", "--on-expiry", "approve", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code, "silence is never approval")
	r = cli(t, "serve", "--on-expiry", "escalate", "--data-dir", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "no-such-command")
	assert.Equal(t, exitUsage, r.code)
}

// The names flags had before the rename still work, say what replaces
// them on stderr, and are left out of the help.
func TestDeprecatedFlagNames(t *testing.T) {
	t.Parallel()
	ids := filepath.Join(t.TempDir(), "identities.yaml")
	require.NoError(t, os.WriteFile(ids, []byte("identities:\n  ada: {tokens: [\""+approvers.Digest("tok")+"\"]}\n"), 0o600))
	for _, c := range []struct {
		args     []string
		old, new string
		// says is in the error when the old name set the new one's value.
		says string
	}{
		{[]string{"pending", "--tls-ca", "/no/such/ca.pem"}, "tls-ca", "nats-tls-ca", "/no/such/ca.pem"},
		{[]string{"pending", "--tls-cert", "/no/such.pem", "--tls-key", "/no/such.key"}, "tls-cert", "nats-tls-cert", "/no/such.pem"},
		{[]string{"serve", "--listen", "nonsense", "--data-dir", t.TempDir()}, "listen", "nats-listen", `"nonsense"`},
		// On the gateway these named its HTTPS certificate, and still do.
		{[]string{"gateway", "--identities", ids, "--tls-cert", "/no/cert.pem"}, "tls-cert", "gateway-tls-cert", "certificate and its key together"},
		{[]string{"gateway", "--identities", ids, "--tls-cert", "/no/cert.pem", "--tls-key", "/no/key.pem"}, "tls-key", "gateway-tls-key", "/no/cert.pem"},
		{[]string{"gateway", "--identities", "/no/such.yaml", "--listen", "127.0.0.1:0"}, "listen", "gateway-listen", "/no/such.yaml"},
	} {
		r := cli(t, c.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", c.args, r.err)
		assert.Contains(t, r.err, c.says, "%v: the old name sets the new one's value", c.args)
		assert.Contains(t, r.err, "--"+c.old+" is deprecated; use --"+c.new, c.args)
		assert.Empty(t, r.out, "warnings go to stderr, never among --json output")
		help := cli(t, c.args[0], "--help")
		assert.NotContains(t, help.out, "--"+c.old+" ", c.args[0])
		assert.Contains(t, help.out, "--"+c.new+" ", c.args[0])
	}
}
