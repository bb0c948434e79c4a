package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// Ruling is what the operator's rules say about one interrupt: the
// requirements of the require rules that matched, the first approve and
// deny rules that matched (by name), and the rules that failed (applied
// failing closed), each as "name: why".
type Ruling struct {
	Require []Requirement
	Approve string
	Deny    string
	Failed  []string
}

// Requirement is what one require rule asks of an interrupt. Applied to
// the agent's request, each field can only make it stricter.
type Requirement struct {
	Rule           string
	Approvals      int
	Denials        int
	Approvers      []string
	ApproverGroups []string
	AllowRequester bool
	AllowChange    bool
	NoChat         bool
	NoLinks        bool
}

// Stricter returns in with every requirement applied: the larger
// approvals, the smaller denials (a rule naming none asks the default, 1:
// a refusal is the safe outcome), the
// requester and vote changes allowed only if the agent and every rule
// allow them, chat and link decisions off if any rule turns them off,
// and approvers restricted to those both the agent and the rule name
// (resolved to identities through members when both name some). An
// onExpiry resolve becomes a cancel: silence never approves what an
// operator rule gates. The rules' names are recorded in policy.rules.
func Stricter(in subjects.Interrupt, reqs []Requirement, members func(string) []string) subjects.Interrupt {
	if len(reqs) == 0 {
		return in
	}
	var pol subjects.Policy
	agentPolicy := in.Policy != nil
	if agentPolicy {
		pol = *in.Policy
		pol.Rules = slices.Clone(pol.Rules)
	}
	for i, r := range reqs {
		pol.Approvals = max(pol.NeedApprovals(), r.Approvals, 1)
		pol.Denials = min(pol.NeedDenials(), max(r.Denials, 1)) // a rule's default is 1
		if i == 0 && !agentPolicy {
			pol.AllowRequester, pol.AllowChange = r.AllowRequester, r.AllowChange
		} else {
			pol.AllowRequester = pol.AllowRequester && r.AllowRequester
			pol.AllowChange = pol.AllowChange && r.AllowChange
		}
		if r.NoChat {
			in.ChatDecisions = new(bool)
		}
		if r.NoLinks {
			in.OneClickLinks = new(bool)
		}
		in.Approvers, in.ApproverGroups = restrict(in.Approvers, in.ApproverGroups, r.Approvers, r.ApproverGroups, members)
		in.OnExpiry = escalateWithin(in.OnExpiry, r, members)
		pol.Rules = append(pol.Rules, r.Rule)
	}
	in.Policy = &pol
	if in.OnExpiry != nil && in.OnExpiry.Action == subjects.ExpiryResolve {
		cancel := subjects.ExpiryPolicy{Action: subjects.ExpiryCancel}
		in.OnExpiry = &cancel
	}
	return in
}

// stricter is Stricter with this set's members, and its default expiry
// written into in first when a rule applies and in has none of its own:
// an escalation adds approvers at the deadline (ApplyTimer), and the
// default's must not add one a rule excludes either.
func (s *Set) stricter(in subjects.Interrupt, reqs []Requirement) subjects.Interrupt {
	if len(reqs) > 0 && (in.OnExpiry == nil || in.OnExpiry.Action == "") {
		if p := s.Expiry.Policy(in); p.Action == subjects.ExpiryEscalate && len(p.Approvers) > 0 {
			p.Approvers = slices.Clone(p.Approvers)
			in.OnExpiry = &p
		}
	}
	return Stricter(in, reqs, s.Members)
}

// escalateWithin is p with only the escalation approvers r allows (when r
// names who may decide): an agent's escalation adds approvers at the
// deadline (Set.ApplyTimer), and must not add one the rule excludes.
func escalateWithin(p *subjects.ExpiryPolicy, r Requirement, members func(string) []string) *subjects.ExpiryPolicy {
	if p == nil || len(p.Approvers) == 0 || len(r.Approvers) == 0 && len(r.ApproverGroups) == 0 {
		return p
	}
	allowed := identities(r.Approvers, r.ApproverGroups, members)
	cp := *p
	cp.Approvers = slices.DeleteFunc(slices.Clone(p.Approvers), func(a string) bool { return !allowed[a] })
	return &cp
}

