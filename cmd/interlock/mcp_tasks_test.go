package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tsClientDir holds the official MCP TypeScript SDK's client script and its
// pinned package (installed by .ci/run with npm ci).
const tsClientDir = "testdata/mcp-ts-client"

// tsLine is one message the TypeScript client printed.
type tsLine struct {
	Type     string `json:"type"`
	TaskID   string `json:"taskId"`
	Status   string `json:"status"`
	Text     string `json:"text"`
	IsError  bool   `json:"isError"`
	Message  string `json:"message"`
	Tasks    any    `json:"tasks"`
	Protocol string `json:"protocolVersion"`
	Tools    []struct {
		Name        string `json:"name"`
		TaskSupport string `json:"taskSupport"`
	} `json:"tools"`
}

// tsClient runs the TypeScript SDK's client with args and returns the
// messages it prints, as they come, closed when it exits (its exit error
// then in *exitErr). It skips the test when node or the SDK is missing,
// unless INTERLOCK_MCP_TS=1 (CI) makes that a failure.
func tsClient(t *testing.T, ctx context.Context, exitErr *error, args ...string) <-chan tsLine {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("INTERLOCK_MCP_TS") == "1" {
			t.Fatalf("%s (INTERLOCK_MCP_TS=1)", what)
		}
		t.Skipf("%s: install with `(cd cmd/interlock/%s && npm ci)` to run the real TypeScript MCP client", what, tsClientDir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		missing("the MCP TypeScript SDK is not installed in " + tsClientDir)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = tsClientDir
	cmd.Env = append(os.Environ(), asInterlockEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ch := make(chan tsLine, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l tsLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				l = tsLine{Type: "unparsed", Text: sc.Text()}
			}
			ch <- l
		}
		*exitErr = cmd.Wait()
	}()
	t.Cleanup(wg.Wait)
	return ch
}

// next is the next message of type typ (failing on an error message).
func next(t *testing.T, ch <-chan tsLine, typ string) tsLine {
	t.Helper()
	for l := range ch {
		require.NotEqual(t, "error", l.Type, l.Message)
		if l.Type == typ {
			return l
		}
	}
	t.Fatalf("the TypeScript client ended before a %q message", typ)
	return tsLine{}
}

// TestMCPProxyTasksTypeScript: the official MCP TypeScript SDK's client
// (it speaks the 2025-11-25 tasks) calls a gated tool through `interlock
// mcp proxy` as a task, over stdio (spawning the proxy) and over
// streamable HTTP: it sees the tasks capability and the tools'
// taskSupport, gets a task, polls it, and receives the upstream's result
// once ada approves with edited arguments; an ungated call is a plain
// call, made at once. And across a restart: the client that got the task
// and its proxy go away before the decision, and a new client polls the
// task on a new proxy process, which makes the approved call once.
func TestMCPProxyTasksTypeScript(t *testing.T) {
	t.Parallel()
	s := serve(t, t.TempDir())
	r := cli(t, "provision", "--nats-url", s.URL, "--agent", "mcp_proxy")
	require.Zero(t, r.code, r.err)

	check := func(t *testing.T, ctx context.Context, ch <-chan tsLine, ungated bool) {
		c := next(t, ch, "connected")
		assert.NotNil(t, c.Tasks, "the proxy offers the tasks capability")
		tools := next(t, ch, "tools")
		require.NotEmpty(t, tools.Tools)
		for _, tl := range tools.Tools {
			assert.Equal(t, "optional", tl.TaskSupport, tl.Name)
		}
		if ungated {
			p := next(t, ch, "plain")
			assert.Equal(t, "look done", p.Text)
		}
		created := next(t, ch, "taskCreated")
		assert.Equal(t, "working", created.Status)
		approveLater(t, ctx, s.URL, map[string]any{"arguments": map[string]any{"target": "mars"}})
		res := next(t, ch, "result")
		require.False(t, res.IsError, res.Text)
		for range ch {
		}
	}

	t.Run("stdio", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var exit error
		ch := tsClient(t, ctx, &exit, "stdio", "launch", os.Args[0], "mcp", "proxy", "--nats-url", s.URL, "--poll", "100ms",
			"--gate", "tool:launch", "--", os.Args[0], upstreamArg)
		check(t, ctx, ch, false)
		require.NoError(t, exit)
	})

	// The client that got the task goes away and the proxy stops; a new
	// proxy process (its worker makes the approved call) answers the task
	// to a new client, from the run.
	t.Run("restart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var mu sync.Mutex
		var calls []string
		up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
		mcp.AddTool(up, &mcp.Tool{Name: "deploy"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Target string `json:"target"`
		}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			calls = append(calls, "deploy "+in.Target)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed " + in.Target}}}, nil, nil
		})
		ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
		t.Cleanup(ts.Close)
		proxy := func() *daemon {
			return runDaemon(t, "MCP over streamable HTTP", "mcp", "proxy", "--nats-url", s.URL, "--http", "127.0.0.1:0", "--poll", "100ms",
				"--gate", "tool:deploy", "--approver", "ada", "--upstream-url", ts.URL)
		}
		first := proxy()
		cctx, stopClient := context.WithCancel(ctx)
		var exit error
		ch := tsClient(t, cctx, &exit, "http", first.url("MCP over streamable HTTP"), "deploy")
		created := next(t, ch, "taskCreated")
		stopClient()
		for range ch {
		}
		require.Zero(t, first.Stop())

		second := proxy()
		approveLater(t, ctx, s.URL, map[string]any{"arguments": map[string]any{"target": "mars"}})
		var exit2 error
		ch = tsClient(t, ctx, &exit2, "resume", second.url("MCP over streamable HTTP"), created.TaskID)
		res := next(t, ch, "result")
		require.False(t, res.IsError, res.Text)
		assert.Equal(t, "deployed mars", res.Text)
		for range ch {
		}
		require.NoError(t, exit2)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"deploy mars"}, calls, "called once, by the second proxy's worker")
	})

	t.Run("http", func(t *testing.T) {
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
		d := runDaemon(t, "MCP over streamable HTTP", "mcp", "proxy", "--nats-url", s.URL, "--http", "127.0.0.1:0", "--poll", "100ms",
			"--gate", "tool:launch", "--approver", "ada", "--upstream-url", ts.URL)
		var exit error
		ch := tsClient(t, ctx, &exit, "http", d.url("MCP over streamable HTTP"), "launch", "look")
		check(t, ctx, ch, true)
		require.NoError(t, exit)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"look moon", "launch mars"}, calls)
	})
}
