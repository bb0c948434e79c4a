package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/mcpgate"
	"github.com/interlockhq/interlock/internal/mcphttp"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// The _meta keys as documented in docs/mcp.md, spelled out so a change of
// the wire is a failing test.
const (
	wireExecutionKey = "io.interlock/executionKey"
	wireCallDigest   = "io.interlock/callDigest"
)

// newExecutorWorld is a proxy gating pay whose agent runs before (when not
// nil) on the upstream call after the approval and before its check, and a
// client of it. The returned context, for the client's calls, ends first
// on cleanup, so a test that fails while a call waits does not hang.
func newExecutorWorld(t *testing.T, before func(context.Context, *mcp.CallToolParams) error) (*proxyWorld, *mcp.ClientSession, context.Context) {
	t.Helper()
	w := &proxyWorld{world: newWorld(t), up: newUpstream(t)}
	g, err := mcpgate.Parse("tool:pay")
	require.NoError(t, err)
	w.proxy = w.startProxyNoWorker(g)
	w.proxy.beforeCheck = before
	w.wk = w.worker(ProxyAgent, w.proxy.Agent())
	cs := httpClient(t, w.ctx, serveHTTP(t, w.proxy.Server(), mcphttp.Config{}), nil)
	ctx, cancel := context.WithCancel(w.ctx)
	t.Cleanup(func() {
		// A test that failed while a call waits leaves its interrupt
		// open, and the proxy's handler waiting on it: deny it, so the
		// servers close.
		cancel()
		dctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		ps, _ := w.approver.Pending(dctx)
		for _, p := range ps {
			_, _ = w.approver.Decide(dctx, processor.DecisionRequest{RunID: p.RunID, InterruptID: p.ID,
				Status: subjects.StatusCancelled, Approver: "ada", Comment: "the test ended"})
		}
	})
	return w, cs, ctx
}

func digestOf(t *testing.T, tool string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	d, err := subjects.CallDigest(tool, raw)
	require.NoError(t, err)
	return d
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestProxyExecutionKeyInMeta: the interrupt carries the call (votes bind
// to its digest); the approved call reaches the upstream with the
// decision's execution key and approved digest in its _meta, and the key
// is the same on a re-run of the pass (the first attempt is cut short
// before the call and the pass runs again).
func TestProxyExecutionKeyInMeta(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	w, cs, ctx := newExecutorWorld(t, func(_ context.Context, params *mcp.CallToolParams) error {
		mu.Lock()
		defer mu.Unlock()
		k, _ := params.Meta[wireExecutionKey].(string)
		seen = append(seen, k)
		if len(seen) == 1 {
			return processor.Retryable(errors.New("the pass is cut short before the call"))
		}
		return nil
	})
	args := map[string]any{"amount": 40, "to": "acme"}
	done := callAsync(ctx, cs, "pay", args)
	p := w.pending()
	require.NotNil(t, p.Call, "the interrupt carries the call")
	assert.Equal(t, "pay", p.Call.Tool)
	assert.Equal(t, digestOf(t, "pay", args), p.Call.Digest)

	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")
	res := <-done
	require.False(t, res.IsError, text(res))
	assert.Equal(t, []upcall{{"pay", map[string]any{"amount": 40.0, "to": "acme"}}}, w.up.got())
	metas := w.up.gotMeta()
	require.Len(t, metas, 1)
	key, _ := metas[0][wireExecutionKey].(string)
	assert.Regexp(t, hex64, key)
	assert.Equal(t, digestOf(t, "pay", args), metas[0][wireCallDigest])
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "the pass ran twice")
	assert.Equal(t, []string{key, key}, seen, "the same key on the re-run of the pass")
}

// TestProxyEditedCallDigest: an approval with edited arguments (the
// decision's arguments) approves the edited call: the upstream gets the
// edited arguments and the edited call's digest, not the proposed one's.
func TestProxyEditedCallDigest(t *testing.T) {
	t.Parallel()
	w, cs, ctx := newExecutorWorld(t, nil)
	proposed := map[string]any{"amount": 4000, "to": "acme"}
	edited := map[string]any{"amount": 40, "to": "acme"}
	done := callAsync(ctx, cs, "pay", proposed)
	p := w.pending()
	v, err := w.approver.Decide(w.ctx, processor.DecisionRequest{RunID: p.RunID, InterruptID: p.ID,
		Status: subjects.StatusResolved, Approver: "ada", Arguments: edited, Payload: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome, "%+v", v)
	res := <-done
	require.False(t, res.IsError, text(res))
	assert.Equal(t, []upcall{{"pay", map[string]any{"amount": 40.0, "to": "acme"}}}, w.up.got())
	metas := w.up.gotMeta()
	require.Len(t, metas, 1)
	assert.Equal(t, digestOf(t, "pay", edited), metas[0][wireCallDigest])
	assert.NotEqual(t, digestOf(t, "pay", proposed), metas[0][wireCallDigest])
	assert.Regexp(t, hex64, metas[0][wireExecutionKey])
}

// TestProxyRefusesCallNotApproved: the arguments about to be sent are
// altered after the approval (a test hook standing for a defect or a
// tampered pass): the proxy's check refuses, the upstream is never
// called, the client gets isError and the run's outcome says why.
func TestProxyRefusesCallNotApproved(t *testing.T) {
	t.Parallel()
	w, cs, ctx := newExecutorWorld(t, func(_ context.Context, params *mcp.CallToolParams) error {
		params.Arguments = map[string]any{"amount": 4000, "to": "mallory"}
		return nil
	})
	done := callAsync(ctx, cs, "pay", map[string]any{"amount": 40, "to": "acme"})
	p := w.pending()
	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")
	res := <-done
	require.True(t, res.IsError)
	assert.Contains(t, text(res), "not the approved call")
	assert.Contains(t, text(res), processor.ErrCallMismatch.Error())
	assert.Empty(t, w.up.got(), "the upstream is never called")
	st, err := ReadStatus(w.ctx, w.conn(), ProxyAgent, p.RunID)
	require.NoError(t, err)
	assert.Equal(t, StatusCallRefused, st.Status)
	assert.Contains(t, st.Error, digestOf(t, "pay", map[string]any{"amount": 40, "to": "acme"}))
}

// TestProxyRefusesUnboundEdit: an edit only in the payload ({"arguments":
// …}) is not what the approval's digest covers (the proposed call): the
// call is refused, not made with the payload's arguments.
func TestProxyRefusesUnboundEdit(t *testing.T) {
	t.Parallel()
	w, cs, ctx := newExecutorWorld(t, nil)
	done := callAsync(ctx, cs, "pay", map[string]any{"amount": 40, "to": "acme"})
	p := w.pending()
	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved,
		map[string]any{"arguments": map[string]any{"amount": 4000, "to": "mallory"}}, "")
	res := <-done
	require.True(t, res.IsError)
	assert.Contains(t, text(res), "not the approved call")
	assert.Empty(t, w.up.got(), "the upstream is never called")
}
