// Package policy is the operator's decision rules: the coordinator's
// configuration of which interrupts are approved or denied automatically,
// which need a quorum, who may approve them and over which channels. It
// loads and compiles the rules and evaluates them on an interrupt under a
// time budget; what a ruling does to a run record is processor/rules'
// (rules.Stricter and the automatic decisions of ApplyOutcome).
//
// Rules are matched with the expression language of the notifier routes
// (expr, https://expr-lang.org) over Env. Rules read agent-supplied
// arguments, so they fail closed: a rule whose expression fails (a field
// it reads is missing, a value has the wrong type) or runs past the
// budget does not approve, and a deny or require rule that fails applies.
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
	"go.yaml.in/yaml/v3"

	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// ErrConfig is matched by every error of a policies file.
var ErrConfig = errors.New("invalid policies file")

// ErrRule is matched by the failure of one rule on one interrupt: a
// missing field, a wrong type, the budget exceeded.
var ErrRule = errors.New("rule failed")

// DefaultBudget bounds the evaluation of one rule on one interrupt.
const DefaultBudget = 10 * time.Millisecond

// Action is what a rule does to the interrupts it matches.
type Action string

// Actions.
const (
	// Approve resolves the interrupt, decided by subjects.PolicyApprover.
	Approve Action = "approve"
	// Deny cancels it.
	Deny Action = "deny"
	// Require makes its policy stricter.
	Require Action = "require"
)

// Rule is one operator rule, as the policies file writes it.
type Rule struct {
	Name   string `yaml:"name"`
	Match  string `yaml:"match"`
	Action Action `yaml:"action"`
	// Require's fields: see rules.Requirement.
	Approvals      int      `yaml:"approvals"`
	Denials        int      `yaml:"denials"`
	Approvers      []string `yaml:"approvers"`
	ApproverGroups []string `yaml:"approverGroups"`
	AllowRequester bool     `yaml:"allowRequester"`
	AllowChange    bool     `yaml:"allowChange"`
	ChatDecisions  *bool    `yaml:"chatDecisions"`
	OneClickLinks  *bool    `yaml:"oneClickLinks"`
}

// File is a policies file.
type File struct {
	Rules []Rule `yaml:"rules"`
	// Budget bounds one rule's evaluation on one interrupt; default
	// DefaultBudget.
	Budget time.Duration `yaml:"budget"`
}

// Env is what a rule's match expression sees of an interrupt:
//
//	tool == "issue_refund" && arguments.amount < 20
//	agent == "deploy" && arguments.env == "prod"
type Env struct {
	Agent     string         `expr:"agent"`
	RunID     string         `expr:"runId"`
	Reason    string         `expr:"reason"`
	Tool      string         `expr:"tool"`
	Arguments any            `expr:"arguments"`
	Metadata  map[string]any `expr:"metadata"`
	Requester string         `expr:"requester"`
}

// Set is a compiled policies file.
type Set struct {
	rules  []compiled
	budget time.Duration
}

type compiled struct {
	Rule
	program *vm.Program
}

// Load reads and compiles the policies file at path.
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return Parse(path, data)
}

// Parse compiles a policies file; name is used in errors.
func Parse(name string, data []byte) (*Set, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
	}
	return Compile(f)
}

// Compile checks and compiles f.
func Compile(f File) (*Set, error) {
	s := &Set{budget: f.Budget}
	if s.budget <= 0 {
		s.budget = DefaultBudget
	}
	seen := map[string]bool{}
	for i, r := range f.Rules {
		where := fmt.Sprintf("rules[%d] (%s)", i, r.Name)
		if r.Name == "" || strings.ContainsAny(r.Name, "\x00\n") || len(r.Name) > subjects.MaxIDLen {
			return nil, fmt.Errorf("%w: %s: a rule needs a name (1-256 bytes, one line)", ErrConfig, where)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: %s: the name is used twice", ErrConfig, where)
		}
		seen[r.Name] = true
		switch r.Action {
		case Approve, Deny:
			if r.Approvals != 0 || r.Denials != 0 || len(r.Approvers) > 0 || len(r.ApproverGroups) > 0 {
				return nil, fmt.Errorf("%w: %s: approvals, denials and approvers go with action require", ErrConfig, where)
			}
		case Require:
			if r.Approvals < 0 || r.Approvals > subjects.MaxPolicyVotes || r.Denials < 0 || r.Denials > subjects.MaxPolicyVotes {
				return nil, fmt.Errorf("%w: %s: approvals and denials are between 1 and %d", ErrConfig, where, subjects.MaxPolicyVotes)
			}
		default:
			return nil, fmt.Errorf("%w: %s: action %q is not approve, deny or require", ErrConfig, where, r.Action)
		}
		if (r.ChatDecisions != nil && *r.ChatDecisions) || (r.OneClickLinks != nil && *r.OneClickLinks) {
			return nil, fmt.Errorf("%w: %s: a rule can only turn chatDecisions and oneClickLinks off (false)", ErrConfig, where)
		}
		prog, err := expr.Compile(r.Match, expr.Env(Env{}), expr.AsBool(), expr.Patch(strictFields{}),
			expr.Function(fieldFunc, field))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: match: %v", ErrConfig, where, err)
		}
		s.rules = append(s.rules, compiled{Rule: r, program: prog})
	}
	return s, nil
}

