package mcpbridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlockhq/interlock/internal/mcpgate"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// ProxyConfig is what a Proxy is.
type ProxyConfig struct {
	Config
	// Gate chooses the calls that wait for a decision.
	Gate mcpgate.Gate
	// Approvers may decide the gated calls (empty: whoever the deployment
	// allows to decide unnamed interrupts).
	Approvers []string
	// Timeout is how long a gated call waits for a decision before it
	// expires, which denies it; default one hour.
	Timeout time.Duration
	// Upstream names the upstream in what the approver sees.
	Upstream string
	// UpstreamID tells this proxy's upstream from another's (its URL, or
	// its command line and arguments; default Upstream). A gated call
	// carries a digest of it, and only a proxy with the same one makes the
	// call once approved: proxies of one agent share its work queue, and
	// one in front of another upstream hands the run back.
	UpstreamID string
	// Relay, when the upstream session was connected with its
	// ClientOptions, forwards the upstream's notifications to the clients.
	Relay *Relay
}

// Proxy is `interlock mcp proxy`: an MCP server forwarding to an upstream
// one, where the calls its gate matches are runs of the proxy's built-in
// agent (Agent) and reach the upstream only once approved. A Worker
// serving ProxyConfig.Agent with Agent must run in the same process (it
// holds the upstream connection).
type Proxy struct {
	c       *jetstream.Client
	cl      *processor.Client
	up      *mcp.ClientSession
	cfg     ProxyConfig
	calls   *jetstream.Bucket
	schemas schema.Cache

	mu    sync.Mutex
	tools map[string]*mcp.Tool
	// gen counts the upstream's list changes (forget): a list asked for
	// before the last change is not kept.
	gen uint64

	// afterMark, in tests, runs between recording a call and making it.
	afterMark func(ctx context.Context) error
	// beforeCheck, in tests, sees (and may alter) the upstream call after
	// the approval and before its check against the approved digest.
	beforeCheck func(ctx context.Context, params *mcp.CallToolParams) error

	tasks *Tasks
}

// NewProxy returns a proxy to the upstream session up, working through c.
// The calls bucket must have been provisioned (Provision).
func NewProxy(ctx context.Context, c *jetstream.Client, up *mcp.ClientSession, cfg ProxyConfig) (*Proxy, error) {
	cfg.defaults(ProxyAgent)
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Hour
	}
	if cfg.UpstreamID == "" {
		cfg.UpstreamID = cfg.Upstream
	}
	calls, err := c.OpenBucket(ctx, CallsBucket)
	if err != nil {
		return nil, fmt.Errorf("the MCP proxy's calls bucket (run `interlock provision`): %w", err)
	}
	key, err := TaskKey(ctx, calls)
	if err != nil {
		return nil, err
	}
	p := &Proxy{c: c, cl: processor.NewClient(c), up: up, cfg: cfg, calls: calls, tools: map[string]*mcp.Tool{}}
	p.tasks = newTasks(c, p, cfg.Config)
	p.tasks.key = key
	return p, nil
}

// Tasks is the proxy's task layer: serve Server through Tasks.Transport or
// Tasks.HTTP for clients that speak MCP tasks.
func (p *Proxy) Tasks() *Tasks { return p.tasks }

// Close releases the client (not the upstream session).
func (p *Proxy) Close() { p.cl.Close() }

