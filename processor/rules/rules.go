// Package rules is Interlock's decision and record-transition rules as pure
// functions: given a run record and one input (a pass outcome, a decision, a
// due timer) they return the next record, or why the input is refused. They
// do no I/O and read no clock: the time comes in as an argument, so every
// rule is tested without a server and fuzzed.
//
// The coordinator (processor/coordinator) is their only caller that writes:
// it loads a record, applies a rule, stores the result with compare-and-set
// and publishes the effects the new record implies.
package rules

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// Set is the configuration the rules apply: what an interrupt without a
// policy of its own gets, how answers are checked, who is in which group.
type Set struct {
	// Expiry holds the defaults for deadlines, reminders and escalation.
	Expiry ExpiryDefaults
	// Schemas compiles and checks responseSchemas; nil: a cache shared by
	// every Set without one.
	Schemas *schema.Cache
	// Groups maps an approver identity to its groups, for interrupts that
	// name approver groups.
	Groups func(identity string) []string
	// Members lists a group's members, for counting who can vote on an
	// interrupt with a policy; nil: groups have no members to count (as
	// with Groups nil, nobody is in them).
	Members func(group string) []string
	// ExecutionKey derives an approved call's execution key from the run,
	// the interrupt and the approved digest, with a secret; nil: no keys.
	ExecutionKey func(run, interrupt, digest string) string
	// Operator applies the operator's rules to an interrupt a run raises
	// (processor/policy); nil: there are none.
	Operator func(rec *subjects.Run, in subjects.Interrupt) Ruling
}

// sharedSchemas is the cache of every Set that names none.
var sharedSchemas schema.Cache

func (s *Set) schemas() *schema.Cache {
	if s.Schemas == nil {
		return &sharedSchemas
	}
	return s.Schemas
}

// Rejection is an input refused by a rule: a stable code and a detail for
// people that never contains an answer.
type Rejection struct {
	Code   subjects.Code
	Detail string
}

func (r *Rejection) Error() string { return string(r.Code) + ": " + r.Detail }

// Reject builds a Rejection; it is the one place rejections are made.
func Reject(code subjects.Code, format string, args ...any) *Rejection {
	return &Rejection{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Find returns the index of interrupt id in rec, or -1.
func Find(rec *subjects.Run, id string) int {
	for i := range rec.Interrupts {
		if rec.Interrupts[i].ID == id {
			return i
		}
	}
	return -1
}

// clone returns a copy of rec that can be changed without changing rec:
// its interrupts and history are copied, everything else is replaced, not
// modified, by the rules.
func clone(rec *subjects.Run) *subjects.Run {
	cp := *rec
	cp.Interrupts = slices.Clone(rec.Interrupts)
	for i := range cp.Interrupts {
		cp.Interrupts[i].Votes = slices.Clone(cp.Interrupts[i].Votes)
		cp.Interrupts[i].VoteSeqs = maps.Clone(cp.Interrupts[i].VoteSeqs)
	}
	cp.RuleFailures = slices.Clone(rec.RuleFailures)
	return &cp
}

// utc is t in UTC, as records store it.
func utc(t time.Time) time.Time { return t.UTC() }
