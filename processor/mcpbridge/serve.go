package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// Errors of the serve tools, each matchable with errors.Is; a tool answers
// them as a result with isError.
var (
	// ErrBadRequest: a tool's input is not usable (named in the message).
	ErrBadRequest = errors.New("bad request")
)

// Config is what the servers of this package share.
type Config struct {
	// Agent is the built-in agent's name (default ServeAgent or ProxyAgent).
	Agent string
	// Poll is how often a wait re-reads the run's outcome and sends a
	// progress notification; default 2s.
	Poll time.Duration
	// MaxWait bounds one wait_approval call; default 10 minutes.
	MaxWait time.Duration
	// Settle bounds how long request_approval waits for the interrupt to
	// be stored before it answers; default 10s.
	Settle time.Duration
	Logger *slog.Logger
	// Version is reported to clients as the server's version.
	Version string
}

func (c *Config) defaults(agent string) {
	if c.Agent == "" {
		c.Agent = agent
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 10 * time.Minute
	}
	if c.Settle <= 0 {
		c.Settle = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Serve is `interlock mcp serve`'s MCP server: tools for an agent that asks
// for approval explicitly. The approvals are runs of the built-in agent
// (ApprovalAgent), so decisions, expiry, audit and notifiers work as for any
// run; a Worker serving Config.Agent must run somewhere.
type Serve struct {
	c       *jetstream.Client
	cl      *processor.Client
	cfg     Config
	schemas schema.Cache
	tasks   *Tasks
}

// NewServe returns the server's tools working through c.
func NewServe(c *jetstream.Client, cfg Config) *Serve {
	cfg.defaults(ServeAgent)
	s := &Serve{c: c, cl: processor.NewClient(c), cfg: cfg}
	s.tasks = newTasks(c, s, cfg)
	return s
}

// Close releases the client.
func (s *Serve) Close() { s.cl.Close() }

// RequestInput is request_approval's input.
type RequestInput struct {
	Action    string         `json:"action" jsonschema:"what needs approval, in a few words"`
	Arguments map[string]any `json:"arguments,omitempty" jsonschema:"the details the approver sees"`
	Approvers []string       `json:"approvers,omitempty" jsonschema:"who may decide (identities); empty: anyone the deployment allows"`
	Deadline  string         `json:"deadline,omitempty" jsonschema:"when the request expires unanswered (RFC 3339), which denies it"`
	// ResponseSchema is the JSON Schema of the approver's answer.
	ResponseSchema map[string]any `json:"responseSchema,omitempty" jsonschema:"JSON Schema the approver's answer must satisfy"`
}

// IDInput is check_approval's input.
type IDInput struct {
	ID string `json:"id" jsonschema:"the id request_approval returned"`
}

// WaitInput is wait_approval's input.
type WaitInput struct {
	ID             string `json:"id" jsonschema:"the id request_approval returned"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"how long to wait at most (default and limit: the server's)"`
}

// Server returns an MCP server with the tools request_approval,
// check_approval and wait_approval.
func (s *Serve) Server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "interlock", Title: "Interlock approvals", Version: s.cfg.Version},
		&mcp.ServerOptions{Logger: s.cfg.Logger, Capabilities: tasksCapabilities(),
			Instructions: "Ask a person for a durable, audited decision: request_approval returns an id at once; " +
				"wait_approval (or check_approval) returns the decision: status approved, denied or expired, " +
				"the approver, their answer and comment."})
	mcp.AddTool(srv, &mcp.Tool{Name: "request_approval",
		Description: "Ask for a person's approval of an action. Returns an id and status pending once the request is stored; " +
			"then call wait_approval with the id."}, s.request)
	mcp.AddTool(srv, &mcp.Tool{Name: "check_approval",
		Description: "Where an approval request stands: pending, approved, denied or expired, with approver, answer and comment.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.check)
	mcp.AddTool(srv, &mcp.Tool{Name: "wait_approval",
		Description: "Wait until an approval request is decided or expires (or the timeout passes: status pending), " +
			"sending progress notifications meanwhile.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, s.wait)
	s.tasks.serves(srv)
	return srv
}

func (s *Serve) request(ctx context.Context, _ *mcp.CallToolRequest, in RequestInput) (*mcp.CallToolResult, any, error) {
	ask, err := s.ask(in)
	if err != nil {
		return nil, nil, err
	}
	run, err := s.cl.Start(ctx, s.cfg.Agent, ask)
	if err != nil {
		return nil, nil, fmt.Errorf("start the approval run: %w", err)
	}
	s.cfg.Logger.Info("approval requested", "run", run, "action", ask.Action)
	// Answer once the interrupt is stored (or the settle time passed).
	sctx, cancel := context.WithTimeout(ctx, s.cfg.Settle)
	defer cancel()
	st, err := waitStatus(sctx, s.c, s.cfg.Agent, run, s.cfg.Poll/4, func(st Status) bool { return st.Status != StatusQueued }, nil)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, nil, err
	}
	return result(st)
}

// ask checks in and makes it a run's input.
func (s *Serve) ask(in RequestInput) (Ask, error) {
	if in.Action == "" {
		return Ask{}, fmt.Errorf("%w: action is empty", ErrBadRequest)
	}
	a := Ask{Action: in.Action, Approvers: in.Approvers}
	for _, ap := range in.Approvers {
		if err := subjects.ValidateToken("approver", ap); err != nil {
			return Ask{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	if in.Arguments != nil {
		raw, err := json.Marshal(in.Arguments)
		if err != nil {
			return Ask{}, fmt.Errorf("%w: arguments: %w", ErrBadRequest, err)
		}
		a.Arguments = raw
	}
	if in.Deadline != "" {
		t, err := time.Parse(time.RFC3339, in.Deadline)
		if err != nil {
			return Ask{}, fmt.Errorf("%w: deadline %q is not RFC 3339: %w", ErrBadRequest, in.Deadline, err)
		}
		if !t.After(time.Now()) {
			return Ask{}, fmt.Errorf("%w: deadline %s has passed", ErrBadRequest, in.Deadline)
		}
		a.Deadline = t.UTC()
	}
	if in.ResponseSchema != nil {
		raw, err := json.Marshal(in.ResponseSchema)
		if err != nil {
			return Ask{}, fmt.Errorf("%w: responseSchema: %w", ErrBadRequest, err)
		}
		// Checked here, so that a schema Interlock refuses is this call's
		// error rather than a failed run.
		if err := s.schemas.Compile(raw); err != nil {
			return Ask{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		a.ResponseSchema = raw
	}
	return a, nil
}

func (s *Serve) check(ctx context.Context, _ *mcp.CallToolRequest, in IDInput) (*mcp.CallToolResult, any, error) {
	if err := subjects.ValidateToken("id", in.ID); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	st, err := ReadStatus(ctx, s.c, s.cfg.Agent, in.ID)
	if err != nil {
		return nil, nil, err
	}
	return result(st)
}

func (s *Serve) wait(ctx context.Context, req *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, any, error) {
	if err := subjects.ValidateToken("id", in.ID); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	limit := s.cfg.MaxWait
	if in.TimeoutSeconds < 0 {
		return nil, nil, fmt.Errorf("%w: timeoutSeconds %d is negative", ErrBadRequest, in.TimeoutSeconds)
	}
	if d := time.Duration(in.TimeoutSeconds) * time.Second; d > 0 && d < limit {
		limit = d
	}
	bctx, release := s.tasks.bound(ctx, req)
	defer release()
	wctx, cancel := context.WithTimeout(bctx, limit)
	defer cancel()
	st, err := waitStatus(wctx, s.c, s.cfg.Agent, in.ID, s.cfg.Poll, Status.Done, progress(ctx, req))
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, nil, err
	}
	return result(st)
}

// result is st as a tool result: its JSON as text and as structured
// content.
func result(st Status) (*mcp.CallToolResult, any, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}},
		StructuredContent: json.RawMessage(raw)}, nil, nil
}

// progress returns what sends req's client a progress notification, or nil
// when it asked for none.
func progress(ctx context.Context, req *mcp.CallToolRequest) func(n int, msg string) {
	if req == nil || req.Params == nil || req.Session == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	return func(n int, msg string) {
		// The request's context: over streamable HTTP a notification
		// goes on the request's own stream.
		_ = req.Session.NotifyProgress(ctx,
			&mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
	}
}

// waitStatus re-reads run's outcome every poll until done says so or ctx
// ends (returning the last status and ctx's error), telling notify each
// time it is still waiting.
func waitStatus(ctx context.Context, c *jetstream.Client, agent, run string, poll time.Duration,
	done func(Status) bool, notify func(n int, msg string)) (Status, error) {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for n := 1; ; n++ {
		st, err := ReadStatus(ctx, c, agent, run)
		if err != nil && ctx.Err() == nil {
			return st, err
		}
		if err == nil && done(st) {
			return st, nil
		}
		if notify != nil {
			msg := "waiting for a decision on " + run
			if st.ExpiresAt != nil {
				msg += " (expires " + st.ExpiresAt.Format(time.RFC3339) + ")"
			}
			notify(n, msg)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("run %s: %w", run, ctx.Err())
		case <-t.C:
		}
	}
}

// Tasks is the server's task layer: serve Server through Tasks.Transport
// or Tasks.HTTP, and a client that speaks MCP tasks gets a task for
// request_approval, finished when the request is decided or expires.
func (s *Serve) Tasks() *Tasks { return s.tasks }

// taskTool: request_approval may be made a task.
func (s *Serve) taskTool(tool string) bool { return tool == "request_approval" }

// startTask starts the run of a task-augmented request_approval.
func (s *Serve) startTask(ctx context.Context, p *mcp.CallToolParamsRaw) (string, *mcp.CallToolResult, error) {
	var in RequestInput
	if len(p.Arguments) > 0 {
		if err := json.Unmarshal(p.Arguments, &in); err != nil {
			return "", errorResult(fmt.Sprintf("%v: request_approval's arguments: %v", ErrBadRequest, err)), nil
		}
	}
	ask, err := s.ask(in)
	if err != nil {
		return "", errorResult(err.Error()), nil
	}
	run, err := s.cl.Start(ctx, s.cfg.Agent, ask)
	if err != nil {
		return "", nil, fmt.Errorf("start the approval run: %w", err)
	}
	s.cfg.Logger.Info("approval requested as a task", "run", run, "action", ask.Action)
	return run, nil, nil
}

// taskResult is the final status as request_approval's result.
func (s *Serve) taskResult(st Status) *mcp.CallToolResult {
	res, _, err := result(st)
	if err != nil {
		return errorResult(err.Error())
	}
	return res
}
