package mcpbridge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/mcphttp"
)

// TestProxyRelaysNotifications: what the upstream sends its client reaches
// the proxy's clients: a forwarded call's progress (under the token the
// client chose), log messages (at the level the client set, passed on
// upstream), and tools/list_changed (after which tools/list shows the new
// tool).
func TestProxyRelaysNotifications(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	var mu sync.Mutex
	var progress []*mcp.ProgressNotificationParams
	var logs []*mcp.LoggingMessageParams
	changed := make(chan struct{}, 4)
	w.up.slowWait = make(chan struct{})
	var seen sync.Once
	// The client listens on the standalone stream: log messages and
	// list_changed belong to no request.
	url := serveHTTP(t, w.proxy.Server(), mcphttp.Config{})
	cs := connect(t, w.ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params)
			seen.Do(func() { close(w.up.slowWait) })
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, req.Params)
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	require.NoError(t, cs.SetLoggingLevel(w.ctx, &mcp.SetLoggingLevelParams{Level: "info"}))
	res, err := cs.CallTool(w.ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": "mine"}})
	require.NoError(t, err)
	assert.Equal(t, "slow done", text(res))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(progress) == 1 && len(logs) == 1
	}, waitLimit, 10*time.Millisecond, "a progress notification and a log message")
	mu.Lock()
	assert.Equal(t, "mine", progress[0].ProgressToken)
	assert.Equal(t, "half way", progress[0].Message)
	assert.Equal(t, "disk nearly full", logs[0].Data)
	mu.Unlock()

	w.up.srv.AddTool(&mcp.Tool{Name: "fresh", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "fresh"}}}, nil
		})
	select {
	case <-changed:
	case <-w.ctx.Done():
		t.Fatal("no tools/list_changed reached the client")
	}
	lt, err := cs.ListTools(w.ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	assert.Contains(t, names, "fresh")
	assert.NotContains(t, names, placeholderTool)
}
