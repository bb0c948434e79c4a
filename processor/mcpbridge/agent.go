package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// The built-in agents' default names: `interlock mcp serve` runs the first,
// `interlock mcp proxy` the second. Each serves only its own runs.
const (
	ServeAgent = "mcp"
	ProxyAgent = "mcp_proxy"
)

// toolCallScope is the tool call scope of the one interrupt each run raises.
const toolCallScope = "mcp"

// Ask is the input of a run of a built-in agent: what to ask.
type Ask struct {
	// Action is what is asked about, in a few words ("deploy to prod").
	Action string `json:"action"`
	// Tool is the upstream tool to call on approval (proxy runs only).
	Tool string `json:"tool,omitempty"`
	// Arguments are shown to the approver; for a proxy run, the upstream
	// call's arguments unless the approver edits them.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Approvers []string        `json:"approvers,omitempty"`
	// Deadline is when the interrupt expires (zero: the coordinator's
	// default); nobody deciding by then denies.
	Deadline time.Time `json:"deadline,omitzero"`
	// ResponseSchema is the schema of the decision's payload.
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"`
	// Note is added to the message the approver sees.
	Note string `json:"note,omitempty"`
	// Upstream, on a proxy run, is a digest of the id of the upstream it
	// was asked for (ProxyConfig.UpstreamID): only a proxy in front of
	// that upstream makes the call.
	Upstream string `json:"upstream,omitempty"`
}

// The statuses of an Answer and of a Status.
const (
	// StatusPending: the interrupt waits for a decision.
	StatusPending = "pending"
	// StatusQueued: the run has no outcome yet (just started, or no such
	// run of this agent).
	StatusQueued = "queued"
	// StatusApproved: resolved; for a proxy run, the upstream call was made
	// and its result is in Result.
	StatusApproved = "approved"
	// StatusDenied: an approver cancelled.
	StatusDenied = "denied"
	// StatusExpired: nobody decided by the deadline.
	StatusExpired = "expired"
	// StatusUnknown (proxy): the call was recorded as being made and the
	// proxy stopped before its result was stored; it is not made again.
	StatusUnknown = "outcome_unknown"
	// StatusCallFailed (proxy): the upstream call after approval failed; it
	// is not retried.
	StatusCallFailed = "call_failed"
	// StatusCallRefused (proxy): approved, but the call the proxy was
	// about to make is not the approved one (its digest differs from the
	// decision's callDigest, processor.ErrCallMismatch); it is not made.
	StatusCallRefused = "call_refused"
	// StatusFailed: the run failed.
	StatusFailed = "failed"
)

