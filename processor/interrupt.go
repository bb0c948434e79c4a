package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// RunInfo identifies the run and pass a context belongs to.
type RunInfo struct {
	RunID    string
	Agent    string
	ThreadID string
	// Pass counts from 0; every replay is one more.
	Pass int
	// TraceParent is the pass's W3C trace context: one trace from the
	// run's start through its suspension, notifications, decision and replays.
	TraceParent string
	// LastAttempt says this delivery of the pass is its last
	// (WorkerConfig.MaxDeliver): a Retryable error now dead-letters the
	// work item and leaves the run waiting, so a body that would hand the
	// pass back had better end the run with a reason instead.
	LastAttempt bool
}

// pass is the state of one pass of a run, carried in its context.
type pass struct {
	info      RunInfo
	decisions map[string]subjects.Decision

	mu        sync.Mutex
	journal   subjects.Journal
	ordinals  map[string]int // next interrupt ordinal, by tool call
	steps     map[string]int // next step ordinal, by tool call and name
	pending   []subjects.Interrupt
	schemas   *schema.Cache
	firstErrs []error // requests that could not be published
	// emitted counts the pass's Emit calls; emit sends the n-th (from 0).
	emitted int
	emit    func(n int, event any) error
	// requester is the start subject's requester token (pass 0 only).
	requester string
	// keys holds, by tool call, the execution key of the last approved
	// call Interrupt returned in it.
	keys map[string]string
	// ask, when set, asks the coordinator whether an operator rule
	// settles an interrupt before the pass suspends on it.
	ask func(ctx context.Context, in subjects.Interrupt) (subjects.Decision, bool)
}

// askKey is the journal key of the decision an operator rule made on
// interrupt id when asked (WorkerConfig.AskRules): the replay returns it
// without asking again.
func askKey(id string) string { return "ask/" + id }

// decided returns the decision interrupt id of the pass has: the one the
// replay carries, or one an operator rule made when asked (journaled). It
// is what Interrupt returns and IsResuming predicts.
func (p *pass) decided(id string) (subjects.Decision, bool) {
	if d, ok := p.decisions[id]; ok {
		return d, true
	}
	return p.asked(id)
}

// asked returns the decision an operator rule made on interrupt id in an
// earlier pass of the run, as journaled.
func (p *pass) asked(id string) (subjects.Decision, bool) {
	p.mu.Lock()
	raw, ok := p.journal[askKey(id)]
	p.mu.Unlock()
	if !ok {
		return subjects.Decision{}, false
	}
	var d subjects.Decision
	if json.Unmarshal(raw, &d) != nil || d.InterruptID != id {
		return subjects.Decision{}, false
	}
	return d, true
}

type passKey struct{}
type toolCallKey struct{}

func newPass(info RunInfo, w subjects.Work, sc *schema.Cache) *pass {
	p := &pass{
		info:      info,
		decisions: make(map[string]subjects.Decision, len(w.Decisions)),
		journal:   make(subjects.Journal, len(w.Journal)),
		ordinals:  map[string]int{},
		steps:     map[string]int{},
		schemas:   sc,
	}
	for _, d := range w.Decisions {
		p.decisions[d.InterruptID] = d
	}
	for k, v := range w.Journal {
		p.journal[k] = v
	}
	return p
}

// suspended reports whether the pass raised interrupts.
func (p *pass) suspended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending) > 0
}

func passFrom(ctx context.Context) *pass {
	p, _ := ctx.Value(passKey{}).(*pass)
	return p
}

// RunOf returns the run and pass ctx belongs to.
func RunOf(ctx context.Context) (RunInfo, bool) {
	p := passFrom(ctx)
	if p == nil {
		return RunInfo{}, false
	}
	return p.info, true
}

// WithToolCall scopes ctx to one tool call. Interrupts and steps are tracked
// per tool call, so two identical gated calls in one turn (parallel tool
// calls, each in its own scope) get their own interrupts and decisions.
// Within one scope, interrupts are matched by the order they are raised in.
func WithToolCall(ctx context.Context, toolCallID string) context.Context {
	return context.WithValue(ctx, toolCallKey{}, toolCallID)
}

func toolCallOf(ctx context.Context) string {
	s, _ := ctx.Value(toolCallKey{}).(string)
	return s
}