// Server returns the MCP server clients connect to. It offers what the
// upstream offers: tools/list and every other request but a gated
// tools/call are forwarded unchanged (serve it through Tasks for the task
// capability and the tools' taskSupport).
func (p *Proxy) Server() *mcp.Server {
	caps := &mcp.ServerCapabilities{}
	if r := p.up.InitializeResult(); r != nil && r.Capabilities != nil {
		up := r.Capabilities
		caps.Tools, caps.Resources, caps.Prompts, caps.Completions = up.Tools, up.Resources, up.Prompts, up.Completions
		caps.Logging = up.Logging
	}
	caps.AddExtension(ExtensionTasks, nil)
	impl := &mcp.Implementation{Name: "interlock-mcp-proxy", Version: p.cfg.Version}
	instructions := ""
	if r := p.up.InitializeResult(); r != nil {
		instructions = r.Instructions
		if r.ServerInfo != nil {
			impl.Title = r.ServerInfo.Name + " (behind Interlock)"
		}
	}
	opts := &mcp.ServerOptions{Logger: p.cfg.Logger, Capabilities: caps, Instructions: instructions}
	if caps.Resources != nil && caps.Resources.Subscribe {
		opts.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
			return p.up.Subscribe(ctx, req.Params)
		}
		opts.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
			return p.up.Unsubscribe(ctx, req.Params)
		}
	}
	srv := mcp.NewServer(impl, opts)
	p.tasks.serves(srv)
	if p.cfg.Relay != nil {
		p.cfg.Relay.attach(srv, p.forget)
	}
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			return p.forward(ctx, method, req, next)
		}
	})
	return srv
}

// forward answers the requests the upstream answers.
func (p *Proxy) forward(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	switch r := req.(type) {
	case *mcp.CallToolRequest:
		return p.callTool(ctx, r)
	case *mcp.ListToolsRequest:
		gen := p.generation()
		res, err := p.up.ListTools(ctx, r.Params)
		if err == nil {
			p.remember(res.Tools, gen)
		}
		return res, err
	case *mcp.ListResourcesRequest:
		return p.up.ListResources(ctx, r.Params)
	case *mcp.ListResourceTemplatesRequest:
		return p.up.ListResourceTemplates(ctx, r.Params)
	case *mcp.ReadResourceRequest:
		return p.up.ReadResource(ctx, r.Params)
	case *mcp.ListPromptsRequest:
		return p.up.ListPrompts(ctx, r.Params)
	case *mcp.GetPromptRequest:
		return p.up.GetPrompt(ctx, r.Params)
	case *mcp.CompleteRequest:
		return p.up.Complete(ctx, r.Params)
	case *mcp.ServerRequest[*mcp.SetLoggingLevelParams]:
		// The upstream logs at the level the client asks; the proxy's
		// session keeps it too, to pass on what reaches it.
		if err := p.up.SetLoggingLevel(ctx, r.Params); err != nil {
			return nil, err
		}
	}
	return next(ctx, method, req)
}

// remember keeps the upstream's tool definitions, listed from generation
// gen: their annotations and input schemas are what calls are gated,
// checked and shown with. A list asked for before the upstream's last
// change (a reply overtaken by its list_changed) is not kept: it would
// bring back a definition the upstream dropped (a tool read-only before,
// destructive now, called ungated). Nothing is kept from an upstream that
// does not announce its changes (cacheable).
func (p *Proxy) remember(tools []*mcp.Tool, gen uint64) {
	if !p.cacheable() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return
	}
	for _, t := range tools {
		p.tools[t.Name] = t
	}
}

// forget drops the cached tool definitions (the upstream's tools changed).
func (p *Proxy) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	clear(p.tools)
}

// generation is the count of the upstream's list changes so far.
func (p *Proxy) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// cacheable reports whether the upstream announces changes to its tools
// (tools.listChanged): only then may a definition be kept between calls.
func (p *Proxy) cacheable() bool {
	r := p.up.InitializeResult()
	return r != nil && r.Capabilities != nil && r.Capabilities.Tools != nil && r.Capabilities.Tools.ListChanged
}

