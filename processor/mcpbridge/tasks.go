package mcpbridge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// MCP tasks, at the JSON-RPC layer.
//
// The Go SDK (v1.8.0) has no tasks API: it rejects methods it does not
// know before any middleware sees them, and drops a tools/call's `task`
// parameter. So Tasks sits under the SDK, on the connection (Transport, for
// stdio) or the HTTP handler (HTTP), and answers the task messages itself:
//
//   - revision 2025-11-25 (tasks experimental in the core protocol): the
//     initialize result gains capabilities.tasks.requests.tools.call, each
//     task tool in tools/list gains execution.taskSupport "optional", a
//     tools/call with a `task` parameter is answered with a
//     CreateTaskResult ({"task": Task}), and tasks/get, tasks/result,
//     tasks/list and tasks/cancel are answered here;
//   - revision 2026-07-28 (the io.modelcontextprotocol/tasks extension):
//     the server capabilities list the extension; a tools/call whose
//     per-request client capabilities name it and which waits for a
//     decision is answered with a CreateTaskResult (resultType "task"), and
//     tasks/get (the result inlined once completed), tasks/update and
//     tasks/cancel are answered here.
//
// A task is a run of the server's built-in agent: its state is read from
// the run's last outcome on the runs stream, so a restarted server answers
// for the tasks an earlier one created. A task is answered only once its
// interrupt is stored (tasks/get resolves for it). The proxy's task id is
// the run id, a dot and a MAC of the agent and run id under its task key
// (TaskKey, kept in the calls bucket): the run id is no secret (approvers,
// Slack cards, inbox links and notifications show it), the task id only
// the client that made the call gets. serve's task id is the run id (its
// wait_approval answers any client for a run id alike). Only a client that
// initialized its connection (or, 2026-07-28, names its protocol version
// per request) is answered.
//
// When the SDK gains a tasks API, remove this file's transport and HTTP
// wrappers and patching, and register the runner's methods (taskRunner)
// with the SDK instead.
type Tasks struct {
	c   *jetstream.Client
	r   taskRunner
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	direct map[string]directTask
	// maxDirect bounds len(direct) (maxDirectTasks; lowered in tests).
	maxDirect int
	// key, when set, MACs task ids (taskID); nil: a task id is a run id.
	key []byte
	// servers are the servers the layer is under: an HTTP request of a
	// client that must have initialized names one of their sessions.
	servers []*mcp.Server
	// sessions are the HTTP sessions with calls that wait (bound),
	// by session id.
	sessions map[string]*sessionWaits
}

// taskRunner is what a server gives Tasks: the calls it makes tasks of and
// what a finished one returns.
type taskRunner interface {
	// taskTool reports whether a call of tool may be made a task.
	taskTool(tool string) bool
	// startTask starts the run a call waits on and returns its id; a call
	// that does not wait (not gated, or refused at once) gets its result
	// in res instead, made at once.
	startTask(ctx context.Context, p *mcp.CallToolParamsRaw) (run string, res *mcp.CallToolResult, err error)
	// taskResult is what the call returns once its run ended as st.
	taskResult(st Status) *mcp.CallToolResult
}

// directTask is a call a 2025-11-25 client asked to run as a task that
// did not wait for a decision (an ungated call): it was made at once and
// its result is held in memory for directTTL.
type directTask struct {
	created time.Time
	result  json.RawMessage
}

const directTTL = 10 * time.Minute

// maxDirectTasks bounds the direct tasks one process holds: with each
// result at most MaxResult bytes, 256 of them hold at most 64 MiB. When
// full, the oldest is evicted (its tasks/get then answers no such task).
const maxDirectTasks = 256

// Names and codes of the MCP tasks protocol.
const (
	// ExtensionTasks identifies the tasks extension (2026-07-28).
	ExtensionTasks = "io.modelcontextprotocol/tasks"
	// Revision20251125 is the revision with experimental core tasks.
	Revision20251125 = "2025-11-25"
	// Revision20260728 is the revision with tasks as an extension.
	Revision20260728 = "2026-07-28"

	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaRelatedTask        = "io.modelcontextprotocol/related-task"

	// CodeMissingCapability is the 2026-07-28 error for a client that did
	// not declare the tasks extension on a request that needs it.
	CodeMissingCapability = -32021
	// CodeCancelRefused answers a tasks/cancel of a task that waits for a
	// person's decision: an MCP client is not an approver.
	CodeCancelRefused = -32050
	// CodeNotStored answers a task-augmented call whose interrupt was not
	// stored within Config.Settle: no task is returned.
	CodeNotStored = -32051
)

