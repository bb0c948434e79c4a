package mcpbridge

import (
	"context"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrSessionEnded is the cause of a waiting call's context when its client
// ended its streamable HTTP session (DELETE): the call returns at once,
// nothing is decided and the run goes on.
var ErrSessionEnded = errors.New("the client ended its session")

// sessionWaits is one HTTP session's calls that wait: ctx ends when its
// client ends the session.
type sessionWaits struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	// user is the token's user of the calls (empty without one); the SDK
	// makes every request of a session carry the user that created it.
	user string
	n    int
}

func userOf(ti *auth.TokenInfo) string {
	if ti == nil {
		return ""
	}
	return ti.UserID
}

// bound returns ctx, also ended when req's client ends its streamable HTTP
// session (Tasks.HTTP sees the DELETE); release frees it. Calls on no
// session (stdio, stateless HTTP) get ctx unchanged.
//
// go-sdk v1.8.0 ends a request's context only on notifications/cancelled:
// without this, a DELETE waits (in ServerSession.Close) for a waiting call
// until it returns by itself (MaxWait, the proxy's Timeout).
func (t *Tasks) bound(ctx context.Context, req *mcp.CallToolRequest) (context.Context, func()) {
	if req == nil || req.Session == nil || req.Session.ID() == "" {
		return ctx, func() {}
	}
	id, user := req.Session.ID(), ""
	if req.Extra != nil {
		user = userOf(req.Extra.TokenInfo)
	}
	t.mu.Lock()
	sw := t.sessions[id]
	if sw == nil {
		sctx, cancel := context.WithCancelCause(context.Background())
		sw = &sessionWaits{ctx: sctx, cancel: cancel, user: user}
		t.sessions[id] = sw
	}
	if sw.user != user {
		t.mu.Unlock()
		return ctx, func() {}
	}
	sw.n++
	t.mu.Unlock()
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(sw.ctx, func() { cancel(context.Cause(sw.ctx)) })
	return cctx, func() {
		stop()
		cancel(nil)
		t.mu.Lock()
		defer t.mu.Unlock()
		if sw.n--; sw.n == 0 && t.sessions[id] == sw {
			delete(t.sessions, id)
			sw.cancel(nil)
		}
	}
}

// endSession ends the waits of the session a DELETE names, if the SDK
// accepts that DELETE as it does (lookupSession): the session is known (it
// has waits here) and was created without a token's user, or the DELETE
// carries the same user. Any other DELETE leaves them alone.
func (t *Tasks) endSession(r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sw := t.sessions[id]
	if sw == nil || (sw.user != "" && sw.user != userOf(auth.TokenInfoFromContext(r.Context()))) {
		return
	}
	delete(t.sessions, id)
	sw.cancel(ErrSessionEnded)
}