// tool is the upstream's definition of name, listing the tools again when
// it is not known yet (or never, from an upstream that does not announce
// its changes); nil when the upstream does not list it.
func (p *Proxy) tool(ctx context.Context, name string) *mcp.Tool {
	p.mu.Lock()
	t := p.tools[name]
	gen := p.gen
	p.mu.Unlock()
	if t != nil {
		return t
	}
	var all []*mcp.Tool
	for t, err := range p.up.Tools(ctx, nil) {
		if err != nil {
			break
		}
		all = append(all, t)
	}
	p.remember(all, gen)
	for _, t := range all {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// hopMeta is the _meta of a call passed upstream ungated: the client's,
// less the protocol's own io.modelcontextprotocol/ keys (protocol
// version, client capabilities), which describe the client's connection to
// the proxy, not the proxy's to the upstream, and less Interlock's own
// io.interlock/ keys: only a call a decision allowed carries them
// (MetaCallDigest, MetaExecutionKey), so an upstream that checks them is
// not fooled by a client, or a model, that writes them itself.
func hopMeta(m mcp.Meta) mcp.Meta {
	out := mcp.Meta{}
	for k, v := range m {
		if !strings.HasPrefix(k, "io.modelcontextprotocol/") && !strings.HasPrefix(k, metaPrefix) {
			out[k] = v
		}
	}
	return out
}

// progressKey holds, in a forwarded call's context, the client's session
// and progress token (progressTarget).
type progressKey struct{}

func annotations(t *mcp.Tool) *mcpgate.Annotations {
	if t == nil || t.Annotations == nil {
		return nil
	}
	a := t.Annotations
	ro, idem := a.ReadOnlyHint, a.IdempotentHint
	return &mcpgate.Annotations{ReadOnlyHint: &ro, DestructiveHint: a.DestructiveHint, IdempotentHint: &idem,
		OpenWorldHint: a.OpenWorldHint}
}

// callTool forwards a call the gate does not match, and makes one it
// matches a run that waits for a decision.
func (p *Proxy) callTool(ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil && p.cfg.Relay != nil {
		ctx = context.WithValue(ctx, progressKey{}, progressTarget{ctx: ctx, ss: req.Session, token: tok})
	}
	run, res, err := p.startTask(ctx, req.Params)
	if err != nil || run == "" {
		return res, err
	}
	wctx, release := p.tasks.bound(ctx, req)
	defer release()
	st, err := waitStatus(wctx, p.c, p.cfg.Agent, run, p.cfg.Poll, Status.Done, progress(ctx, req))
	if err != nil {
		return nil, err
	}
	return p.result(req.Params.Name, st), nil
}

// checkInput refuses the arguments of an ungated call that do not match
// the tool's input schema: the gate compares JSON values as written, so
// "recursive":"true" is not arg:recursive=true, while an upstream that
// converts types (pydantic's default mode) acts on true. A schema beyond
// what processor/schema compiles (its limits, no external references)
// leaves the call unchecked, as a tool without one; a check that cannot
// run in its budget refuses it.
func (p *Proxy) checkInput(t *mcp.Tool, args json.RawMessage) error {
	if t == nil || t.InputSchema == nil {
		return nil
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	switch err := p.schemas.Validate(raw, args); {
	case err == nil, errors.Is(err, schema.ErrUnsafe), errors.Is(err, schema.ErrInvalid):
		return nil
	case errors.Is(err, schema.ErrMismatch):
		return fmt.Errorf("its arguments do not match the tool's input schema (%w)", err)
	default:
		return fmt.Errorf("its arguments could not be checked against the tool's input schema: %w", err)
	}
}

// taskTool: any call through the proxy may be made a task (an ungated one
// is made at once).
func (p *Proxy) taskTool(string) bool { return true }

// taskResult is what a gated call's task returns once finished.
func (p *Proxy) taskResult(st Status) *mcp.CallToolResult {
	name := st.Tool
	if name == "" {
		name = "the tool"
	}
	return p.result(name, st)
}

// startTask forwards a call the gate does not match (its result in res),
// and starts the run of one it matches.
func (p *Proxy) startTask(ctx context.Context, params *mcp.CallToolParamsRaw) (string, *mcp.CallToolResult, error) {
	name := params.Name
	var args map[string]any
	if len(params.Arguments) > 0 {
		if err := json.Unmarshal(params.Arguments, &args); err != nil {
			return "", errorResult(fmt.Sprintf("Interlock: the arguments of %s are not a JSON object: %v", name, err)), nil
		}
	}
	if err := mcpgate.CheckArguments(params.Arguments); err != nil {
		p.cfg.Logger.Warn("mcp proxy: call refused", "tool", name, "err", err)
		return "", errorResult(fmt.Sprintf("Interlock: the call of %s was refused, nothing was called: %v (a tool may read "+
			"another of those keys than the gate does)", name, err)), nil
	}
	t := p.tool(ctx, name)
	if !p.cfg.Gate.Match(mcpgate.Call{Tool: name, Arguments: args, Annotations: annotations(t)}) {
		if err := p.checkInput(t, params.Arguments); err != nil {
			p.cfg.Logger.Warn("mcp proxy: call refused", "tool", name, "err", err)
			return "", errorResult(fmt.Sprintf("Interlock: the call of %s was refused, nothing was called: %v", name, err)), nil
		}
		meta := hopMeta(params.Meta)
		if tg, ok := ctx.Value(progressKey{}).(progressTarget); ok {
			// The upstream's progress reaches this client under its token.
			tok, done := p.cfg.Relay.track(tg)
			defer done()
			meta["progressToken"] = tok
		}
		res, err := p.up.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: name, Arguments: params.Arguments})
		return "", res, err
	}
	var input any
	if t != nil {
		input = t.InputSchema
	}
	rs, note := editSchema(&p.schemas, input)
	ask := Ask{Action: "call " + name, Tool: name, Arguments: params.Arguments, Approvers: p.cfg.Approvers,
		Deadline: time.Now().Add(p.cfg.Timeout).UTC(), ResponseSchema: rs, Note: note, Upstream: p.upstream()}
	if p.cfg.Upstream != "" {
		ask.Action += " on " + p.cfg.Upstream
	}
	if len(ask.Arguments) == 0 || string(ask.Arguments) == "null" {
		ask.Arguments = json.RawMessage(`{}`)
	}
	run, err := p.cl.Start(ctx, p.cfg.Agent, ask)
	if err != nil {
		return "", nil, fmt.Errorf("interlock: start the approval of %s: %w", name, err)
	}
	p.cfg.Logger.Info("gated tool call waits for a decision", "tool", name, "run", run)
	return run, nil, nil
}

// result is what the client gets for a gated call that ended as st.
func (p *Proxy) result(name string, st Status) *mcp.CallToolResult {
	by := ""
	if st.Approver != "" {
		by = " by " + st.Approver
	}
	if st.Comment != "" {
		by += ": " + st.Comment
	}
	switch st.Status {
	case StatusApproved:
		var res mcp.CallToolResult
		if err := json.Unmarshal(st.Result, &res); err != nil {
			return errorResult(fmt.Sprintf("Interlock: %s was approved and called (run %s); its result cannot be read: %v", name, st.RunID, err))
		}
		return &res
	case StatusDenied:
		return errorResult(fmt.Sprintf("Interlock: the call of %s was denied%s (run %s)", name, by, st.RunID))
	case StatusExpired:
		return errorResult(fmt.Sprintf("Interlock: the call of %s expired with no decision (run %s)", name, st.RunID))
	case StatusUnknown:
		return errorResult(fmt.Sprintf("Interlock: the call of %s was approved%s and its outcome is unknown: %s; "+
			"it is not made again (run %s)", name, by, st.Error, st.RunID))
	case StatusCallRefused:
		return errorResult(fmt.Sprintf("Interlock: the call of %s was approved%s but is not the approved call, so it was not made: %s (run %s)",
			name, by, st.Error, st.RunID))
	case StatusCallFailed:
		return errorResult(fmt.Sprintf("Interlock: the call of %s was approved%s and failed upstream: %s; it is not retried (run %s)",
			name, by, st.Error, st.RunID))
	}
	return errorResult(fmt.Sprintf("Interlock: the approval of %s failed: %s (run %s)", name, st.Error, st.RunID))
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// MaxResult bounds the upstream result a proxy run stores (and returns to
// the client): a run's outcome is one NATS message.
const MaxResult = 256 << 10

// edit is an approver's payload for a gated call: {} approves the call as
// proposed, {"arguments": {...}} with those arguments.
type edit struct {
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ErrOtherUpstream: a gated call was asked through a proxy of the same
// agent in front of another upstream; this proxy does not make it.
var ErrOtherUpstream = errors.New("a call of another upstream")

// upstream is the digest of the upstream's id a gated call carries
// (Ask.Upstream): the id itself may hold a command line's secrets.
func (p *Proxy) upstream() string {
	if p.cfg.UpstreamID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(p.cfg.UpstreamID))
	return hex.EncodeToString(sum[:16])
}

// The _meta keys of an approved call the proxy makes upstream. An upstream
// may use MetaExecutionKey as the idempotency key of the call's side
// effect (the same on every replay of the pass, unguessable without the
// coordinator's secret) and check MetaCallDigest against the call it got
// (subjects.CallDigest of the tool's name and arguments).
const (
	// metaPrefix begins every key Interlock puts in _meta; a client's
	// own keys under it never reach the upstream (hopMeta).
	metaPrefix       = "io.interlock/"
	MetaExecutionKey = metaPrefix + "executionKey"
	MetaCallDigest   = metaPrefix + "callDigest"
)

// Agent is the body of the proxy's agent: one interrupt, bound to the call
// (its tool and arguments); on approval, the upstream call, at most once,
// and only if it is the approved call.
//
// The arguments sent are the approvers' edit (the decision's arguments,
// protocol version 2) or the call's own; before sending them the proxy
// checks that they have exactly the digest the decision approved
// (processor.CheckCall), and refuses otherwise (StatusCallRefused: the
// upstream is not called). The call carries the decision's execution key
// and approved digest in its _meta (MetaExecutionKey, MetaCallDigest).
//
// The call is recorded in the calls bucket (key: run and interrupt) before
// it is made. A pass that finds the record already there (its worker
// stopped between the record and the stored result, and the pass runs
// again) does not call: the run ends with StatusUnknown.
func (p *Proxy) Agent() processor.AgentFunc {
	return processor.Typed(func(ctx context.Context, a Ask) (Answer, error) {
		if a.Upstream != "" && a.Upstream != p.upstream() {
			// Asked through a proxy of this agent in front of another
			// upstream: only one in front of that upstream may make it.
			info, _ := processor.RunOf(ctx)
			if info.LastAttempt {
				// No proxy of that upstream took it in time: the run ends,
				// the call not made, rather than wait dead-lettered.
				p.cfg.Logger.Warn("gated call of another upstream not made: no proxy of it took the run", "run", info.RunID, "tool", a.Tool)
				return Answer{Tool: a.Tool, Status: StatusCallFailed, Error: fmt.Sprintf("%v: no proxy of the upstream it "+
					"was asked through took the run before its last delivery; the call was not made (give each upstream "+
					"its own --agent)", ErrOtherUpstream)}, nil
			}
			p.cfg.Logger.Warn("gated call of another upstream handed back", "run", info.RunID, "tool", a.Tool)
			return Answer{}, processor.Retryable(fmt.Errorf("%w: run %s was asked through a proxy of another upstream",
				ErrOtherUpstream, info.RunID))
		}
		d, final, err := decide(ctx, a)
		if final != nil {
			final.Tool = a.Tool
		}
		if errors.Is(err, processor.ErrCallMismatch) {
			return p.refuse(a, d, a.Arguments, err), nil
		}
		if err != nil || final != nil {
			return deref(final), err
		}
		var e edit
		if len(d.Payload) > 0 {
			if err := json.Unmarshal(d.Payload, &e); err != nil {
				return Answer{}, fmt.Errorf("%w: the decision's payload: %w", subjects.ErrMalformed, err)
			}
		}
		args := a.Arguments
		if len(e.Arguments) > 0 && string(e.Arguments) != "null" {
			// An edit in the payload (the responseSchema's form) counts
			// only as the approved call: the check below refuses one the
			// approvers' digest does not cover.
			args = e.Arguments
			if err := processor.CheckCall(d, a.Tool, args); err != nil {
				return p.refuse(a, d, args, err), nil
			}
		}
		if len(d.Arguments) > 0 {
			args = d.Arguments
		}
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		meta := mcp.Meta{MetaCallDigest: d.CallDigest}
		if key, ok := processor.ExecutionKey(processor.WithToolCall(ctx, toolCallScope)); ok {
			meta[MetaExecutionKey] = key
		}
		params := &mcp.CallToolParams{Meta: meta, Name: a.Tool, Arguments: args}
		if p.beforeCheck != nil {
			if err := p.beforeCheck(ctx, params); err != nil {
				return Answer{}, err
			}
		}
		// The one enforcement of the approval: what is sent is what was
		// approved, or nothing is sent.
		if err := processor.CheckCall(d, params.Name, params.Arguments); err != nil {
			sent, _ := json.Marshal(params.Arguments)
			return p.refuse(a, d, sent, err), nil
		}
		ans := Answer{Tool: a.Tool, Approver: d.Approver, Comment: d.Comment, Arguments: args,
			CallDigest: d.CallDigest}
		info, _ := processor.RunOf(ctx)
		first, err := p.record(ctx, info.RunID, subjects.InterruptID(info.RunID, toolCallScope, 0), args)
		if err != nil {
			// Not recorded, or not known to be: the pass runs again, and a
			// record that did go through makes it StatusUnknown.
			return Answer{}, processor.Retryable(fmt.Errorf("record the call of %s: %w", a.Tool, err))
		}
		if !first {
			ans.Status = StatusUnknown
			ans.Error = "the call was recorded as being made by an earlier attempt of this pass, whose result was never stored"
			return ans, nil
		}
		if p.afterMark != nil {
			if err := p.afterMark(ctx); err != nil {
				return Answer{}, err
			}
		}
		res, err := p.up.CallTool(ctx, params)
		if err != nil && ctx.Err() != nil {
			// Cut short by the pass's timeout or the worker's stop: the call
			// may have been made.
			ans.Status, ans.Error = StatusUnknown, "the call was cut short ("+context.Cause(ctx).Error()+"): "+err.Error()
			return ans, nil
		}
		if err != nil {
			ans.Status, ans.Error = StatusCallFailed, err.Error()
			return ans, nil
		}
		raw, err := json.Marshal(res)
		if err != nil {
			ans.Status, ans.Error = StatusCallFailed, "the upstream's result cannot be stored: "+err.Error()
			return ans, nil
		}
		if len(raw) > MaxResult {
			// The run's outcome must fit in one message: a result too large
			// to store would fail the outcome, and the pass run again would
			// find the call recorded and report it unknown.
			raw, _ = json.Marshal(errorResult(fmt.Sprintf("Interlock: %s was approved and called; its result (%d bytes) is "+
				"over the %d bytes Interlock stores, so it is not returned", a.Tool, len(raw), MaxResult)))
		}
		ans.Status, ans.Result = StatusApproved, raw
		return ans, nil
	})
}

// record records run's gated call (interrupt) as being made, and reports
// whether this attempt recorded it: under callKey, which only holders of
// the task key can compute, so that no answer the server stored there for
// another user can make an approved call read as made. A record from
// before (under the run and interrupt, kept for callsTTL) counts when it
// is a client's write.
func (p *Proxy) record(ctx context.Context, run, interrupt string, args []byte) (first bool, err error) {
	if made, err := p.calls.Marked(ctx, run+"."+interrupt); err != nil || made {
		return false, err
	}
	return p.calls.Mark(ctx, p.tasks.callKey(run, interrupt), args)
}

// refuse is the answer for an approved call the proxy will not make: the
// call about to be sent (args) is not the approved one. The run completes
// with StatusCallRefused and the reason, which the run's outcome records.
func (p *Proxy) refuse(a Ask, d processor.Decision, args json.RawMessage, err error) Answer {
	p.cfg.Logger.Warn("approved tool call refused: not the approved call", "tool", a.Tool,
		"interrupt", d.InterruptID, "approvedDigest", d.CallDigest, "error", err)
	return Answer{Status: StatusCallRefused, Tool: a.Tool, Approver: d.Approver, Comment: d.Comment,
		Arguments: args, CallDigest: d.CallDigest, Error: err.Error()}
}