// Errors of the task layer, each matchable with errors.Is and answered as
// a JSON-RPC error with its own code.
var (
	// ErrNoTask: the task id names no task of this server (-32602).
	ErrNoTask = errors.New("no such task")
	// ErrCancelRefused: tasks/cancel of a waiting task (CodeCancelRefused).
	ErrCancelRefused = errors.New("tasks/cancel refused")
	// ErrTaskTerminal: tasks/cancel of a finished task (-32602).
	ErrTaskTerminal = errors.New("task already finished")
	// ErrNotStored: the interrupt was not stored in time (CodeNotStored).
	ErrNotStored = errors.New("the approval was not stored in time")
	// ErrMissingCapability: a 2026-07-28 request without the extension.
	ErrMissingCapability = errors.New("missing required client capability")
	// ErrNotInitialized: a task request on a connection (or HTTP session)
	// that did not initialize (-32600).
	ErrNotInitialized = errors.New("the connection has not initialized")
)

func newTasks(c *jetstream.Client, r taskRunner, cfg Config) *Tasks {
	return &Tasks{c: c, r: r, cfg: cfg, log: cfg.Logger, direct: map[string]directTask{}, sessions: map[string]*sessionWaits{}, maxDirect: maxDirectTasks}
}

// task is the Task of both revisions: the 2025-11-25 names (ttl,
// pollInterval) or the 2026-07-28 ones (ttlMs, pollIntervalMs, resultType,
// and the result or error inlined).
type task struct {
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage,omitempty"`
	CreatedAt     string          `json:"createdAt"`
	LastUpdatedAt string          `json:"lastUpdatedAt"`
	TTL           *int64          `json:"ttl,omitempty"`
	PollInterval  int64           `json:"pollInterval,omitempty"`
	TTLMs         *int64          `json:"ttlMs,omitempty"`
	PollMs        int64           `json:"pollIntervalMs,omitempty"`
	ResultType    string          `json:"resultType,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         *jsonrpc.Error  `json:"error,omitempty"`
}

// MarshalJSON writes ttl (2025-11-25) or ttlMs (2026-07-28) as null when
// the task has no TTL.
func (t task) MarshalJSON() ([]byte, error) {
	type plain task
	raw, err := json.Marshal(plain(t))
	if err != nil || t.TTL != nil || t.TTLMs != nil {
		return raw, err
	}
	key := `"ttl":null`
	if t.ResultType != "" {
		key = `"ttlMs":null`
	}
	return append(append(raw[:len(raw)-1:len(raw)-1], ','), key+"}"...), nil
}

// The task statuses of both revisions.
const (
	taskWorking   = "working"
	taskCompleted = "completed"
	taskFailed    = "failed"
	taskCancelled = "cancelled"
)

// reqMeta is what Tasks reads of a request's _meta.
type reqMeta struct {
	ProtocolVersion    string `json:"io.modelcontextprotocol/protocolVersion"`
	ClientCapabilities struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	} `json:"io.modelcontextprotocol/clientCapabilities"`
}

// modern reports whether the request follows 2026-07-28 (or later): it
// names its protocol version per request.
func (m reqMeta) modern() bool { return m.ProtocolVersion >= Revision20260728 }

// declares reports whether the request's client declared the extension.
func (m reqMeta) declares() bool {
	_, ok := m.ClientCapabilities.Extensions[ExtensionTasks]
	return ok
}

type callParams struct {
	Meta      json.RawMessage `json:"_meta,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Task      *struct {
		TTL *int64 `json:"ttl,omitempty"`
	} `json:"task,omitempty"`
}

type taskParams struct {
	Meta   json.RawMessage `json:"_meta,omitempty"`
	TaskID string          `json:"taskId"`
}

