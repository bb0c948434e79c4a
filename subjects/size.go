package subjects

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrRecordTooLarge means a run record would not fit the NATS server's max
// payload: a suspension whose record could not take the largest decision
// allowed for each of its interrupts, or a write (a decision, an expiry, an
// outcome) the record cannot take. Errors of this kind carry
// CodeRecordTooLarge.
var ErrRecordTooLarge = errors.New("run record too large")

// RecordTooLarge is an error matching ErrRecordTooLarge, with
// CodeRecordTooLarge and detail.
func RecordTooLarge(format string, args ...any) error {
	return &ProtocolError{Code: CodeRecordTooLarge, Detail: fmt.Sprintf(format, args...), err: ErrRecordTooLarge}
}

// The allowances RecordBound adds to a record's encoded size. They are
// upper bounds of what the coordinator writes, not estimates.
const (
	// RecordMargin is kept free in every record for what any write adds
	// besides decisions and timers: the status, the error, the rule
	// failures, the KV message's headers.
	RecordMargin = 8 << 10
	// DecisionOverhead is what recording one decision adds besides the
	// decision itself: its time, sequence and order, the approver's
	// identity.
	DecisionOverhead = 2 << 10
	// TimerOverhead is what one reminder or one escalation adds besides the
	// approvers it names: the timer's name and counts.
	TimerOverhead = 1 << 10
)

// DecisionAllowance is the most that deciding in can add to its run's
// record: the largest decision allowed (MaxDecisionSize as recorded, or
// the expiry's own resolve payload if larger) with its overhead, plus what
// the deadlines of policy p add before it is decided: reminders reminders
// per deadline, and for escalate one more deadline and p.Approvers per
// escalation (p.Times of them).
func DecisionAllowance(in Interrupt, p ExpiryPolicy, reminders int) int {
	decision := MaxDecisionSize
	if p.Action == ExpiryResolve && len(p.Payload)+DecisionOverhead > decision {
		decision = len(p.Payload) + DecisionOverhead
	}
	n := decision + DecisionOverhead
	if in.Policy != nil {
		// Votes: up to approvals + denials - 1 open ones, then the one
		// that decides, kept both as a vote and as the final decision.
		n += (in.Policy.NeedApprovals() + in.Policy.NeedDenials()) * (MaxDecisionSize + DecisionOverhead)
	}
	deadlines := 1
	if p.Action == ExpiryEscalate {
		added := 0
		for _, a := range p.Approvers {
			added += len(a) + 3 // quoted, comma
		}
		times := max(p.Times, 1)
		deadlines += times
		n += times * (TimerOverhead + added)
	}
	return n + deadlines*(reminders+1)*TimerOverhead
}

// RecordBound is the most run record rec can grow to: its encoded size,
// plus RecordMargin, plus allowance(in) for every interrupt not yet decided.
// A suspension is refused when the bound of the record it makes is over the
// server's max payload, for that record could not take every decision its
// approvers are allowed to send. allowance is DecisionAllowance with the
// expiry policy in force.
func RecordBound(rec *Run, allowance func(in Interrupt) int) int {
	data, _ := json.Marshal(rec)
	n := len(data) + RecordMargin
	for _, st := range rec.Interrupts {
		if st.Decision == nil {
			n += allowance(st.Interrupt)
		}
	}
	return n
}

// RecordCopyRoom is what the event carrying a run record's sealed copy
// keeps for its own fields (a verdict, a detail, its headers), and
// SealOverhead what sealing adds to the record's JSON before base64 (a
// version byte, a 12-byte nonce and a 16-byte tag).
const (
	RecordCopyRoom = 16 << 10
	SealOverhead   = 1 + 12 + 16
)

// RecordLimit is the largest run record a coordinator writes on a server
// whose max payload is maxPayload: one whose sealed copy (a third larger,
// as base64) fits, with RecordCopyRoom, the event that carries it.
func RecordLimit(maxPayload int64) int64 {
	return max(0, (maxPayload-RecordCopyRoom)*3/4-SealOverhead)
}

// SuspensionBound is what an agent can tell of the record its suspension s
// of work item w makes, before publishing it: the work item (input,
// journal and the decisions of earlier passes), the suspension and, for
// each interrupt, its DecisionAllowance under its own expiry policy, plus
// RecordMargin. The coordinator's RecordBound, on the record itself, is
// the one that holds; an agent whose suspension is over this bound knows it
// would be refused.
func SuspensionBound(w Work, s Suspension) int {
	work, _ := json.Marshal(w)
	susp, _ := json.Marshal(s)
	n := len(work) + len(susp) + RecordMargin
	for _, in := range s.Interrupts {
		var p ExpiryPolicy
		if in.OnExpiry != nil {
			p = *in.OnExpiry
		}
		n += DecisionAllowance(in, p, len(in.RemindBeforeSeconds))
	}
	return n
}
