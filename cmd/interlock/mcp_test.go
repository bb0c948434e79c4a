package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/mcpbridge"
	"github.com/interlockhq/interlock/subjects"
)

// asInterlockEnv, set to 1, makes the test binary the interlock command.
const asInterlockEnv = "INTERLOCK_TEST_AS_COMMAND"

// mcpStdio starts `interlock args...` (this test binary as the command) and
// connects the Go SDK's MCP client to it over stdio.
func mcpStdio(t *testing.T, ctx context.Context, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asInterlockEnv+"=1")
	cmd.Stderr = os.Stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "interlock-cli-test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// callInBackground calls tool through cs in a goroutine; a transport error
// arrives as a result with isError.
func callInBackground(ctx context.Context, cs *mcp.ClientSession, tool string, args any) <-chan *mcp.CallToolResult {
	ch := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		ch <- res
	}()
	return ch
}

// approveLater approves the first interrupt pending on url as ada.
func approveLater(t *testing.T, ctx context.Context, url string, payload any) {
	t.Helper()
	g := &globals{natsURL: url, timeout: 10 * time.Second, prefix: "interlock"}
	require.NoError(t, g.withAPI(ctx, func(api *processor.Client) error {
		var p []subjects.PendingInterrupt
		var err error
		require.Eventually(t, func() bool {
			p, err = api.Pending(ctx)
			return err == nil && len(p) == 1
		}, time.Minute, 20*time.Millisecond)
		req := processor.DecisionRequest{RunID: p[0].RunID, InterruptID: p[0].ID, Status: subjects.StatusResolved,
			Approver: "ada", Payload: payload, Comment: "fine"}
		if m, ok := payload.(map[string]any); ok && m["arguments"] != nil && p[0].Call != nil {
			// An edit of a gated call: the decision's arguments approve
			// the edited call (the proxy refuses an edit in the payload
			// alone).
			req.Arguments = m["arguments"]
		}
		v, err := api.Decide(ctx, req)
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
		return nil
	}))
}

// TestMCPServeStdio: `interlock mcp serve` spawned by an MCP client and
// spoken to over stdio, against `interlock serve`; ada approves with the
// CLI's client.
func TestMCPServeStdio(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := cli(t, "provision", "--nats-url", s.URL, "--agent", "mcp")
	require.Zero(t, r.code, r.err)
	cs := mcpStdio(t, ctx, "mcp", "serve", "--nats-url", s.URL, "--poll", "100ms")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "request_approval",
		Arguments: map[string]any{"action": "ship it", "approvers": []string{"ada"}}})
	require.NoError(t, err)
	require.False(t, res.IsError, toolText(res))
	var st mcpbridge.Status
	require.NoError(t, json.Unmarshal([]byte(toolText(res)), &st))
	assert.Equal(t, mcpbridge.StatusPending, st.Status)
	approveLater(t, ctx, s.URL, nil)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait_approval", Arguments: map[string]any{"id": st.RunID}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(toolText(res)), &st))
	assert.Equal(t, mcpbridge.StatusApproved, st.Status)
	assert.Equal(t, "ada", st.Approver)
	assert.Equal(t, "fine", st.Comment)
}

// TestMCPProxyHTTP: `interlock mcp proxy --http` in front of an upstream
// served over streamable HTTP: an ungated call passes, a gated one reaches
// the upstream once ada approves.
func TestMCPProxyHTTP(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var calls []string
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	for _, name := range []string{"look", "launch"} {
		mcp.AddTool(up, &mcp.Tool{Name: name}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Target string `json:"target"`
		}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			calls = append(calls, name+" "+in.Target)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil, nil
		})
	}
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(ts.Close)
	r := cli(t, "provision", "--nats-url", s.URL, "--agent", "mcp_proxy")
	require.Zero(t, r.code, r.err)
	d := runDaemon(t, "MCP over streamable HTTP", "mcp", "proxy", "--nats-url", s.URL, "--http", "127.0.0.1:0", "--poll", "100ms",
		"--gate", "tool:launch", "--approver", "ada", "--upstream-url", ts.URL)
	cl := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url("MCP over streamable HTTP"), DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "look", Arguments: map[string]any{"target": "moon"}})
	require.NoError(t, err)
	assert.Equal(t, "look done", toolText(res))
	done := callInBackground(ctx, cs, "launch", map[string]any{"target": "moon"})
	approveLater(t, ctx, s.URL, map[string]any{"arguments": map[string]any{"target": "mars"}})
	res = <-done
	require.False(t, res.IsError, toolText(res))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"look moon", "launch mars"}, calls)
}

// TestMCPUsage: what the mcp commands refuse before they start.
func TestMCPUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"mcp", "serve", "--http", "0.0.0.0:0"},
		{"mcp", "serve", "--http", "127.0.0.1:0", "--allow-origin", "localhost:3000"},
		{"mcp", "proxy", "--gate", "tool:x"},
		{"mcp", "proxy", "--gate", "tool:x", "--upstream-url", "http://127.0.0.1:1", "--", "cmd"},
		{"mcp", "proxy", "--gate", "tool:x && annotation:destructiveHint", "--upstream-url", "http://127.0.0.1:1"},
		{"mcp", "proxy", "--upstream-url", "http://127.0.0.1:1"},
		{"mcp", "proxy", "--gate", "*", "--approver", "a.b", "--upstream-url", "http://127.0.0.1:1"},
	} {
		r := cli(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r.err)
	}
	r := cli(t, "mcp", "serve", "--http", "0.0.0.0:0")
	assert.Contains(t, r.err, "bearer token")
}

// upstreamArg, as this test binary's first argument, makes it an upstream
// MCP server on stdio (runUpstream).
const upstreamArg = "interlock-test-upstream"

// runUpstream serves one tool, launch, on stdio, answering what it was
// called with.
func runUpstream() int {
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "launch"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Target string `json:"target"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "launched " + in.Target}}}, nil, nil
	})
	if err := up.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// TestMCPProxyStdio: an MCP client spawns `interlock mcp proxy`, which
// spawns the upstream; both speak stdio. A gated call with arguments ada
// edits reaches the upstream with hers; a denied one never does.
func TestMCPProxyStdio(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := cli(t, "provision", "--nats-url", s.URL, "--agent", "mcp_proxy")
	require.Zero(t, r.code, r.err)
	cs := mcpStdio(t, ctx, "mcp", "proxy", "--nats-url", s.URL, "--poll", "100ms", "--gate", "tool:launch",
		"--", os.Args[0], upstreamArg)
	done := callInBackground(ctx, cs, "launch", map[string]any{"target": "moon"})
	approveLater(t, ctx, s.URL, map[string]any{"arguments": map[string]any{"target": "mars"}})
	res := <-done
	require.False(t, res.IsError, toolText(res))
	assert.Equal(t, "launched mars", toolText(res))
}