func metaOf(raw json.RawMessage) reqMeta {
	var m reqMeta
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// claims reports whether Tasks answers req (the SDK does not see it).
func (t *Tasks) claims(req *jsonrpc.Request) bool {
	if !req.IsCall() {
		return false
	}
	switch req.Method {
	case "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update":
		return true
	case "tools/call":
		var p callParams
		if json.Unmarshal(req.Params, &p) != nil || !t.r.taskTool(p.Name) {
			return false
		}
		m := metaOf(p.Meta)
		return p.Task != nil || (m.modern() && m.declares())
	}
	return false
}

// handle answers a request claims accepted.
func (t *Tasks) handle(ctx context.Context, req *jsonrpc.Request) *jsonrpc.Response {
	res, err := t.answer(ctx, req)
	resp := &jsonrpc.Response{ID: req.ID}
	if err != nil {
		resp.Error = wireError(err)
		return resp
	}
	raw, err := json.Marshal(res)
	if err != nil {
		resp.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		return resp
	}
	resp.Result = raw
	return resp
}

func wireError(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we
	}
	code := int64(jsonrpc.CodeInternalError)
	var data json.RawMessage
	switch {
	case errors.Is(err, ErrNoTask), errors.Is(err, ErrTaskTerminal), errors.Is(err, ErrBadRequest):
		code = jsonrpc.CodeInvalidParams
	case errors.Is(err, ErrNotInitialized):
		code = jsonrpc.CodeInvalidRequest
	case errors.Is(err, ErrCancelRefused):
		code = CodeCancelRefused
	case errors.Is(err, ErrNotStored):
		code = CodeNotStored
	case errors.Is(err, ErrMissingCapability):
		code = CodeMissingCapability
		data = json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + ExtensionTasks + `":{}}}}`)
	}
	return &jsonrpc.Error{Code: code, Message: err.Error(), Data: data}
}

func (t *Tasks) answer(ctx context.Context, req *jsonrpc.Request) (any, error) {
	if req.Method == "tools/call" {
		return t.call(ctx, req.Params)
	}
	var p taskParams
	if err := json.Unmarshal(req.Params, &p); err != nil && req.Method != "tasks/list" {
		return nil, fmt.Errorf("%w: %s params: %w", ErrBadRequest, req.Method, err)
	}
	m := metaOf(p.Meta)
	if m.modern() && !m.declares() {
		return nil, fmt.Errorf("%w: %s needs the %s extension in the request's client capabilities",
			ErrMissingCapability, req.Method, ExtensionTasks)
	}
	switch req.Method {
	case "tasks/list":
		// Listing would show every caller every task; the capability
		// (tasks.list) is not declared.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
			Message: "tasks/list is not offered: poll each task with tasks/get"}
	case "tasks/get":
		tk, _, err := t.get(ctx, p.TaskID, m.modern())
		return tk, err
	case "tasks/result":
		return t.result(ctx, p.TaskID)
	case "tasks/update":
		// No task of Interlock asks the client for input: every response
		// is for a key not outstanding, which the extension says to ignore.
		if _, _, err := t.get(ctx, p.TaskID, true); err != nil {
			return nil, err
		}
		return map[string]any{"resultType": "complete"}, nil
	case "tasks/cancel":
		return t.cancel(ctx, p.TaskID, m.modern())
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: req.Method + " is not a method of Interlock's task layer"}
}

// call answers a task-augmented tools/call.
func (t *Tasks) call(ctx context.Context, raw json.RawMessage) (any, error) {
	var p callParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%w: tools/call params: %w", ErrBadRequest, err)
	}
	modern := metaOf(p.Meta).modern()
	params := &mcp.CallToolParamsRaw{Name: p.Name, Arguments: p.Arguments}
	if len(p.Meta) > 0 {
		var meta mcp.Meta
		if json.Unmarshal(p.Meta, &meta) == nil {
			params.Meta = meta
		}
	}
	run, res, err := t.r.startTask(ctx, params)
	if err != nil {
		return nil, err
	}
	if run == "" {
		if modern || p.Task == nil {
			// 2026-07-28: the server decides; a call that does not wait is
			// answered as any call.
			return res, nil
		}
		// 2025-11-25: the client asked for a task; the call was made at
		// once, and its task is completed, held in memory.
		id := "direct-" + uuid.NewString()
		rr, err := json.Marshal(res)
		if err != nil {
			return nil, err
		}
		if len(rr) > MaxResult {
			// Held in memory: bounded like a gated call's stored result.
			rr, _ = json.Marshal(errorResult(fmt.Sprintf("Interlock: %s was called; its result (%d bytes) is "+
				"over the %d bytes Interlock holds for a task, so it is not returned", p.Name, len(rr), MaxResult)))
		}
		now := time.Now().UTC()
		t.hold(id, directTask{created: now, result: rr})
		ttl := directTTL.Milliseconds()
		return map[string]any{"task": task{TaskID: id, Status: taskCompleted, CreatedAt: stamp(now), LastUpdatedAt: stamp(now),
			TTL: &ttl, StatusMessage: "not gated: called at once"}}, nil
	}
	// Answer only once the interrupt is stored: a tasks/get for the run
	// then resolves, here or on any other server of this agent.
	sctx, cancel := context.WithTimeout(ctx, t.cfg.Settle)
	defer cancel()
	st, err := waitStatus(sctx, t.c, t.cfg.Agent, run, t.cfg.Poll/4, func(st Status) bool { return st.Status != StatusQueued }, nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: run %s has no stored interrupt after %s", ErrNotStored, run, t.cfg.Settle)
		}
		return nil, err
	}
	t.log.Info("gated tool call answered with a task", "tool", p.Name, "task", run)
	tk := t.taskOf(st, modern)
	if modern {
		tk.ResultType = "task"
		tk.Result, tk.Error = nil, nil
		return tk, nil
	}
	tk.Result, tk.Error = nil, nil
	return map[string]any{"task": tk}, nil
}

