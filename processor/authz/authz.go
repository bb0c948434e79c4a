// Package authz is Interlock's one authorization rule: who may decide an
// interrupt and who may read a run. The coordinator, the gateway, the links,
// the inbox and every other path ask it; none keeps a copy of the rule.
package authz

import (
	"errors"
	"fmt"
	"slices"

	"github.com/interlockhq/interlock/subjects"
)

// ErrNotAllowed is matched by every refusal of this package.
var ErrNotAllowed = errors.New("not allowed")

// Principal is who asks: an identity (empty: anonymous), its groups, and
// whether it holds the auditor role.
type Principal struct {
	Name   string
	Groups []string
	// Auditor may read every run, interrupt and audit entry; it decides
	// nothing more than its name and groups allow.
	Auditor bool
	// Agents lists the agents p may start (through the AG-UI bridge); "*"
	// is every agent.
	Agents []string
}

// Decide returns nil when p may decide in, or an error wrapping
// ErrNotAllowed that says why. An interrupt that names neither approvers nor
// approver groups may be decided by anyone who can reach it, anonymous
// callers included; otherwise only a named approver or a member of a named
// group may decide.
func Decide(in subjects.Interrupt, p Principal) error {
	if len(in.Approvers) == 0 && len(in.ApproverGroups) == 0 {
		return nil
	}
	if p.Name == "" {
		return fmt.Errorf("%w: interrupt %s names its approvers; publish on the resume subject "+
			"with your identity (resume.<run>.<approver>), where NATS permissions vouch for it", ErrNotAllowed, in.ID)
	}
	if slices.Contains(in.Approvers, p.Name) {
		return nil
	}
	for _, g := range p.Groups {
		if slices.Contains(in.ApproverGroups, g) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not decide interrupt %s", ErrNotAllowed, p.Name, in.ID)
}

// MayStart reports whether p may start runs of agent.
func MayStart(agent string, p Principal) bool {
	return slices.Contains(p.Agents, agent) || slices.Contains(p.Agents, "*")
}

// MayDecide reports whether Decide allows p to decide in.
func MayDecide(in subjects.Interrupt, p Principal) bool { return Decide(in, p) == nil }

// MayRead reports whether p may see in: an auditor sees every interrupt,
// anyone else the interrupts they may decide.
func MayRead(in subjects.Interrupt, p Principal) bool { return p.Auditor || MayDecide(in, p) }

// MayReadRun reports whether p may see run rec, its record and its audit
// trail: an auditor sees every run, anyone else the runs with an interrupt
// (of any pass) they may decide. A run that never asked anything is the
// auditors' alone.
func MayReadRun(rec *subjects.Run, p Principal) bool {
	if p.Auditor {
		return true
	}
	for _, in := range rec.Interrupts {
		if MayDecide(in.Interrupt, p) {
			return true
		}
	}
	return false
}

// Redact returns rec as every reader sees it: the decisions of sensitive
// interrupts keep their status, approver and time, and lose their payload,
// comment and metadata (marked AnswerWithheld). Auditors see the same: the
// answer to a sensitive question is shown to nobody, only that it was given.
func Redact(rec *subjects.Run) *subjects.Run {
	cp := *rec
	cp.Interrupts = slices.Clone(rec.Interrupts)
	for i := range cp.Interrupts {
		st := &cp.Interrupts[i]
		if st.Decision == nil || !st.IsSensitive() {
			continue
		}
		d := *st.Decision
		d.Payload, d.Comment, d.Metadata = nil, "", nil
		st.Decision, st.AnswerWithheld = &d, true
	}
	return &cp
}
