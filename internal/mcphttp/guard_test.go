package mcphttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a real MCP server (one tool) behind Guard(cfg).
func server(t *testing.T, cfg Config) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	ts := httptest.NewServer(Guard(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil), cfg))
	t.Cleanup(ts.Close)
	return ts.URL
}

// headers adds h to every request.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (x headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range x.h {
		r.Header[k] = v
	}
	return x.next.RoundTrip(r)
}

// connect connects the Go SDK's client to url, sending h with every request.
func connect(ctx context.Context, url string, h http.Header) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headers{h: h, next: http.DefaultTransport}}}, nil)
}

// TestGuardRefusesOrigin: a browser page (any Origin not allowed by name)
// cannot drive the server; an allowed origin and a client sending none can.
func TestGuardRefusesOrigin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := server(t, Config{Origins: []string{"http://localhost:6274"}})
	_, err := connect(ctx, url, http.Header{"Origin": {"https://evil.example"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), http.StatusText(http.StatusForbidden))
	for _, h := range []http.Header{{}, {"Origin": {"http://localhost:6274"}}} {
		cs, err := connect(ctx, url, h)
		require.NoError(t, err, h)
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "ping"})
		assert.NoError(t, err)
		require.NoError(t, cs.Close())
	}
}

// TestGuardRequiresToken: with a token, a client without it (or with
// another) is refused before MCP; with it, served.
func TestGuardRequiresToken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := server(t, Config{Token: "s3cret-token"})
	for _, h := range []http.Header{{}, {"Authorization": {"Bearer wrong"}}, {"Authorization": {"s3cret-token"}}} {
		_, err := connect(ctx, url, h)
		require.Error(t, err, h)
		assert.Contains(t, err.Error(), http.StatusText(http.StatusUnauthorized))
	}
	cs, err := connect(ctx, url, http.Header{"Authorization": {"Bearer s3cret-token"}})
	require.NoError(t, err)
	require.NoError(t, cs.Close())
	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
}

// TestCheckListenRefusesExposedWithoutToken: beyond loopback only with a
// token.
func TestCheckListenRefusesExposedWithoutToken(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]error{
		"127.0.0.1:8765": nil, "[::1]:8765": nil, "localhost:0": nil,
		"0.0.0.0:8765": ErrExposedWithoutToken, ":8765": ErrExposedWithoutToken, "10.0.0.5:8765": ErrExposedWithoutToken,
		"8765": ErrBadAddress,
	} {
		err := CheckListen(addr, "")
		if want == nil {
			assert.NoError(t, err, addr)
		} else {
			assert.True(t, errors.Is(err, want), "%s: %v", addr, err)
		}
	}
	assert.NoError(t, CheckListen("0.0.0.0:8765", "a-token"))
	assert.ErrorIs(t, CheckOrigins([]string{"localhost:3000"}), ErrBadOrigin)
	assert.NoError(t, CheckOrigins([]string{"http://localhost:3000"}))
}