// Request is what an agent asks a person for. It is read only on the suspend
// pass: on the replay pass Interrupt returns the decision without looking at
// it, so a body that knows it is resuming (IsResuming) need not rebuild it.
type Request struct {
	// Reason is open; the core values are subjects.ReasonToolCall,
	// ReasonInputRequired and ReasonConfirmation. Default: tool_call inside a
	// tool call scope, confirmation outside.
	Reason  string
	Message string
	// ToolCallID, when set, must equal the scope set with WithToolCall; when
	// empty, the scope's is used.
	ToolCallID string
	// ResponseSchema is a JSON Schema (a json.RawMessage, or any value that
	// marshals to a JSON object) a resolved payload must satisfy.
	ResponseSchema any
	// ExpiresAt, or Timeout from now, is when the interrupt expires: after
	// it a resolve is refused and a cancel is still accepted.
	ExpiresAt time.Time
	Timeout   time.Duration
	// Metadata is passed through to notifiers and approvers.
	Metadata map[string]any
	// Approvers and ApproverGroups, when either is set, are the only
	// identities (or members of the groups) allowed to decide.
	Approvers      []string
	ApproverGroups []string
	// OnExpiry says what happens when nobody decides by the deadline; the
	// zero value takes the coordinator's default (cancel: fail closed).
	OnExpiry Expiry
	// RemindBefore lists reminders before the deadline; nil takes the
	// coordinator's default.
	RemindBefore []time.Duration
	// Sensitive, when set, says whether the answer is withheld from every
	// read (see subjects.Interrupt.Sensitive); nil: yes for
	// ReasonInputRequired, no otherwise.
	Sensitive *bool
	// OneClickLinks, set to false, turns one-click decision links off for
	// this interrupt (see subjects.Interrupt.OneClickLinks).
	OneClickLinks *bool
	// ChatDecisions, set to false, forbids deciding this interrupt from a
	// chat (see subjects.Interrupt.ChatDecisions).
	ChatDecisions *bool
	// Call is the tool call this interrupt gates (protocol version 2):
	// approvers see it, every vote is bound to its digest, and on the
	// replay Interrupt checks that Call, when given again, is the
	// approved call (ErrCallMismatch otherwise). Give it on the replay
	// too for that check, or use CheckCall.
	Call *ToolCall
	// Policy asks for a quorum (protocol version 2): how many approvals
	// and denials decide, whether the requester may vote, whether votes
	// may change. Operator rules can make it stricter, never weaker.
	Policy *subjects.Policy
}

// ToolCall is a tool's name and the arguments it is called with (any value
// that marshals to JSON).
type ToolCall struct {
	Tool      string
	Arguments any
}

// call returns c as the wire's call, its digest computed.
func (c *ToolCall) call() (*subjects.Call, error) {
	raw, err := json.Marshal(c.Arguments)
	if err != nil {
		return nil, fmt.Errorf("%w: call arguments: %w", ErrInvalidRequest, err)
	}
	if c.Arguments == nil {
		raw = nil
	}
	sc, err := subjects.NewCall(c.Tool, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: call: %w", ErrInvalidRequest, err)
	}
	return sc, nil
}

// CheckCall returns nil when d approved the call of tool with args (its
// arguments as edited by the approvers, if they edited them), or an error
// matching ErrCallMismatch: run nothing then. A decision that approved no
// call (no callDigest) approves none: that is an ErrCallMismatch too, so a
// tool that requires an approved call fails closed.
func CheckCall(d Decision, tool string, args any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("%w: arguments: %w", ErrInvalidRequest, err)
	}
	if args == nil {
		raw = nil
	}
	got, err := subjects.CallDigest(tool, raw)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if d.Status != subjects.StatusResolved || d.CallDigest != got {
		return &CallMismatchError{InterruptID: d.InterruptID, Approved: d.CallDigest, Got: got}
	}
	return nil
}

// ApprovedArguments are the arguments the approvers approved for d's call:
// their edited arguments when they edited them, requested otherwise.
func ApprovedArguments(d Decision, requested any) any {
	if len(d.Arguments) > 0 {
		return d.Arguments
	}
	return requested
}