// hold keeps a direct task: expired ones are dropped, and when maxDirect
// are held the oldest is evicted.
func (t *Tasks) hold(id string, d directTask) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, o := range t.direct {
		if d.created.Sub(o.created) > directTTL {
			delete(t.direct, k)
		}
	}
	for len(t.direct) >= t.maxDirect {
		oldest := ""
		for k, o := range t.direct {
			if oldest == "" || o.created.Before(t.direct[oldest].created) {
				oldest = k
			}
		}
		delete(t.direct, oldest)
	}
	t.direct[id] = d
}

// get reads task id: its Task, and the run's status (nil for a direct task).
func (t *Tasks) get(ctx context.Context, id string, modern bool) (task, *Status, error) {
	if id == "" {
		return task{}, nil, fmt.Errorf("%w: taskId is empty", ErrBadRequest)
	}
	if strings.HasPrefix(id, "direct-") {
		t.mu.Lock()
		d, ok := t.direct[id]
		t.mu.Unlock()
		if !ok || time.Since(d.created) > directTTL {
			return task{}, nil, fmt.Errorf("%w: %s (a call made at once is kept %s, in this process only)", ErrNoTask, id, directTTL)
		}
		ttl := directTTL.Milliseconds()
		tk := task{TaskID: id, Status: taskCompleted, CreatedAt: stamp(d.created), LastUpdatedAt: stamp(d.created),
			StatusMessage: "not gated: called at once"}
		if modern {
			tk.TTLMs, tk.ResultType, tk.Result = &ttl, "complete", d.result
		} else {
			tk.TTL = &ttl
		}
		return tk, nil, nil
	}
	run, ok := t.runOf(id)
	if !ok {
		return task{}, nil, fmt.Errorf("%w: %s", ErrNoTask, id)
	}
	if err := subjects.ValidateToken("taskId", run); err != nil {
		return task{}, nil, fmt.Errorf("%w: %w", ErrNoTask, err)
	}
	if _, err := uuid.Parse(run); err != nil {
		return task{}, nil, fmt.Errorf("%w: %s", ErrNoTask, id)
	}
	st, err := ReadStatus(ctx, t.c, t.cfg.Agent, run)
	if err != nil {
		return task{}, nil, err
	}
	if st.Status == StatusQueued {
		// No outcome: no task was ever answered for it (a task is answered
		// only once its interrupt is stored).
		return task{}, nil, fmt.Errorf("%w: %s", ErrNoTask, id)
	}
	tk := t.taskOf(st, modern)
	if modern {
		tk.ResultType = "complete"
	} else {
		tk.Result, tk.Error = nil, nil
	}
	return tk, &st, nil
}