// fieldFunc is the function strictFields puts in place of a member access
// under arguments or metadata.
const fieldFunc = "_field"

// strictFields rewrites arguments.a.b (and metadata.x) into
// _field(arguments, "a", "b"), which fails on a missing field where expr
// would give nil: a rule reads agent-supplied arguments and must fail
// closed when a field it reads is not there. The rewrite keeps && and ||
// lazy: a field is read only where the expression reaches it.
type strictFields struct{}

func (strictFields) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok || m.Method {
		return
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	switch base := m.Node.(type) {
	case *ast.IdentifierNode:
		if base.Value == "arguments" || base.Value == "metadata" {
			ast.Patch(n, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fieldFunc},
				Arguments: []ast.Node{base, &ast.StringNode{Value: base.Value}, &ast.StringNode{Value: prop.Value}}})
		}
	case *ast.CallNode:
		if id, ok := base.Callee.(*ast.IdentifierNode); ok && id.Value == fieldFunc {
			args := append(slices.Clone(base.Arguments), &ast.StringNode{Value: prop.Value})
			ast.Patch(n, &ast.CallNode{Callee: &ast.IdentifierNode{Value: fieldFunc}, Arguments: args})
		}
	}
}

// field is _field(root, rootName, key...): the value at the path, or an
// error naming the missing field.
func field(params ...any) (any, error) {
	v := params[0]
	path, _ := params[1].(string)
	for _, p := range params[2:] {
		k, _ := p.(string)
		path += "." + k
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %s is missing (not an object above it)", ErrRule, path)
		}
		if v, ok = m[k]; !ok {
			return nil, fmt.Errorf("%w: %s is missing", ErrRule, path)
		}
	}
	return v, nil
}

// EnvOf is what rules see of interrupt in of run rec.
func EnvOf(rec *subjects.Run, in subjects.Interrupt) Env {
	env := Env{Agent: rec.Agent, RunID: rec.RunID, Reason: in.Reason, Requester: rec.Requester}
	if in.Call != nil {
		env.Tool = in.Call.Tool
		if len(in.Call.Arguments) > 0 {
			env.Arguments = decode(in.Call.Arguments)
		} else {
			env.Arguments = map[string]any{}
		}
	}
	if len(in.Metadata) > 0 {
		env.Metadata, _ = decode(in.Metadata).(map[string]any)
	}
	return env
}

func decode(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return numbers(v)
}

// numbers turns json.Numbers into float64 (or int when whole and small),
// which expressions compare with literals.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// Ruling evaluates every rule on interrupt in of run rec. It is
// rules.Set.Operator.
func (s *Set) Ruling(rec *subjects.Run, in subjects.Interrupt) rules.Ruling {
	var r rules.Ruling
	if s == nil {
		return r
	}
	env := EnvOf(rec, in)
	for _, c := range s.rules {
		matched, err := s.eval(c, env)
		if err != nil {
			r.Failed = append(r.Failed, fmt.Sprintf("%s: %v", c.Name, err))
			// Fail closed: an error never approves; a deny or require
			// applies.
			matched = c.Action != Approve
		}
		if !matched {
			continue
		}
		switch c.Action {
		case Approve:
			if r.Approve == "" {
				r.Approve = c.Name
			}
		case Deny:
			if r.Deny == "" {
				r.Deny = c.Name
			}
		case Require:
			r.Require = append(r.Require, rules.Requirement{Rule: c.Name, Approvals: c.Approvals, Denials: c.Denials,
				Approvers: slices.Clone(c.Approvers), ApproverGroups: slices.Clone(c.ApproverGroups),
				AllowRequester: c.AllowRequester, AllowChange: c.AllowChange,
				NoChat: c.ChatDecisions != nil, NoLinks: c.OneClickLinks != nil})
		}
	}
	return r
}

// eval runs c on env under the budget.
func (s *Set) eval(c compiled, env Env) (bool, error) {
	type result struct {
		out any
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("%w: %v", ErrRule, p)}
			}
		}()
		out, err := expr.Run(c.program, env)
		done <- result{out, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), s.budget)
	defer cancel()
	select {
	case res := <-done:
		if res.err != nil {
			return false, fmt.Errorf("%w: %v", ErrRule, res.err)
		}
		b, ok := res.out.(bool)
		if !ok {
			return false, fmt.Errorf("%w: the match is not a boolean", ErrRule)
		}
		return b, nil
	case <-ctx.Done():
		return false, fmt.Errorf("%w: over its budget of %s", ErrRule, s.budget)
	}
}
