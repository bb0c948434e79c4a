package main

import (
	"bytes"
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

func TestMain(m *testing.M) {
	jstest.RunNode() // when this binary is started as a cluster node
	if len(os.Args) > 1 && os.Args[1] == upstreamArg {
		// A test's upstream MCP server, spawned by `interlock mcp proxy`.
		os.Exit(runUpstream())
	}
	if os.Getenv(asInterlockEnv) == "1" {
		// A test runs this binary as the interlock command (mcp over stdio).
		main()
	}
	// The tests run in parallel, and t.Setenv cannot: what they need from
	// the environment is set here, once (the shipped NATS configurations
	// read every user's password from it), and none of the caller's NATS
	// settings leaks into a command's flag defaults.
	for _, v := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_INBOX_PREFIX", "NATS_CA",
		"NATS_CERT", "NATS_KEY", "INTERLOCK_PREFIX", "INTERLOCK_DATA_DIR", "INTERLOCK_APPROVER"} {
		os.Unsetenv(v)
	}
	for _, u := range jstest.Users {
		os.Setenv(jstest.PasswordEnv(u), jstest.Password(u))
	}
	goleak.VerifyTestMain(m)
}

type result struct {
	out, err string
	code     int
}

// cli runs the command line args, with nothing on standard input.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return cliIn(t, "", args...)
}

// cliIn runs the command line args with stdin on standard input.
func cliIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

// daemon is a long-running command (serve, gateway, notifier) a test runs.
type daemon struct {
	t    *testing.T
	logs *syncbuf.Buffer
	once sync.Once
	code int
	stop func() int
}

// runDaemon runs the command line args until Stop, and waits for its logs to
// say ready. It listens where args say, port 0 included: addr reads back
// where. The test's cleanup stops it, if the test did not.
func runDaemon(t *testing.T, ready string, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	d := &daemon{t: t, logs: &syncbuf.Buffer{}}
	go func() { done <- run(ctx, args, nil, &bytes.Buffer{}, d.logs) }()
	d.stop = func() int {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Logf("%s: %s", args[0], d.logs)
			}
			return code
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop on cancel", args[0])
			return -1
		}
	}
	t.Cleanup(func() { d.Stop() })
	require.Eventually(t, func() bool { return strings.Contains(d.logs.String(), ready) },
		15*time.Second, 20*time.Millisecond, "%s did not come up: %s", args[0], d.logs)
	return d
}

// Stop cancels the command (as SIGINT or SIGTERM do) and returns its exit
// code; once stopped, it returns the same code again.
func (d *daemon) Stop() int {
	d.once.Do(func() { d.code = d.stop() })
	return d.code
}

// url is the url of the log line msg, once logged: where the command
// listens. (A command may log it after the line runDaemon waited for.)
func (d *daemon) url(msg string) string {
	d.t.Helper()
	// Text logs say msg="..." url=..., JSON logs "msg":"...","url":"...".
	re := regexp.MustCompile(`msg(?:=|":)"?` + regexp.QuoteMeta(msg) + `"?[ ,][^\n]*?\burl(?:=|":")([^\s"]+)`)
	var m []string
	require.Eventually(d.t, func() bool {
		m = re.FindStringSubmatch(d.logs.String())
		return m != nil
	}, 15*time.Second, 10*time.Millisecond, "no %q with a url in the logs: %s", msg, d.logs)
	return m[1]
}

// addr is the host:port of url(msg).
func (d *daemon) addr(msg string) string {
	d.t.Helper()
	u, err := neturl.Parse(d.url(msg))
	require.NoError(d.t, err)
	return u.Host
}

// served is an `interlock serve` with its embedded NATS server.
type served struct {
	*daemon
	// URL is the embedded NATS server's.
	URL string
}

// serve runs `interlock serve` on dir, its embedded server on a port of
// its own, until Stop.
func serve(t *testing.T, dir string, extra ...string) *served {
	t.Helper()
	d := runDaemon(t, "coordinator running", append([]string{"serve", "--data-dir", dir, "--nats-listen", "127.0.0.1:0",
		"--log-level", "info"}, extra...)...)
	return &served{daemon: d, URL: d.url("embedded nats-server started")}
}

// `interlock --help` lists the commands in their groups, and the exit
// codes; `interlock` alone prints the same.
func TestHelpListsGroups(t *testing.T) {
	t.Parallel()
	r := cli(t, "--help")
	require.Equal(t, 0, r.code, r.err)
	groups := map[string][]string{
		"Run Interlock:":       {"serve", "provision", "notifier", "gateway", "mcp", "demo"},
		"Runs and decisions:":  {"start", "runs", "show", "pending", "approve", "deny", "withdraw", "history", "watch"},
		"Operate and measure:": {"bench", "token", "auth", "help", "completion"},
	}
	sections := map[string]string{}
	for _, part := range strings.Split(r.out, "\n\n") {
		title, body, _ := strings.Cut(strings.TrimSpace(part), "\n")
		sections[title] = body
	}
	for title, cmds := range groups {
		body, ok := sections[title]
		require.True(t, ok, "group %q in:\n%s", title, r.out)
		var listed []string
		for _, line := range strings.Split(body, "\n") {
			listed = append(listed, strings.Fields(line)[0])
		}
		assert.ElementsMatch(t, cmds, listed, title)
	}
	assert.Contains(t, r.out, "Exit codes:\n  0  success")
	for _, code := range []int{exitFailure, exitUsage, exitRejected, exitNotFound, exitRunFail, exitCredentials} {
		assert.Regexp(t, fmt.Sprintf(`\n  %d  \S`, code), r.out)
	}
	bare := cli(t)
	assert.Equal(t, 0, bare.code)
	assert.Equal(t, r.out, bare.out)
}
