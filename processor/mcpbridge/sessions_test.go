package mcpbridge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// endLimit bounds a session's end (the client's Close, its DELETE) while
// one of its calls waits: well under testMaxWait, the bound the waiting
// call would return at by itself.
const endLimit = 5 * time.Second

// tasksHTTP serves srv over streamable HTTP under tasks' layer, as
// `interlock mcp` does.
func tasksHTTP(t *testing.T, tasks *Tasks, srv *mcp.Server) string {
	t.Helper()
	ts := httptest.NewServer(tasks.HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	t.Cleanup(ts.Close)
	return ts.URL
}

// endsPromptly ends cs's session at url the way a client that exits does:
// a DELETE naming it, sent while its call waits (the go-sdk client's own
// Close sends it only once its calls returned). It fails t if the DELETE
// is not answered 204 within endLimit.
func endsPromptly(t *testing.T, ctx context.Context, url string, cs *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, endLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "ending the session (after %v; want under %v)", time.Since(start).Round(time.Second), endLimit)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// TestSessionEndedWhileWaitApproval: a client ends its HTTP session while
// its wait_approval waits; the DELETE returns at once, and the run is
// untouched: still pending, then approved, read by check_approval.
func TestSessionEndedWhileWaitApproval(t *testing.T) {
	t.Parallel()
	w, s := serveWorld(t)
	url := tasksHTTP(t, s.Tasks(), s.Server())
	var progressed atomic.Int32
	cs := httpClient(t, w.ctx, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed.Add(1) }})
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "deploy", "approvers": []string{"ada"}}, &st)
	require.Equal(t, StatusPending, st.Status)

	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(w.ctx, &mcp.CallToolParams{Name: "wait_approval", Arguments: map[string]any{"id": st.RunID},
			Meta: mcp.Meta{"progressToken": "p1"}})
		done <- err
	}()
	require.Eventually(t, func() bool { return progressed.Load() > 0 }, waitLimit, 20*time.Millisecond)
	endsPromptly(t, w.ctx, url, cs)
	assert.Error(t, await(t, done, "wait_approval's end"))

	other := httpClient(t, w.ctx, url, nil)
	var again Status
	call(t, w.ctx, other, "check_approval", map[string]any{"id": st.RunID}, &again)
	assert.Equal(t, StatusPending, again.Status)
	w.decide(st.RunID, st.InterruptID, "ada", subjects.StatusResolved, nil, "")
	call(t, w.ctx, other, "wait_approval", map[string]any{"id": st.RunID}, &again)
	assert.Equal(t, StatusApproved, again.Status)
}

// TestSessionEndedWhileGatedCall: a client ends its HTTP session while its
// gated call waits through the proxy; the DELETE returns at once, and a
// later approval still makes the call, once, its result in the run.
func TestSessionEndedWhileGatedCall(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	var progressed atomic.Int32
	url := tasksHTTP(t, w.proxy.Tasks(), w.proxy.Server())
	cs := httpClient(t, w.ctx, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed.Add(1) }})
	done := callAsync(w.ctx, cs, "pay", map[string]any{"amount": 40, "to": "acme"})
	p := w.pending()
	require.Eventually(t, func() bool { return progressed.Load() > 0 }, waitLimit, 20*time.Millisecond)
	endsPromptly(t, w.ctx, url, cs)
	assert.True(t, await(t, done, "the call's end").IsError)
	assert.Empty(t, w.up.got())

	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")
	var st Status
	c := w.conn()
	require.Eventually(t, func() bool {
		var err error
		st, err = ReadStatus(w.ctx, c, ProxyAgent, p.RunID)
		return err == nil && st.Done()
	}, waitLimit, 20*time.Millisecond)
	assert.Equal(t, StatusApproved, st.Status)
	assert.Equal(t, []upcall{{"pay", map[string]any{"amount": 40.0, "to": "acme"}}}, w.up.got())
}

// bearer adds a bearer token to each request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSessionEndedOnlyByItsUser: where tokens name users, a DELETE naming
// another user's session (which the SDK refuses, 403) leaves its waiting
// call alone; its own user's DELETE ends it at once.
func TestSessionEndedOnlyByItsUser(t *testing.T) {
	t.Parallel()
	w, s := serveWorld(t)
	users := map[string]string{"ta": "ada", "tb": "bob"}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		u, ok := users[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: u, Expiration: time.Now().Add(time.Hour)}, nil
	}
	srv := s.Server()
	ts := httptest.NewServer(auth.RequireBearerToken(verify, nil)(
		s.Tasks().HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))))
	t.Cleanup(ts.Close)
	var progressed atomic.Int32
	cs := connect(t, w.ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL, DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{"ta"}}}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed.Add(1) }})
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "deploy", "approvers": []string{"ada"}}, &st)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(w.ctx, &mcp.CallToolParams{Name: "wait_approval", Arguments: map[string]any{"id": st.RunID},
			Meta: mcp.Meta{"progressToken": "p1"}})
		done <- err
	}()
	require.Eventually(t, func() bool { return progressed.Load() > 0 }, waitLimit, 20*time.Millisecond)

	del := func(token string) int {
		ctx, cancel := context.WithTimeout(w.ctx, endLimit)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, ts.URL, nil)
		require.NoError(t, err)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, del("tb"))
	// endSession runs before the SDK answers: the wait is still bound.
	s.tasks.mu.Lock()
	sw := s.tasks.sessions[cs.ID()]
	s.tasks.mu.Unlock()
	require.NotNil(t, sw, "bob's DELETE ended ada's wait")
	assert.NoError(t, sw.ctx.Err())

	assert.Equal(t, http.StatusNoContent, del("ta"))
	assert.Error(t, await(t, done, "wait_approval's end"))
}