// Answer is the result of a run of a built-in agent.
type Answer struct {
	Status string `json:"status"`
	// Tool (proxy) is the upstream tool the run is about.
	Tool     string          `json:"tool,omitempty"`
	Approver string          `json:"approver,omitempty"`
	Comment  string          `json:"comment,omitempty"`
	Answer   json.RawMessage `json:"answer,omitempty"`
	// Arguments (proxy) are those the upstream was called with.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// CallDigest (proxy) is the digest of the call the approvers approved
	// (subjects.CallDigest), sent upstream as MetaCallDigest.
	CallDigest string `json:"callDigest,omitempty"`
	// Result (proxy) is the upstream's CallToolResult.
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Status is where a run of a built-in agent stands, read from its last
// outcome on the runs stream (the agent's own subjects: no run record is
// read).
type Status struct {
	RunID       string     `json:"id"`
	Status      string     `json:"status"`
	InterruptID string     `json:"interruptId,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	Answer
}

// Done reports whether s is final.
func (s Status) Done() bool { return s.Status != StatusPending && s.Status != StatusQueued }

// ReadStatus reads the last outcome of run of agent.
func ReadStatus(ctx context.Context, c *jetstream.Client, agent, run string) (Status, error) {
	st := Status{RunID: run, Status: StatusQueued}
	filter, err := c.Namespace().RunOutcomes(agent, run)
	if err != nil {
		return st, err
	}
	m, err := c.DirectLast(ctx, jetstream.StreamRuns, filter)
	if errors.Is(err, jetstream.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	addr, err := c.Namespace().Parse(m.Subject)
	if err != nil {
		return st, err
	}
	switch addr.Kind {
	case subjects.KindReminder, subjects.KindEscalated, subjects.KindExpired:
		// The runs stream holds the coordinator's notices too: the run's
		// state is its last outcome (an expired interrupt stays pending
		// until the replay its expiry queued reports, which can come before
		// the notice).
		if m, err = processor.LastOutcome(ctx, c, agent, run); err != nil {
			return st, err
		}
		if addr, err = c.Namespace().Parse(m.Subject); err != nil {
			return st, err
		}
	}
	switch addr.Kind {
	case subjects.KindSuspended:
		var s subjects.Suspension
		if err := json.Unmarshal(m.Data, &s); err != nil || len(s.Interrupts) == 0 {
			return st, fmt.Errorf("%w: suspension of run %s", subjects.ErrMalformed, run)
		}
		st.Status, st.InterruptID, st.ExpiresAt = StatusPending, s.Interrupts[0].ID, s.Interrupts[0].ExpiresAt
	case subjects.KindCompleted:
		var done subjects.Completion
		if err := json.Unmarshal(m.Data, &done); err != nil {
			return st, fmt.Errorf("%w: completion of run %s", subjects.ErrMalformed, run)
		}
		if err := json.Unmarshal(done.Result, &st.Answer); err != nil {
			return st, fmt.Errorf("%w: result of run %s", subjects.ErrMalformed, run)
		}
		st.Status = st.Answer.Status
	case subjects.KindFailed:
		var f subjects.Failure
		_ = json.Unmarshal(m.Data, &f)
		st.Status, st.Error = StatusFailed, f.Error
	}
	return st, nil
}

// request is the interrupt a run of ask raises.
func (a Ask) request() processor.Request {
	msg := a.Action
	if a.Tool != "" {
		msg = "Call tool " + a.Tool
	}
	if len(a.Arguments) > 0 {
		msg += " with arguments " + clip(string(a.Arguments), 2000)
	}
	if a.Note != "" {
		msg += ". " + a.Note
	}
	meta := map[string]any{"action": a.Action}
	if a.Tool != "" {
		meta["tool"] = a.Tool
	}
	if len(a.Arguments) > 0 {
		meta["arguments"] = a.Arguments
	}
	req := processor.Request{Message: msg, Approvers: a.Approvers, ExpiresAt: a.Deadline, Metadata: meta,
		Reason: subjects.ReasonConfirmation}
	if a.Tool != "" {
		req.Reason = subjects.ReasonToolCall
		// The call itself (protocol version 2): every vote is bound to its
		// digest, an edit to the edited call's, and the decision carries
		// the approved digest and its execution key.
		args := a.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		req.Call = &processor.ToolCall{Tool: a.Tool, Arguments: args}
	}
	if len(a.ResponseSchema) > 0 {
		req.ResponseSchema = a.ResponseSchema
	}
	return req
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// decide raises a's interrupt; on the replay it returns the decision, or a
// final Answer for a cancelled one.
func decide(ctx context.Context, a Ask) (processor.Decision, *Answer, error) {
	d, err := processor.Interrupt(processor.WithToolCall(ctx, toolCallScope), a.request())
	var c *processor.CancelledError
	if errors.As(err, &c) {
		st := StatusDenied
		if c.Reason == processor.CancelExpired {
			st = StatusExpired
		}
		return d, &Answer{Status: st, Approver: c.Approver, Comment: c.Comment}, nil
	}
	return d, nil, err
}

// ApprovalAgent is the body of ServeAgent: one interrupt, and its decision
// as the run's result.
func ApprovalAgent() processor.AgentFunc {
	return processor.Typed(func(ctx context.Context, a Ask) (Answer, error) {
		d, final, err := decide(ctx, a)
		if err != nil || final != nil {
			return deref(final), err
		}
		ans := Answer{Status: StatusApproved, Approver: d.Approver, Comment: d.Comment}
		if len(d.Payload) > 0 && string(d.Payload) != "null" {
			ans.Answer = d.Payload
		}
		return ans, nil
	})
}

func deref(a *Answer) Answer {
	if a == nil {
		return Answer{}
	}
	return *a
}

// editSchema wraps a tool's input schema as the interrupt's responseSchema:
// the payload {} approves the call as proposed, {"arguments": {...}}
// approves it with edited arguments, which the coordinator checks against
// the tool's schema. A schema Interlock refuses (over its limits, or
// invalid) leaves only {}: approve or deny as proposed; note says so.
func editSchema(sc *schema.Cache, input any) (raw json.RawMessage, note string) {
	asProposed := json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
	in, err := json.Marshal(input)
	if err != nil || len(in) == 0 || string(in) == "null" {
		return asProposed, "The tool declares no input schema: approve or deny as proposed."
	}
	wrapped := json.RawMessage(`{"type":"object","properties":{"arguments":` + string(in) + `},"additionalProperties":false}`)
	if err := sc.Compile(wrapped); err != nil {
		return asProposed, "The tool's input schema is beyond Interlock's schema limits (" +
			strings.TrimSpace(err.Error()) + "): approve or deny as proposed; arguments cannot be edited."
	}
	return wrapped, `Approve with {} to call as proposed. To edit, approve with the edited arguments as the decision's ` +
		`"arguments" (interlock approve --edit): that approves the edited call. An edit in the payload ({"arguments": {...}}, ` +
		`checked against the tool's schema) must be that same call, or the call is refused.`
}