// identities is everyone names and the members of groups are.
func identities(names, groups []string, members func(string) []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	for _, g := range groups {
		if members == nil {
			continue
		}
		for _, m := range members(g) {
			out[m] = true
		}
	}
	return out
}

// restrict is who may decide under both (a, ag) and (b, bg): either
// alone when the other names nobody, otherwise the identities both
// include.
func restrict(a, ag, b, bg []string, members func(string) []string) ([]string, []string) {
	if len(b) == 0 && len(bg) == 0 {
		return a, ag
	}
	if len(a) == 0 && len(ag) == 0 {
		return slices.Clone(b), slices.Clone(bg)
	}
	left, right := identities(a, ag, members), identities(b, bg, members)
	both := []string{}
	for n := range left {
		if right[n] {
			both = append(both, n)
		}
	}
	slices.Sort(both)
	if len(both) == 0 {
		// Nobody may decide: the policy cannot be met, and is refused.
		both = []string{subjects.PolicyApprover}
	}
	return both, nil
}

// PolicyDecisionID is the decision id of the decision an operator rule
// made on interrupt id.
func PolicyDecisionID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "policy-" + hex.EncodeToString(sum[:12])
}

// PolicyDecision is the decision by subjects.PolicyApprover that rule
// makes on st: a resolve (approve) or a cancel (deny), no payload.
func PolicyDecision(st subjects.InterruptState, rule string, status subjects.Status) subjects.Decision {
	return subjects.Decision{Version: subjects.Version2, DecisionID: PolicyDecisionID(st.ID), InterruptID: st.ID,
		Status: status, Approver: subjects.PolicyApprover, Rule: rule, Comment: "decided by operator rule " + rule}
}

// settle applies the rulings' automatic decisions to the interrupts of
// rec's pass: a deny rule cancels; an approve rule resolves only an
// interrupt one approval decides whose answer needs no payload.
func (s *Set) settle(rec *subjects.Run, rulings map[string]Ruling, now time.Time) *subjects.Run {
	for i := range rec.Interrupts {
		r, ok := rulings[rec.Interrupts[i].ID]
		if !ok || rec.Interrupts[i].Decision != nil {
			continue
		}
		st := rec.Interrupts[i]
		d, ok := s.ruled(st, r)
		if !ok {
			continue
		}
		s.bindCall(rec, st, &d)
		rec = ApplyDecision(rec, i, d, 0, now)
	}
	return rec
}

// Settles is what the operator's rules say, asked before a suspension
// (subjects.Ask), about interrupt in of run rec: the decision a rule makes
// (nil: none; the pass suspends as usual) and the ruling, whose failures
// are audited. It decides as ApplyOutcome's automatic decisions do: a
// deny cancels, an approve resolves only an interrupt one approval
// decides whose answer needs no payload.
func (s *Set) Settles(rec *subjects.Run, in subjects.Interrupt) (*subjects.Decision, Ruling) {
	if s.Operator == nil {
		return nil, Ruling{}
	}
	r := s.Operator(rec, in)
	st := subjects.InterruptState{Interrupt: s.stricter(in, r.Require)}
	d, ok := s.ruled(st, r)
	if !ok {
		return nil, r
	}
	s.bindCall(rec, st, &d)
	return &d, r
}

// ruled is the decision ruling r makes on interrupt st, if it makes one:
// a deny cancels; an approve resolves only an interrupt one approval
// decides whose answer needs no payload.
func (s *Set) ruled(st subjects.InterruptState, r Ruling) (subjects.Decision, bool) {
	switch {
	case r.Deny != "":
		return PolicyDecision(st, r.Deny, subjects.StatusCancelled), true
	case r.Approve != "" && st.Policy.NeedApprovals() == 1 && s.schemas().CheckAnswer(st.Interrupt, subjects.StatusResolved, nil) == nil:
		return PolicyDecision(st, r.Approve, subjects.StatusResolved), true
	}
	return subjects.Decision{}, false
}