// ExecutionKey returns the execution key of the last approved call
// Interrupt returned in ctx's tool call: the same on every replay of the
// run, unguessable without the coordinator's key. Give it to the outside
// system as the idempotency key of the call's side effect, so a crash
// after the side effect and before the pass's outcome does not do it
// twice. ok is false outside a run or before an approved call.
func ExecutionKey(ctx context.Context) (key string, ok bool) {
	p := passFrom(ctx)
	if p == nil {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key, ok = p.keys[toolCallOf(ctx)]
	return key, ok
}

// Expiry is what happens to an interrupt at its deadline, as an agent
// writes it; it travels as a subjects.ExpiryPolicy.
type Expiry struct {
	// Action: ExpiryCancel, ExpiryResolve or ExpiryEscalate.
	Action ExpiryAction
	// Payload is the answer Resolve applies; it must satisfy ResponseSchema.
	Payload any
	// Escalate: Approvers join those allowed to decide, the deadline moves
	// by Extend, Times times (default 1), then the interrupt is cancelled.
	Approvers []string
	Extend    time.Duration
	Times     int
}

// Interrupt asks a person for a decision.
//
// On the suspend pass it records req and returns an error matching
// ErrSuspended, which the body returns: the pass ends, and every interrupt
// raised in it is published in one suspension. On the replay pass, when this
// interrupt's decision is present, it returns the decision without reading
// req; a cancelled decision comes with an error matching ErrCancelled.
// Outside a run it returns ErrNotInRun.
func Interrupt(ctx context.Context, req Request) (Decision, error) {
	p := passFrom(ctx)
	if p == nil {
		return Decision{}, fmt.Errorf("interrupt: %w", ErrNotInRun)
	}
	scope := toolCallOf(ctx)
	p.mu.Lock()
	ord := p.ordinals[scope]
	p.ordinals[scope]++
	p.mu.Unlock()
	id := subjects.InterruptID(p.info.RunID, scope, ord)
	if d, ok := p.decided(id); ok {
		return p.answer(scope, id, d, req)
	}
	in, err := p.interrupt(id, scope, req)
	if err != nil {
		p.mu.Lock()
		p.firstErrs = append(p.firstErrs, err)
		p.mu.Unlock()
		return Decision{}, err
	}
	if p.ask != nil {
		if d, ok := p.ask(ctx, in); ok {
			raw, err := json.Marshal(d)
			if err == nil {
				// Journaled with the pass's outcome: every later pass
				// returns this decision without asking again.
				p.mu.Lock()
				p.journal[askKey(id)] = raw
				p.mu.Unlock()
				return p.answer(scope, id, d, req)
			}
		}
	}
	p.mu.Lock()
	p.pending = append(p.pending, in)
	p.mu.Unlock()
	return Decision{}, &SuspendError{InterruptID: id}
}

// answer is what Interrupt returns for decision d of interrupt id in tool
// call scope: a cancellation as a CancelledError, an approval after
// checking that req's call (when given) is the approved one.
func (p *pass) answer(scope, id string, d Decision, req Request) (Decision, error) {
	if d.Cancelled() {
		return d, &CancelledError{InterruptID: id, Comment: d.Comment, Approver: d.Approver, Reason: cancelReason(d)}
	}
	if req.Call != nil {
		// The call about to run must be the approved one: the
		// request's, or the approvers' edit of it.
		if err := CheckCall(d, req.Call.Tool, ApprovedArguments(d, req.Call.Arguments)); err != nil {
			return d, err
		}
	}
	if d.ExecutionKey != "" {
		p.mu.Lock()
		if p.keys == nil {
			p.keys = map[string]string{}
		}
		p.keys[scope] = d.ExecutionKey
		p.mu.Unlock()
	}
	return d, nil
}

func (p *pass) interrupt(id, scope string, req Request) (subjects.Interrupt, error) {
	if req.ToolCallID != "" && req.ToolCallID != scope {
		return subjects.Interrupt{}, fmt.Errorf("interrupt %s: %w: request names %q, context has %q (use WithToolCall)",
			id, ErrToolCallMismatch, req.ToolCallID, scope)
	}
	in := subjects.Interrupt{ID: id, Reason: req.Reason, Message: req.Message, ToolCallID: scope,
		Approvers: req.Approvers, ApproverGroups: req.ApproverGroups, Sensitive: req.Sensitive,
		OneClickLinks: req.OneClickLinks, ChatDecisions: req.ChatDecisions}
	if in.Reason == "" {
		in.Reason = subjects.ReasonConfirmation
		if scope != "" {
			in.Reason = subjects.ReasonToolCall
		}
	}
	if req.Call != nil {
		c, err := req.Call.call()
		if err != nil {
			return in, err
		}
		in.Call = c
	}
	if req.Policy != nil {
		pol := *req.Policy
		in.Policy = &pol
	}
	if req.ResponseSchema != nil {
		raw, err := json.Marshal(req.ResponseSchema)
		if err != nil {
			return in, fmt.Errorf("%w: responseSchema: %w", ErrInvalidRequest, err)
		}
		if string(raw) != "null" { // a nil map or pointer: no schema
			if err := p.schemas.Compile(raw); err != nil {
				return in, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
			}
			in.ResponseSchema = raw
		}
	}
	if len(req.Metadata) > 0 {
		raw, err := json.Marshal(req.Metadata)
		if err != nil {
			return in, fmt.Errorf("%w: metadata: %w", ErrInvalidRequest, err)
		}
		in.Metadata = raw
	}
	switch {
	case !req.ExpiresAt.IsZero():
		t := req.ExpiresAt.UTC()
		in.ExpiresAt = &t
	case req.Timeout > 0:
		t := time.Now().Add(req.Timeout).UTC()
		in.ExpiresAt = &t
	}
	for _, d := range req.RemindBefore {
		in.RemindBeforeSeconds = append(in.RemindBeforeSeconds, int(d.Round(time.Second)/time.Second))
	}
	if e := req.OnExpiry; e.Action != "" {
		in.OnExpiry = &subjects.ExpiryPolicy{Action: e.Action, Approvers: e.Approvers,
			ExtendSeconds: int(e.Extend.Round(time.Second) / time.Second), Times: e.Times}
		if e.Payload != nil {
			raw, err := json.Marshal(e.Payload)
			if err != nil {
				return in, fmt.Errorf("%w: onExpiry payload: %w", ErrInvalidRequest, err)
			}
			if len(in.ResponseSchema) > 0 {
				if err := p.schemas.Validate(in.ResponseSchema, raw); err != nil {
					return in, fmt.Errorf("%w: onExpiry payload does not satisfy responseSchema: %w", ErrInvalidRequest, err)
				}
			}
			in.OnExpiry.Payload = raw
		}
	}
	if err := in.Validate(); err != nil {
		return in, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return in, nil
}

// cancelReason is CancelExpired for a cancellation the coordinator's expiry
// applied, CancelDenied for one a person sent. It is read from who
// cancelled: the approver the coordinator recorded, which for an expiry is
// subjects.ExpiryApprover (not a valid identity token, so no approver can
// take it), and for anyone else the identity the transport proved. The
// decision's metadata, which any approver writes, is never consulted.
func cancelReason(d subjects.Decision) string {
	if d.Approver == subjects.ExpiryApprover {
		return CancelExpired
	}
	return CancelDenied
}

// IsResuming reports whether the next Interrupt call with ctx will return a
// decision rather than suspend: the predicate Interrupt itself uses. It is
// false on the first pass, true on a replay once the next interrupt of ctx's
// tool call is decided, and false outside a run.
func IsResuming(ctx context.Context) bool {
	p := passFrom(ctx)
	if p == nil {
		return false
	}
	scope := toolCallOf(ctx)
	p.mu.Lock()
	ord := p.ordinals[scope]
	p.mu.Unlock()
	_, ok := p.decided(subjects.InterruptID(p.info.RunID, scope, ord))
	return ok
}

// Step runs fn once per run: the first pass records its result in the
// journal, and every replay returns the recorded result without calling fn.
// Steps are keyed by tool call, name and how many times the name was used
// before in that tool call. A failed fn is not recorded. Outside a run it
// returns ErrNotInRun.
//
// The journal is written with the pass's outcome (the suspension), so a step
// whose pass crashed before suspending runs again on the retry.
func Step[T any](ctx context.Context, name string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	p := passFrom(ctx)
	if p == nil {
		return zero, fmt.Errorf("step %q: %w", name, ErrNotInRun)
	}
	scope := toolCallOf(ctx)
	p.mu.Lock()
	n := p.steps[scope+"\x00"+name]
	p.steps[scope+"\x00"+name]++
	key := subjects.StepKey(scope, name, n)
	raw, ok := p.journal[key]
	p.mu.Unlock()
	if ok {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return zero, fmt.Errorf("step %q: recorded result does not fit %T: %w", name, v, err)
		}
		return v, nil
	}
	v, err := fn(ctx)
	if err != nil {
		return v, err
	}
	raw, err = json.Marshal(v)
	if err != nil {
		return v, fmt.Errorf("step %q: result cannot be journaled: %w", name, err)
	}
	p.mu.Lock()
	p.journal[key] = raw
	p.mu.Unlock()
	return v, nil
}
