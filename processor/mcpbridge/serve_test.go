package mcpbridge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/mcphttp"
	"github.com/interlockhq/interlock/subjects"
)

// serveWorld is a world with the serve agent's worker and a Serve.
func serveWorld(t *testing.T) (*world, *Serve) {
	w := newWorld(t)
	w.worker(ServeAgent, ApprovalAgent())
	s := NewServe(w.conn(), Config{Poll: 100 * time.Millisecond, MaxWait: testMaxWait, Logger: quiet})
	t.Cleanup(s.Close)
	return w, s
}

// TestServeApproveOverHTTP: request_approval over streamable HTTP answers
// with an id once the interrupt is stored; ada approves through
// processor.Client with an answer; wait_approval returns it, with progress
// notifications meanwhile.
func TestServeApproveOverHTTP(t *testing.T) {
	t.Parallel()
	w, s := serveWorld(t)
	var progressed atomic.Int32
	cs := httpClient(t, w.ctx, serveHTTP(t, s.Server(), mcphttp.Config{}), &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed.Add(1) }})
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "deploy to prod", "arguments": map[string]any{"version": "1.2"},
		"approvers": []string{"ada"}, "responseSchema": map[string]any{"type": "object", "required": []string{"window"}}}, &st)
	require.Equal(t, StatusPending, st.Status)
	require.NotEmpty(t, st.InterruptID)

	done := make(chan Status, 1)
	go func() {
		var got Status
		res, err := cs.CallTool(w.ctx, &mcp.CallToolParams{Name: "wait_approval", Arguments: map[string]any{"id": st.RunID},
			Meta: mcp.Meta{"progressToken": "p1"}})
		if err == nil && !res.IsError {
			_ = jsonUnmarshal(text(res), &got)
		}
		done <- got
	}()
	require.Eventually(t, func() bool { return progressed.Load() > 0 }, waitLimit, 20*time.Millisecond)
	w.decide(st.RunID, st.InterruptID, "ada", subjects.StatusResolved, map[string]any{"window": "tonight"}, "go ahead")
	got := await(t, done, "wait_approval's answer")
	assert.Equal(t, StatusApproved, got.Status)
	assert.Equal(t, "ada", got.Approver)
	assert.Equal(t, "go ahead", got.Comment)
	assert.JSONEq(t, `{"window":"tonight"}`, string(got.Answer.Answer))

	var again Status
	call(t, w.ctx, cs, "check_approval", map[string]any{"id": st.RunID}, &again)
	assert.Equal(t, got, again)
}

// TestServeDenyOverStdio: the same through a subprocess speaking stdio;
// bob denies.
func TestServeDenyOverStdio(t *testing.T) {
	t.Parallel()
	w, _ := serveWorld(t)
	cs := stdioClient(t, w.ctx, "serve", "NATS_URL="+w.srv.URL())
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "drop table", "approvers": []string{"bob"}}, &st)
	require.Equal(t, StatusPending, st.Status)
	w.decide(st.RunID, st.InterruptID, "bob", subjects.StatusCancelled, nil, "not today")
	var got Status
	call(t, w.ctx, cs, "wait_approval", map[string]any{"id": st.RunID}, &got)
	assert.Equal(t, StatusDenied, got.Status)
	assert.Equal(t, "bob", got.Approver)
	assert.Equal(t, "not today", got.Comment)
}

// TestServeExpiry: nobody decides by the deadline: expired.
func TestServeExpiry(t *testing.T) {
	t.Parallel()
	w, s := serveWorld(t)
	cs := httpClient(t, w.ctx, serveHTTP(t, s.Server(), mcphttp.Config{}), nil)
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "rotate keys",
		// RFC 3339 drops the fraction: 4 to 5 s from now, which a
		// request_approval slowed by load does not overtake (at 2 s, 1 to 2 s
		// from now, it could: "deadline has passed").
		"deadline": time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339)}, &st)
	var got Status
	call(t, w.ctx, cs, "wait_approval", map[string]any{"id": st.RunID}, &got)
	assert.Equal(t, StatusExpired, got.Status)
}

