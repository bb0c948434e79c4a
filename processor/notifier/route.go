package notifier

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/interlockhq/interlock/subjects"
)

// Env is what a route's match expression sees: the suspension event.
//
//	agent == "refunds" && any(interrupts, .reason == "tool_call")
//	kind == "escalated" || metadata.team == "finance"
type Env struct {
	// Kind is new, reminder, escalated or expired.
	Kind     string `expr:"kind"`
	Agent    string `expr:"agent"`
	RunID    string `expr:"runId"`
	ThreadID string `expr:"threadId"`
	Pass     int    `expr:"pass"`
	Input    any    `expr:"input"`
	// Reasons lists every interrupt's reason.
	Reasons []string `expr:"reasons"`
	// Metadata merges every interrupt's metadata (the first interrupt wins
	// a key they share).
	Metadata   map[string]any `expr:"metadata"`
	Interrupts []EnvInterrupt `expr:"interrupts"`
}

// EnvInterrupt is one interrupt as match expressions see it.
type EnvInterrupt struct {
	ID         string         `expr:"id"`
	Reason     string         `expr:"reason"`
	Message    string         `expr:"message"`
	ToolCallID string         `expr:"toolCallId"`
	Approvers  []string       `expr:"approvers"`
	Metadata   map[string]any `expr:"metadata"`
	// ExpiresIn is the time left, zero when the interrupt has no deadline.
	ExpiresIn time.Duration `expr:"expiresIn"`
}

func compileMatch(src string) (*vm.Program, error) {
	return expr.Compile(src, expr.Env(Env{}), expr.AsBool())
}

func envOf(s *subjects.Suspension, now time.Time) Env {
	env := Env{Agent: s.Agent, RunID: s.RunID, ThreadID: s.ThreadID, Pass: s.Pass, Metadata: map[string]any{}}
	if len(s.Input) > 0 {
		_ = json.Unmarshal(s.Input, &env.Input)
	}
	for _, in := range s.Interrupts {
		ei := EnvInterrupt{ID: in.ID, Reason: in.Reason, Message: in.Message, ToolCallID: in.ToolCallID,
			Approvers: in.Approvers}
		if len(in.Metadata) > 0 {
			_ = json.Unmarshal(in.Metadata, &ei.Metadata)
		}
		for k, v := range ei.Metadata {
			if _, seen := env.Metadata[k]; !seen {
				env.Metadata[k] = v
			}
		}
		if in.ExpiresAt != nil {
			ei.ExpiresIn = in.ExpiresAt.Sub(now)
		}
		env.Reasons = append(env.Reasons, in.Reason)
		env.Interrupts = append(env.Interrupts, ei)
	}
	return env
}

// route is a compiled RouteConfig.
type route struct {
	cfg       RouteConfig
	match     *vm.Program
	templates *templates
}

func (r *route) matches(env Env) (bool, error) {
	out, err := expr.Run(r.match, env)
	if err != nil {
		return false, fmt.Errorf("route %s: match: %w", r.cfg.Name, err)
	}
	b, _ := out.(bool)
	return b, nil
}
