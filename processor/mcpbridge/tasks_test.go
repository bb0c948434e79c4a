package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/mcpgate"
	"github.com/interlockhq/interlock/subjects"
)

// rawClient speaks JSON-RPC messages from the spec on a connection, one
// request at a time.
type rawClient struct {
	t    *testing.T
	ctx  context.Context
	conn mcp.Connection
	n    int64
}

// rawConn connects a raw client to srv through tasks, over an in-memory
// connection (what stdio carries).
func rawConn(t *testing.T, ctx context.Context, srv *mcp.Server, tasks *Tasks) *rawClient {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, tasks.Transport(st), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	conn, err := ct.Connect(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rawClient{t: t, ctx: ctx, conn: conn}
}

// call sends method with params and returns the result, or the error.
func (c *rawClient) call(method string, params any) (map[string]any, *jsonrpc.Error) {
	c.t.Helper()
	c.n++
	id, err := jsonrpc.MakeID(float64(c.n))
	require.NoError(c.t, err)
	raw, err := json.Marshal(params)
	require.NoError(c.t, err)
	require.NoError(c.t, c.conn.Write(c.ctx, &jsonrpc.Request{ID: id, Method: method, Params: raw}))
	for {
		m, err := c.conn.Read(c.ctx)
		require.NoError(c.t, err)
		resp, ok := m.(*jsonrpc.Response)
		if !ok || resp.ID != id {
			continue
		}
		return decodeResp(c.t, resp)
	}
}

func decodeResp(t *testing.T, resp *jsonrpc.Response) (map[string]any, *jsonrpc.Error) {
	t.Helper()
	if resp.Error != nil {
		var we *jsonrpc.Error
		require.ErrorAs(t, resp.Error, &we)
		return nil, we
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(resp.Result, &out))
	return out, nil
}

func (c *rawClient) ok(method string, params any) map[string]any {
	c.t.Helper()
	res, we := c.call(method, params)
	require.Nil(c.t, we, "%s: %+v", method, we)
	return res
}

func (c *rawClient) notify(method string) {
	require.NoError(c.t, c.conn.Write(c.ctx, &jsonrpc.Request{Method: method, Params: json.RawMessage(`{}`)}))
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func firstText(res map[string]any) string {
	content, _ := res["content"].([]any)
	for _, c := range content {
		if s, ok := dig(c, "text").(string); ok {
			return s
		}
	}
	return ""
}

// TestTasks20251125 speaks the 2025-11-25 tasks messages from the spec to
// the proxy (stdio framing): the capability and the tools' taskSupport are
// offered; a gated call with a task parameter is answered with a task only
// once its interrupt is stored; tasks/get polls it; tasks/cancel is refused
// (an MCP client is not an approver); after the approval, tasks/result
// returns the upstream's result, and a restarted proxy answers for the same
// task without calling the upstream again. An ungated call asked as a task
// is made at once, its task completed.
func TestTasks20251125(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	c := rawConn(t, w.ctx, w.proxy.Server(), w.proxy.Tasks())

	init := c.ok("initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	assert.Equal(t, Revision20251125, init["protocolVersion"])
	require.NotNil(t, dig(init, "capabilities", "tasks", "requests", "tools", "call"), "%v", init["capabilities"])
	c.notify("notifications/initialized")
	tools := c.ok("tools/list", map[string]any{})
	for _, tl := range tools["tools"].([]any) {
		assert.Equal(t, "optional", dig(tl, "execution", "taskSupport"), "%v", tl)
	}

	// Ungated, asked as a task: made at once.
	res := c.ok("tools/call", map[string]any{"name": "read_file", "arguments": map[string]any{"path": "a"}, "task": map[string]any{"ttl": 60000}})
	assert.Equal(t, "completed", dig(res, "task", "status"), "%v", res)
	direct := dig(res, "task", "taskId").(string)
	assert.Equal(t, "contents of a", firstText(c.ok("tasks/result", map[string]any{"taskId": direct})))

	// Gated: a task once the interrupt is stored.
	res = c.ok("tools/call", map[string]any{"name": "pay", "arguments": map[string]any{"amount": 5, "to": "acme"}, "task": map[string]any{}})
	tk, _ := res["task"].(map[string]any)
	require.NotNil(t, tk, "%v", res)
	id := tk["taskId"].(string)
	assert.Equal(t, "working", tk["status"])
	assert.Contains(t, tk, "ttl")
	assert.EqualValues(t, 100, tk["pollInterval"])
	run, _, _ := strings.Cut(id, ".") // the task id is the run id and a MAC
	st, err := ReadStatus(w.ctx, w.conn(), ProxyAgent, run)
	require.NoError(t, err)
	require.Equal(t, StatusPending, st.Status, "the interrupt is stored before the task is answered")
	created, err := time.Parse(time.RFC3339Nano, tk["createdAt"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), created, time.Minute)

	got := c.ok("tasks/get", map[string]any{"taskId": id})
	assert.Equal(t, "working", got["status"])
	assert.Contains(t, got["statusMessage"], "decision")
	_, we := c.call("tasks/cancel", map[string]any{"taskId": id})
	require.NotNil(t, we)
	assert.EqualValues(t, CodeCancelRefused, we.Code)
	assert.Contains(t, we.Message, "interlock deny "+run)
	_, we = c.call("tasks/list", map[string]any{})
	require.NotNil(t, we)
	assert.EqualValues(t, jsonrpc.CodeMethodNotFound, we.Code)
	_, we = c.call("tasks/get", map[string]any{"taskId": "0190f0b4-0000-7000-8000-000000000000"})
	require.NotNil(t, we)
	assert.EqualValues(t, jsonrpc.CodeInvalidParams, we.Code)

	p := w.pending()
	require.Equal(t, run, p.RunID, "the task id names the run")
	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")
	require.Eventually(t, func() bool {
		return c.ok("tasks/get", map[string]any{"taskId": id})["status"] == "completed"
	}, waitLimit, 50*time.Millisecond)
	out := c.ok("tasks/result", map[string]any{"taskId": id})
	assert.Equal(t, "paid", firstText(out))
	assert.Equal(t, id, dig(out, "_meta", metaRelatedTask, "taskId"))

	// A restarted proxy answers for the task, from the run.
	g, err := mcpgate.Parse("tool:pay")
	require.NoError(t, err)
	second := w.startProxyNoWorker(g)
	c2 := rawConn(t, w.ctx, second.Server(), second.Tasks())
	c2.ok("initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	c2.notify("notifications/initialized")
	assert.Equal(t, "completed", c2.ok("tasks/get", map[string]any{"taskId": id})["status"])
	assert.Equal(t, "paid", firstText(c2.ok("tasks/result", map[string]any{"taskId": id})))
	_, we = c2.call("tasks/cancel", map[string]any{"taskId": id})
	require.NotNil(t, we)
	assert.EqualValues(t, jsonrpc.CodeInvalidParams, we.Code, "a finished task cannot be cancelled")
	assert.Equal(t, []upcall{{"read_file", map[string]any{"path": "a"}}, {"pay", map[string]any{"amount": 5.0, "to": "acme"}}}, w.up.got())
}

// post sends one JSON-RPC request over HTTP and decodes the answer (JSON
// or an event stream).
func post(t *testing.T, url string, id int, method string, params any) (map[string]any, *jsonrpc.Error) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", Revision20260728)
	req.Header.Set("Mcp-Method", method)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	if i := bytes.Index(raw, []byte("data: ")); i >= 0 && resp.Header.Get("Content-Type") == "text/event-stream" {
		raw = raw[i+len("data: "):]
		raw = raw[:bytes.IndexByte(raw, '\n')]
	}
	m, err := jsonrpc.DecodeMessage(raw)
	require.NoError(t, err, "%s", raw)
	return decodeResp(t, m.(*jsonrpc.Response))
}

// modernMeta is a 2026-07-28 request's _meta, declaring the tasks
// extension or not.
func modernMeta(tasks bool) map[string]any {
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{ExtensionTasks: map[string]any{}}
	}
	return map[string]any{metaProtocolVersion: Revision20260728, metaClientCapabilities: caps,
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "raw", "version": "1"}}
}

// TestTasks20260728 speaks the io.modelcontextprotocol/tasks extension's
// messages from its spec to the proxy over streamable HTTP: a gated call
// from a client declaring the extension is answered with a task
// (resultType "task") once its interrupt is stored; an ungated one with
// its result; tasks/get from a client not declaring the extension gets
// -32021; a denied call's task completes with the tool error inlined.
func TestTasks20260728(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	p := w.proxy
	ts := httptest.NewServer(p.Tasks().HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.Server() },
		&mcp.StreamableHTTPOptions{Stateless: true})))
	t.Cleanup(ts.Close)

	res, we := post(t, ts.URL, 1, "tools/call", map[string]any{"name": "read_file", "arguments": map[string]any{"path": "b"}, "_meta": modernMeta(true)})
	require.Nil(t, we)
	assert.NotEqual(t, "task", res["resultType"])
	assert.Equal(t, "contents of b", firstText(res))

	res, we = post(t, ts.URL, 2, "tools/call", map[string]any{"name": "pay", "arguments": map[string]any{"amount": 9, "to": "x"}, "_meta": modernMeta(true)})
	require.Nil(t, we)
	assert.Equal(t, "task", res["resultType"], "%v", res)
	assert.Equal(t, "working", res["status"])
	assert.Contains(t, res, "ttlMs")
	assert.EqualValues(t, 100, res["pollIntervalMs"])
	id := res["taskId"].(string)
	run, _, _ := strings.Cut(id, ".") // the task id is the run id and a MAC
	st, err := ReadStatus(w.ctx, w.conn(), ProxyAgent, run)
	require.NoError(t, err)
	require.Equal(t, StatusPending, st.Status, "the interrupt is stored before the task is answered")

	_, we = post(t, ts.URL, 3, "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(false)})
	require.NotNil(t, we)
	assert.EqualValues(t, CodeMissingCapability, we.Code)
	assert.Contains(t, string(we.Data), ExtensionTasks)

	got, we := post(t, ts.URL, 4, "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(true)})
	require.Nil(t, we)
	assert.Equal(t, "complete", got["resultType"])
	assert.Equal(t, "working", got["status"])
	ack, we := post(t, ts.URL, 5, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{}, "_meta": modernMeta(true)})
	require.Nil(t, we)
	assert.Equal(t, "complete", ack["resultType"])

	pi := w.pending()
	w.decide(pi.RunID, pi.ID, "ada", subjects.StatusCancelled, nil, "not this week")
	require.Eventually(t, func() bool {
		got, we = post(t, ts.URL, 6, "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(true)})
		return we == nil && got["status"] == "completed"
	}, waitLimit, 50*time.Millisecond)
	result, _ := got["result"].(map[string]any)
	require.NotNil(t, result, "%v", got)
	assert.Equal(t, true, result["isError"])
	assert.Contains(t, firstText(result), "denied by ada")
	assert.Equal(t, []upcall{{"read_file", map[string]any{"path": "b"}}}, w.up.got(), "the denied call never reaches the upstream")
}

// TestTasksServeRequestApproval: `interlock mcp serve`'s request_approval
// asked as a 2025-11-25 task is answered with a task, finished with the
// decision.
func TestTasksServeRequestApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := NewServe(w.conn(), Config{Poll: 100 * time.Millisecond, MaxWait: testMaxWait, Logger: quiet})
	t.Cleanup(s.Close)
	w.worker(ServeAgent, ApprovalAgent())
	c := rawConn(t, w.ctx, s.Server(), s.Tasks())
	c.ok("initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	c.notify("notifications/initialized")
	tools := c.ok("tools/list", map[string]any{})
	for _, tl := range tools["tools"].([]any) {
		want := any(nil)
		if dig(tl, "name") == "request_approval" {
			want = "optional"
		}
		assert.Equal(t, want, dig(tl, "execution", "taskSupport"), "%v", tl)
	}
	res := c.ok("tools/call", map[string]any{"name": "request_approval", "arguments": map[string]any{"action": "deploy"}, "task": map[string]any{}})
	id, _ := dig(res, "task", "taskId").(string)
	require.NotEmpty(t, id, "%v", res)
	ps, err := w.approver.Pending(w.ctx)
	require.NoError(t, err)
	var pi subjects.PendingInterrupt
	require.Eventually(t, func() bool {
		ps, err = w.approver.Pending(w.ctx)
		if err != nil || len(ps) != 1 {
			return false
		}
		pi = ps[0]
		return true
	}, waitLimit, 20*time.Millisecond)
	w.decide(pi.RunID, pi.ID, "ada", subjects.StatusResolved, nil, "go")
	out := c.ok("tasks/result", map[string]any{"taskId": id})
	var st Status
	require.NoError(t, json.Unmarshal([]byte(firstText(out)), &st))
	assert.Equal(t, StatusApproved, st.Status)
	assert.Equal(t, "ada", st.Approver)
}

// TestTasksHTTPHostCheck: the task layer answers HTTP requests the SDK
// never sees, so it keeps the SDK's DNS-rebinding check: on a loopback
// listener, a request whose Host is not loopback is refused (403) before
// any task message is read.
func TestTasksHTTPHostCheck(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	p := w.proxy
	ts := httptest.NewServer(p.Tasks().HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.Server() },
		&mcp.StreamableHTTPOptions{Stateless: true})))
	t.Cleanup(ts.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"amount":1,"to":"x"},"task":{}}}`
	req, err := http.NewRequest(http.MethodPost, ts.URL, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Host = "attacker.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	ps, err := w.approver.Pending(w.ctx)
	require.NoError(t, err)
	assert.Empty(t, ps, "no approval was started")
}

// TestTasksDirectBounded: the results of ungated calls a 2025-11-25 client
// asked to run as tasks, held in memory, are bounded: at most maxDirect
// of them (the oldest evicted first), and none over MaxResult (such a
// result is replaced by an error saying so, as for a gated call).
func TestTasksDirectBounded(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	tasks := w.proxy.Tasks()
	tasks.maxDirect = 3
	c := rawConn(t, w.ctx, w.proxy.Server(), tasks)
	c.ok("initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	c.notify("notifications/initialized")
	var ids []string
	for i := range 5 {
		res := c.ok("tools/call", map[string]any{"name": "read_file", "arguments": map[string]any{"path": fmt.Sprint(i)}, "task": map[string]any{}})
		ids = append(ids, dig(res, "task", "taskId").(string))
	}
	tasks.mu.Lock()
	held := len(tasks.direct)
	tasks.mu.Unlock()
	assert.Equal(t, 3, held, "no more than maxDirect held")
	for _, id := range ids[:2] {
		_, we := c.call("tasks/result", map[string]any{"taskId": id})
		require.NotNil(t, we, "the oldest are evicted")
		assert.EqualValues(t, jsonrpc.CodeInvalidParams, we.Code)
	}
	assert.Equal(t, "contents of 4", firstText(c.ok("tasks/result", map[string]any{"taskId": ids[4]})))

	res := c.ok("tools/call", map[string]any{"name": "dump", "arguments": map[string]any{}, "task": map[string]any{}})
	out := c.ok("tasks/result", map[string]any{"taskId": dig(res, "task", "taskId").(string)})
	assert.Equal(t, true, out["isError"])
	assert.Contains(t, firstText(out), "over the")
	tasks.mu.Lock()
	for id, d := range tasks.direct {
		assert.LessOrEqual(t, len(d.result), MaxResult, id)
	}
	tasks.mu.Unlock()
}

// TestTasksBoundToTheirClient: a task's id is not its run id (which
// approvers, Slack cards, inbox links and notifications show) but the run
// id with a MAC under the proxy's task key (kept in the calls bucket, so a
// restarted proxy answers for it): another client that knows the run id
// cannot read the call's result. The task layer answers only clients that
// initialized: on a connection that did not, a task-augmented call, and
// tasks/get or tasks/result, are refused and start nothing.
func TestTasksBoundToTheirClient(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, "tool:pay", nil)
	initialize := func(c *rawClient) {
		c.ok("initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "raw", "version": "1"}})
		c.notify("notifications/initialized")
	}
	a := rawConn(t, w.ctx, w.proxy.Server(), w.proxy.Tasks())
	initialize(a)
	res := a.ok("tools/call", map[string]any{"name": "pay", "arguments": map[string]any{"amount": 5, "to": "acme"}, "task": map[string]any{}})
	id := dig(res, "task", "taskId").(string)
	p := w.pending()
	assert.NotEqual(t, p.RunID, id, "the task id is not the run id")
	require.True(t, strings.HasPrefix(id, p.RunID+"."), id)
	w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")

	b := rawConn(t, w.ctx, w.proxy.Server(), w.proxy.Tasks())
	initialize(b)
	for _, guess := range []string{p.RunID, p.RunID + ".x", p.RunID + id[len(p.RunID):len(id)-1]} {
		for _, method := range []string{"tasks/get", "tasks/result"} {
			_, we := b.call(method, map[string]any{"taskId": guess})
			require.NotNil(t, we, "%s %s", method, guess)
			assert.EqualValues(t, jsonrpc.CodeInvalidParams, we.Code, "%s %s: %+v", method, guess, we)
		}
	}

	c := rawConn(t, w.ctx, w.proxy.Server(), w.proxy.Tasks()) // never initializes
	for _, method := range []string{"tasks/get", "tasks/result"} {
		_, we := c.call(method, map[string]any{"taskId": id})
		require.NotNil(t, we, method)
		assert.EqualValues(t, jsonrpc.CodeInvalidRequest, we.Code, "%s: %+v", method, we)
	}
	_, we := c.call("tools/call", map[string]any{"name": "pay", "arguments": map[string]any{"amount": 6, "to": "x"}, "task": map[string]any{}})
	require.NotNil(t, we)
	assert.EqualValues(t, jsonrpc.CodeInvalidRequest, we.Code)

	// The client that got the task reads it, and so does a restarted proxy.
	require.Eventually(t, func() bool {
		return a.ok("tasks/get", map[string]any{"taskId": id})["status"] == "completed"
	}, waitLimit, 50*time.Millisecond)
	assert.Equal(t, "paid", firstText(a.ok("tasks/result", map[string]any{"taskId": id})))
	g, err := mcpgate.Parse("tool:pay")
	require.NoError(t, err)
	second := w.startProxyNoWorker(g)
	d := rawConn(t, w.ctx, second.Server(), second.Tasks())
	initialize(d)
	assert.Equal(t, "paid", firstText(d.ok("tasks/result", map[string]any{"taskId": id})))
	assert.Equal(t, []upcall{{"pay", map[string]any{"amount": 5.0, "to": "acme"}}}, w.up.got(), "the uninitialized call started nothing")

	// Over HTTP, a 2025-11-25 task request names a session that initialized.
	srv := second.Server()
	ts := httptest.NewServer(second.Tasks().HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	t.Cleanup(ts.Close)
	_, we = post(t, ts.URL, 1, "tasks/get", map[string]any{"taskId": id})
	require.NotNil(t, we)
	assert.EqualValues(t, jsonrpc.CodeInvalidRequest, we.Code, "no session")
	session := func(sid string, id int, method string, params any) (*http.Response, []byte) {
		body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, ts.URL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", Revision20251125)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, raw
	}
	resp, raw := session("", 2, "initialize", map[string]any{"protocolVersion": Revision20251125, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	sid := resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, sid)
	t.Cleanup(func() {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	})
	_, raw = session(sid, 3, "tasks/get", map[string]any{"taskId": id})
	assert.Contains(t, string(raw), `"completed"`, "a client on its initialized session is answered: %s", raw)
	_, raw = session("not-a-session", 4, "tasks/get", map[string]any{"taskId": id})
	assert.Contains(t, string(raw), "not initialized", "%s", raw)
}
