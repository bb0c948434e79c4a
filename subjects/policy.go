package subjects

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Version2 is the protocol version of decision policies: quorum votes,
// approvals bound to a tool call, operator rules and execution keys. A
// message that carries any of their fields says "version": 2; every other
// message keeps saying 1 (Version), so version 1 readers read it as before
// and refuse what they could only misread. Readers of this package accept
// both ([WireVersion] says which a message needs).
const Version2 = 2

// MaxPolicyVotes bounds Policy.Approvals and Policy.Denials.
const MaxPolicyVotes = 32

// StatusWithdrawn takes back the sender's open vote (version 2), where the
// interrupt's policy allows changes. It never closes an interrupt.
const StatusWithdrawn Status = "withdrawn"

// OutcomeVoteRecorded: the vote counts and the interrupt still waits
// (version 2). The verdict's Tally says what is still needed.
const OutcomeVoteRecorded Outcome = "vote_recorded"

// PolicyApprover is the approver of decisions an operator rule made.
const PolicyApprover = "interlock:policy"

// Rejection codes of decision policies.
const (
	// CodeRequesterExcluded: the sender started the run and the policy
	// does not let the requester vote.
	CodeRequesterExcluded Code = "requester_excluded"
	// CodeAlreadyVoted: the sender voted on this interrupt under another
	// decision id and the policy does not allow changes.
	CodeAlreadyVoted Code = "already_voted"
	// CodeNoVote: a withdrawal from a sender without an open vote.
	CodeNoVote Code = "no_vote"
	// CodeCallMismatch: a digest does not belong to the call: a vote's
	// callDigest is not the digest of the call it approves, or a
	// suspension's call.digest is not the digest of its tool and
	// arguments.
	CodeCallMismatch Code = "call_mismatch"
	// CodeVoteLimit: the interrupt holds every open vote its record can
	// take (approvals + denials - 1) and this new vote would not close it.
	CodeVoteLimit Code = "vote_limit"
	// CodePolicyUnsatisfiable: an interrupt's policy needs more approvals
	// or denials than identities can be eligible.
	CodePolicyUnsatisfiable Code = "policy_unsatisfiable"
)

// Event types of decision policies.
const (
	// EventVoteRecorded: a vote (or a withdrawal) was accepted and the
	// interrupt still waits; the event's verdict carries the tally.
	EventVoteRecorded EventType = "vote_recorded"
	// EventRuleFailed: an operator rule could not be evaluated for an
	// interrupt and was applied failing closed.
	EventRuleFailed EventType = "rule_failed"
)

// Call is the tool call an interrupt gates (version 2).
type Call struct {
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// Arguments are the call's arguments, any JSON but null; empty is {}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Digest is CallDigest(Tool, Arguments).
	Digest string `json:"digest"`
}

// NewCall returns the call of tool with args, its digest computed. The
// error wraps ErrMalformed: args have no digest (see CallDigest).
func NewCall(tool string, args json.RawMessage) (*Call, error) {
	d, err := CallDigest(tool, args)
	if err != nil {
		return nil, err
	}
	return &Call{Tool: tool, Arguments: args, Digest: d}, nil
}

// Policy is how many votes decide an interrupt (version 2). In a
// suspension it is the agent's request; in the run record the effective
// policy, made stricter by the operator's rules.
type Policy struct {
	// Approvals is how many approvals of distinct identities, for the
	// same answer, resolve the interrupt; 0 means 1.
	Approvals int `json:"approvals,omitempty"`
	// Denials is how many denials of distinct identities cancel it; 0
	// means 1.
	Denials int `json:"denials,omitempty"`
	// AllowRequester lets the run's requester vote.
	AllowRequester bool `json:"allowRequester,omitempty"`
	// AllowChange lets a voter change or withdraw its vote while the
	// interrupt is open.
	AllowChange bool `json:"allowChange,omitempty"`
	// Rules names the operator rules that matched; only the coordinator
	// sets it.
	Rules []string `json:"rules,omitempty"`
}

