package mcpbridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/mcphttp"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// helperEnv, set, makes the test binary a helper process (see helper).
const helperEnv = "MCPBRIDGE_TEST_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(helper(role))
	}
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.DiscardHandler)

// waitLimit bounds a test's waits: generous, it only matters on failure.
const waitLimit = time.Minute

// testMaxWait bounds a wait_approval call in these tests, below waitLimit.
// A call whose client gave up (its test failed) goes on at the server until
// MaxWait; the session's DELETE, sent by the client's cleanup, waits for it,
// and httptest.Server.Close waits for the DELETE. With the default of 10
// minutes that hung the package until go test's timeout (seen under load:
// TestServeExpiry's cleanup blocked in httptest.Server.Close ->
// serveStatefulDELETE -> ServerSession.Close -> jsonrpc2 Connection.wait,
// with Serve.wait still polling).
const testMaxWait = 30 * time.Second

// stopLimit bounds a stop in a test's cleanup: past it the stop cancels
// what is under way and returns.
const stopLimit = 20 * time.Second

// bounded is a cleanup calling stop with stopLimit.
func bounded(stop func(context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopLimit)
		defer cancel()
		_ = stop(ctx)
	}
}

// await receives from ch, or fails t at waitLimit: no wait in these tests
// is unbounded (a call's context ends at waitLimit too; this bounds a call
// that would not honour it).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, waitLimit)
		panic("unreachable")
	}
}

// world is a NATS server with a coordinator, and an approver deciding
// through processor.Client.
type world struct {
	t        *testing.T
	srv      *embedded.Server
	approver *processor.Client
	ctx      context.Context
	// ackWait is the workers' AckWait; zero means workerAckWait.
	ackWait time.Duration
}

// workerAckWait is the workers' AckWait. A worker renews the item it holds
// every AckWait/2; at one second, a renewal late by half a second under
// load (seen at load 15 with -race -cpu 1) let the server hand a pass that
// was still running to another attempt, which found the call recorded and
// reported it unknown (TestProxyResultTooLarge). Only a test about
// redelivery after a crash asks for a short one.
const workerAckWait = 10 * time.Second

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, srv: jstest.Server(t)}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	w.ctx = ctx
	admin := jstest.Client(t, w.srv)
	require.NoError(t, Provision(ctx, admin))
	co := coordinator.New(jstest.Client(t, w.srv), coordinator.Config{AckWait: time.Second, Logger: quiet})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(bounded(co.Stop))
	w.approver = processor.NewClient(admin)
	t.Cleanup(w.approver.Close)
	return w
}

func (w *world) conn() *jetstream.Client { return jstest.Client(w.t, w.srv) }

// worker runs agent's body on a connection of its own until cleanup.
func (w *world) worker(agent string, fn processor.AgentFunc) *processor.Worker {
	w.t.Helper()
	ackWait := w.ackWait
	if ackWait == 0 {
		ackWait = workerAckWait
	}
	wk := processor.NewWorker(w.conn(), processor.WorkerConfig{AckWait: ackWait, Logger: quiet})
	require.NoError(w.t, wk.Register(agent, fn))
	require.NoError(w.t, wk.Start(context.Background()))
	w.t.Cleanup(bounded(wk.StopAndCancel))
	return wk
}

// decide decides run's one interrupt as approver.
func (w *world) decide(run, interrupt, approver string, status subjects.Status, payload any, comment string) {
	w.t.Helper()
	v, err := w.approver.Decide(w.ctx, processor.DecisionRequest{RunID: run, InterruptID: interrupt, Status: status,
		Approver: approver, Payload: payload, Comment: comment})
	require.NoError(w.t, err)
	require.Equal(w.t, subjects.OutcomeAccepted, v.Outcome, "%+v", v)
}

// serveHTTP serves srv over streamable HTTP behind the guard, and returns
// its URL.
func serveHTTP(t *testing.T, srv *mcp.Server, g mcphttp.Config) string {
	t.Helper()
	h := mcphttp.Guard(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil), g)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// connect connects an MCP client (the Go SDK's) through t.
func connect(t *testing.T, ctx context.Context, tr mcp.Transport, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "interlock-test", Version: "1"}, opts)
	cs, err := cl.Connect(ctx, tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// httpClient connects over streamable HTTP to url.
func httpClient(t *testing.T, ctx context.Context, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	return connect(t, ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, MaxRetries: -1}, opts)
}

// stdioClient starts this test binary as helper role, an MCP server on
// stdio, and connects to it.
func stdioClient(t *testing.T, ctx context.Context, role string, env ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+role)...)
	cmd.Stderr = os.Stderr
	return connect(t, ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
}

// call calls tool and decodes its structured result into out.
func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	if out != nil {
		require.False(t, res.IsError, "%s: %s", tool, text(res))
		require.NoError(t, json.Unmarshal([]byte(text(res)), out), text(res))
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