// taskOf is the Task of a run that stands at st.
func (t *Tasks) taskOf(st Status, modern bool) task {
	created := time.Now().UTC()
	if u, err := uuid.Parse(st.RunID); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		created = time.Unix(sec, nsec).UTC()
	}
	tk := task{TaskID: t.taskID(st.RunID), CreatedAt: stamp(created), LastUpdatedAt: stamp(created)}
	poll := t.cfg.Poll.Milliseconds()
	if modern {
		tk.PollMs = poll
	} else {
		tk.PollInterval = poll
	}
	switch {
	case st.Status == StatusPending:
		tk.Status = taskWorking
		tk.StatusMessage = "waiting for a person's decision"
		if st.ExpiresAt != nil {
			tk.StatusMessage += " (expires " + st.ExpiresAt.UTC().Format(time.RFC3339) + ")"
		}
	case st.Status == StatusFailed:
		tk.Status, tk.StatusMessage = taskFailed, "the approval run failed: "+st.Error
		tk.Error = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "Interlock: the approval run failed: " + st.Error}
		tk.LastUpdatedAt = stamp(time.Now())
	default:
		res := t.r.taskResult(st)
		raw, _ := json.Marshal(res)
		tk.Status, tk.Result = taskCompleted, raw
		tk.StatusMessage = st.Status
		tk.LastUpdatedAt = stamp(time.Now())
	}
	return tk
}

// result answers tasks/result (2025-11-25): it waits until the task is
// finished and returns the call's result, with the related-task _meta.
func (t *Tasks) result(ctx context.Context, id string) (any, error) {
	tk, st, err := t.get(ctx, id, true)
	if err != nil {
		return nil, err
	}
	if st != nil && !st.Done() {
		s, err := waitStatus(ctx, t.c, t.cfg.Agent, st.RunID, t.cfg.Poll, Status.Done, nil)
		if err != nil {
			return nil, err
		}
		tk = t.taskOf(s, true)
	}
	if tk.Status == taskFailed {
		return nil, tk.Error
	}
	var res map[string]any
	if err := json.Unmarshal(tk.Result, &res); err != nil {
		return nil, fmt.Errorf("the result of task %s: %w", id, err)
	}
	meta, _ := res["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[metaRelatedTask] = map[string]string{"taskId": id}
	res["_meta"] = meta
	return res, nil
}

// cancel answers tasks/cancel. A waiting task is a person's decision to
// make: the MCP client is not an approver, so it is refused (logged, with
// what to do instead); a finished one cannot be cancelled.
func (t *Tasks) cancel(ctx context.Context, id string, modern bool) (any, error) {
	tk, st, err := t.get(ctx, id, modern)
	if err != nil {
		return nil, err
	}
	if tk.Status != taskWorking {
		return nil, fmt.Errorf("%w: task %s is %s", ErrTaskTerminal, id, tk.Status)
	}
	run := st.RunID
	t.log.Warn("tasks/cancel refused: the MCP client is not an approver", "task", id, "run", run, "agent", t.cfg.Agent)
	return nil, fmt.Errorf("%w: task %s waits for a person's decision, which an MCP client cannot make; "+
		"an approver can deny it (interlock deny %s), or it expires at its deadline", ErrCancelRefused, id, run)
}

// taskID is the task id of run: run itself without a key, else run, a dot
// and the base64url HMAC-SHA256 of the agent and run under the key.
func (t *Tasks) taskID(run string) string {
	if t.key == nil {
		return run
	}
	return run + "." + base64.RawURLEncoding.EncodeToString(t.mac(run))
}

func (t *Tasks) mac(run string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("interlock-mcp-task\x00" + t.cfg.Agent + "\x00" + run))
	return m.Sum(nil)
}

// callKey is the key of the record of run's gated call (interrupt) in the
// calls bucket: a MAC under the task key, so that nobody without the key
// can have an answer stored there before the call is recorded.
func (t *Tasks) callKey(run, interrupt string) string {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("interlock-mcp-call\x00" + run + "\x00" + interrupt))
	return "call." + hex.EncodeToString(m.Sum(nil)[:16])
}

// runOf returns the run task id names, if its MAC is right.
func (t *Tasks) runOf(id string) (string, bool) {
	if t.key == nil {
		return id, true
	}
	run, sum, ok := strings.Cut(id, ".")
	if !ok {
		return "", false
	}
	got, err := base64.RawURLEncoding.DecodeString(sum)
	if err != nil || !hmac.Equal(got, t.mac(run)) {
		return "", false
	}
	return run, true
}

// taskKeyName is the task key's name in the calls bucket: no run id (a
// UUID) can be it.
const taskKeyName = "task-key"