// NeedApprovals is the approvals that resolve an interrupt under p (nil: 1).
func (p *Policy) NeedApprovals() int {
	if p == nil || p.Approvals < 1 {
		return 1
	}
	return p.Approvals
}

// NeedDenials is the denials that cancel an interrupt under p (nil: 1).
func (p *Policy) NeedDenials() int {
	if p == nil || p.Denials < 1 {
		return 1
	}
	return p.Denials
}

// Vote is one vote on an interrupt with a policy, as the run record keeps
// it and the final decision's Votes carry it.
type Vote struct {
	DecisionID string          `json:"decisionId"`
	Approver   string          `json:"approver"`
	Status     Status          `json:"status"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	Comment    string          `json:"comment,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	// CallDigest is the digest the vote counts for: the interrupt's call,
	// or the call with the vote's edited Arguments.
	CallDigest string          `json:"callDigest,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	At         time.Time       `json:"at"`
	// Seq is the vote's sequence in the decisions stream.
	Seq uint64 `json:"seq,omitempty"`
	Via string `json:"via,omitempty"`
}

// Tally is where an interrupt's votes stand after a vote (version 2).
type Tally struct {
	// Approvals counts the approvals for the answer the vote approved
	// (after a denial or a withdrawal: the largest group of approvals).
	Approvals       int `json:"approvals"`
	ApprovalsNeeded int `json:"approvalsNeeded"`
	Denials         int `json:"denials"`
	DenialsNeeded   int `json:"denialsNeeded"`
	// CallDigest is the digest the counted approvals approve.
	CallDigest string `json:"callDigest,omitempty"`
	// WaitingOn lists the named eligible approvers who have not voted, and
	// group:<name> for each eligible group.
	WaitingOn []string `json:"waitingOn,omitempty"`
}

// Remaining is a sentence saying what the tally still needs.
func (t Tally) Remaining() string {
	s := fmt.Sprintf("%d of %d approvals", t.Approvals, t.ApprovalsNeeded)
	if t.ApprovalsNeeded > 1 {
		s += " for this answer"
	}
	s += fmt.Sprintf("; %d of %d denials", t.Denials, t.DenialsNeeded)
	if len(t.WaitingOn) > 0 {
		s += fmt.Sprintf("; waiting on %v", t.WaitingOn)
	}
	return s
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// validate checks a call: a tool id, JSON arguments with a digest, and
// the digest they have.
func (c *Call) validate() error {
	if err := validateID("call.tool", c.Tool); err != nil {
		return err
	}
	if isNull(c.Arguments) {
		return malformed("call.arguments is null: omit it for no arguments")
	}
	if !digestRE.MatchString(c.Digest) {
		return malformed("call.digest must be 64 lowercase hex digits")
	}
	want, err := CallDigest(c.Tool, c.Arguments)
	if err != nil {
		return &ProtocolError{Code: CodeCallMismatch, err: ErrMalformed, Detail: "call.arguments have no digest: " + err.Error()}
	}
	if want != c.Digest {
		return &ProtocolError{Code: CodeCallMismatch, err: ErrMalformed,
			Detail: fmt.Sprintf("call.digest %s is not the digest of the call's tool and arguments (%s)", c.Digest, want)}
	}
	return nil
}

func (p *Policy) validate() error {
	if p.Approvals < 0 || p.Approvals > MaxPolicyVotes {
		return malformed("policy.approvals %d is not between 1 and %d", p.Approvals, MaxPolicyVotes)
	}
	if p.Denials < 0 || p.Denials > MaxPolicyVotes {
		return malformed("policy.denials %d is not between 1 and %d", p.Denials, MaxPolicyVotes)
	}
	for i, r := range p.Rules {
		if err := validateID(fmt.Sprintf("policy.rules[%d]", i), r); err != nil {
			return err
		}
	}
	return nil
}

// v2Field names the first version 2 field set in in, or "".
func (in *Interrupt) v2Field() string {
	switch {
	case in.Call != nil:
		return "call"
	case in.Policy != nil:
		return "policy"
	}
	return ""
}

// v2Field names the first version 2 field set in d, or "".
func (d *Decision) v2Field() string {
	switch {
	case d.Status == StatusWithdrawn:
		return "status withdrawn"
	case d.CallDigest != "":
		return "callDigest"
	case len(d.Arguments) > 0:
		return "arguments"
	case len(d.Votes) > 0:
		return "votes"
	case d.ExecutionKey != "":
		return "executionKey"
	case d.Rule != "":
		return "rule"
	}
	return ""
}

func (s *Suspension) v2Field() string {
	if s.Requester != "" {
		return "requester"
	}
	for i := range s.Interrupts {
		if f := s.Interrupts[i].v2Field(); f != "" {
			return fmt.Sprintf("interrupts[%d].%s", i, f)
		}
	}
	return ""
}

func (w *Work) v2Field() string {
	for i := range w.Decisions {
		if f := w.Decisions[i].v2Field(); f != "" {
			return fmt.Sprintf("decisions[%d].%s", i, f)
		}
	}
	return ""
}

func (r *Run) v2Field() string {
	if r.Requester != "" {
		return "requester"
	}
	if len(r.RuleFailures) > 0 {
		return "ruleFailures"
	}
	for i := range r.Interrupts {
		in := &r.Interrupts[i]
		if f := in.v2Field(); f != "" {
			return fmt.Sprintf("interrupts[%d].%s", i, f)
		}
		if len(in.Votes) > 0 {
			return fmt.Sprintf("interrupts[%d].votes", i)
		}

		if in.Decision != nil {
			if f := in.Decision.v2Field(); f != "" {
				return fmt.Sprintf("interrupts[%d].decision.%s", i, f)
			}
		}
	}
	return ""
}

func (v *Verdict) v2Field() string {
	switch {
	case v.Outcome == OutcomeVoteRecorded:
		return "outcome vote_recorded"
	case v.Tally != nil:
		return "tally"
	case v.Rule != "":
		return "rule"
	}
	return ""
}

func (n *Notice) v2Field() string {
	if len(n.Tallies) > 0 {
		return "tallies"
	}
	for i := range n.Interrupts {
		if f := n.Interrupts[i].v2Field(); f != "" {
			return fmt.Sprintf("interrupts[%d].%s", i, f)
		}
	}
	return ""
}

// versioned is a message whose version depends on its fields.
type versioned interface{ v2Field() string }

// WireVersion is the version a message must say: Version2 when it carries
// a version 2 field, Version otherwise. Writers set it just before
// encoding (Versioned does), so version 1 readers keep reading every
// message that needs nothing newer. m is a *Suspension, *Work, *Decision,
// *Run, *Verdict, *Notice or *Interrupt; anything else is Version.
func WireVersion(m any) int {
	if v, ok := m.(versioned); ok && v.v2Field() != "" {
		return Version2
	}
	return Version
}

// Versioned sets the version of each decision in w and of w itself; the
// same for the other message kinds. It returns its argument.
func Versioned[T any](m T) T {
	switch x := any(m).(type) {
	case *Suspension:
		x.Version = WireVersion(x)
	case *Work:
		for i := range x.Decisions {
			x.Decisions[i].Version = WireVersion(&x.Decisions[i])
		}
		x.Version = WireVersion(x)
	case *Decision:
		x.Version = WireVersion(x)
	case *Run:
		for i := range x.Interrupts {
			if d := x.Interrupts[i].Decision; d != nil {
				d.Version = WireVersion(d)
			}
		}
		x.Version = WireVersion(x)
	case *Verdict:
		x.Version = WireVersion(x)
	case *Notice:
		x.Version = WireVersion(x)
	}
	return m
}

// checkVersion refuses a version 2 field in a message that says version 1.
func checkVersion(version int, m versioned) error {
	if version < Version2 {
		if f := m.v2Field(); f != "" {
			return malformed("field %s needs version %d (the message says version %d)", f, Version2, version)
		}
	}
	return nil
}