// TestServeBadRequests: what request_approval refuses, before any run.
func TestServeBadRequests(t *testing.T) {
	t.Parallel()
	w, s := serveWorld(t)
	cs := httpClient(t, w.ctx, serveHTTP(t, s.Server(), mcphttp.Config{}), nil)
	for _, args := range []map[string]any{
		{"action": ""},
		{"action": "x", "approvers": []string{"ada.bob"}},
		{"action": "x", "deadline": "tomorrow"},
		{"action": "x", "deadline": "2001-01-01T00:00:00Z"},
		{"action": "x", "responseSchema": map[string]any{"$ref": "https://example.com/s.json"}},
	} {
		res := call(t, w.ctx, cs, "request_approval", args, nil)
		assert.True(t, res.IsError, "%v: %s", args, text(res))
		assert.Contains(t, text(res), ErrBadRequest.Error())
	}
	res := call(t, w.ctx, cs, "check_approval", map[string]any{"id": "a.b"}, nil)
	assert.True(t, res.IsError)
	var st Status
	call(t, w.ctx, cs, "check_approval", map[string]any{"id": "no-such-run"}, &st)
	assert.Equal(t, StatusQueued, st.Status)
}

// pendingApproval serves the bridge over HTTP and asks ada to approve
// "rotate keys": the world, the client's session and the pending status.
func pendingApproval(t *testing.T) (*world, *mcp.ClientSession, Status) {
	t.Helper()
	w, s := serveWorld(t)
	cs := httpClient(t, w.ctx, serveHTTP(t, s.Server(), mcphttp.Config{}), nil)
	var st Status
	call(t, w.ctx, cs, "request_approval", map[string]any{"action": "rotate keys", "approvers": []string{"ada"}}, &st)
	require.Equal(t, StatusPending, st.Status)
	return w, cs, st
}

// TestStatusAfterANotice: a reminder or escalation stored after the
// suspension (the runs stream holds notices too) leaves the run pending,
// not "queued".
func TestStatusAfterANotice(t *testing.T) {
	t.Parallel()
	w, _, st := pendingApproval(t)
	for _, kind := range []subjects.Kind{subjects.KindReminder, subjects.KindEscalated} {
		subject, err := w.conn().Namespace().Notice(kind, ServeAgent, st.RunID)
		require.NoError(t, err)
		_, err = w.conn().Publish(w.ctx, subject, []byte(`{"version":1}`), "", nil)
		require.NoError(t, err)
		got, err := ReadStatus(w.ctx, w.conn(), ServeAgent, st.RunID)
		require.NoError(t, err)
		assert.Equal(t, StatusPending, got.Status, "after a %s notice", kind)
		assert.Equal(t, st.InterruptID, got.InterruptID)
	}
}

// TestStatusNoticeAfterTheReplay: the coordinator publishes an expiry's
// notice after it queued the replay, so a quick replay's completion can be
// stored before the notice. The status is the completion's, not the last
// suspension's: read after a late notice it said "pending" for good, and
// TestServeExpiry's wait_approval ran out its 30 s under load.
func TestStatusNoticeAfterTheReplay(t *testing.T) {
	t.Parallel()
	w, cs, st := pendingApproval(t)
	w.decide(st.RunID, st.InterruptID, "ada", subjects.StatusCancelled, nil, "no")
	var got Status
	call(t, w.ctx, cs, "wait_approval", map[string]any{"id": st.RunID}, &got)
	require.Equal(t, StatusDenied, got.Status)
	subject, err := w.conn().Namespace().Notice(subjects.KindExpired, ServeAgent, st.RunID)
	require.NoError(t, err)
	_, err = w.conn().Publish(w.ctx, subject, []byte(`{"version":1}`), "", nil)
	require.NoError(t, err)
	again, err := ReadStatus(w.ctx, w.conn(), ServeAgent, st.RunID)
	require.NoError(t, err)
	assert.Equal(t, StatusDenied, again.Status, "the completion stands after a late notice")
}