// TaskKey returns the key the proxy MACs its task ids and names its call
// records with, kept for good in the calls bucket (which only the mcp_proxy
// user and admin read), where Provision made it: the bucket refuses a
// second write of a key, so nothing replaces it, not an answer the server
// stores under its key for another user either. A proxy started before
// Provision ran (or with what is not Provision's key there) is told to run
// it.
func TaskKey(ctx context.Context, calls *jetstream.Bucket) ([]byte, error) {
	v, err := calls.Kept(ctx, taskKeyName)
	if err != nil {
		return nil, fmt.Errorf("the MCP task key (run `interlock provision` with admin credentials): %w", err)
	}
	return decodeTaskKey(v)
}

// provisionTaskKey makes the task key, once: a key from before it was kept
// for good (written again at each proxy's start, so it cannot be told from
// an answer the server stored there) is replaced, and the task ids made
// with it no longer resolve.
func provisionTaskKey(ctx context.Context, calls *jetstream.Bucket) error {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return err
	}
	v, err := calls.Keep(ctx, taskKeyName, []byte(hex.EncodeToString(fresh)))
	if err != nil {
		return fmt.Errorf("the MCP task key: %w", err)
	}
	_, err = decodeTaskKey(v)
	return err
}

func decodeTaskKey(v []byte) ([]byte, error) {
	key, err := hex.DecodeString(string(v))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("the MCP task key in bucket %s is not 16 or more hex-encoded bytes", CallsBucket)
	}
	return key, nil
}

// initialized reports whether a request on an HTTP session may be
// answered: a 2026-07-28 request names its protocol version itself; any
// other must come on a live session of the server (one that initialized).
func (t *Tasks) initialized(req *jsonrpc.Request, session string) bool {
	if modernRequest(req) {
		return true
	}
	if session == "" {
		return false
	}
	t.mu.Lock()
	servers := t.servers
	t.mu.Unlock()
	for _, srv := range servers {
		for ss := range srv.Sessions() {
			if ss.ID() == session {
				return true
			}
		}
	}
	return false
}

// serves records a server the task layer is put under (its sessions are
// the HTTP clients that initialized).
func (t *Tasks) serves(srv *mcp.Server) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.servers = append(t.servers, srv)
}

// modernRequest reports whether req names a 2026-07-28 (or later)
// protocol version in its _meta: it needs no initialize.
func modernRequest(req *jsonrpc.Request) bool {
	var p struct {
		Meta json.RawMessage `json:"_meta,omitempty"`
	}
	_ = json.Unmarshal(req.Params, &p)
	return metaOf(p.Meta).modern()
}

// notInitialized is the answer to a request refused for want of
// initialize; logged.
func (t *Tasks) notInitialized(req *jsonrpc.Request) *jsonrpc.Response {
	t.log.Warn("MCP task request refused: the connection has not initialized", "method", req.Method)
	return &jsonrpc.Response{ID: req.ID, Error: wireError(fmt.Errorf("%w: send initialize first", ErrNotInitialized))}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// patch adds what the 2025-11-25 revision needs to the SDK's answer to
// method: the tasks capability to initialize's, execution.taskSupport to
// the task tools of tools/list's.
func (t *Tasks) patch(method string, result json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if len(result) == 0 || json.Unmarshal(result, &obj) != nil {
		return result
	}
	switch method {
	case "initialize":
		var caps map[string]json.RawMessage
		if json.Unmarshal(obj["capabilities"], &caps) != nil || caps == nil {
			caps = map[string]json.RawMessage{}
		}
		caps["tasks"] = json.RawMessage(`{"requests":{"tools":{"call":{}}}}`)
		obj["capabilities"], _ = json.Marshal(caps)
	case "tools/list":
		var tools []map[string]json.RawMessage
		if json.Unmarshal(obj["tools"], &tools) != nil {
			return result
		}
		for _, tool := range tools {
			var name string
			_ = json.Unmarshal(tool["name"], &name)
			if t.r.taskTool(name) {
				tool["execution"] = json.RawMessage(`{"taskSupport":"optional"}`)
			}
		}
		obj["tools"], _ = json.Marshal(tools)
	default:
		return result
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return result
	}
	return raw
}

// patched reports whether method's result is patched.
func patched(method string) bool { return method == "initialize" || method == "tools/list" }

// tasksCapabilities are server capabilities naming the tasks extension.
func tasksCapabilities() *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{}
	caps.AddExtension(ExtensionTasks, nil)
	return caps
}
