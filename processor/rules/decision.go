package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

// Noop is CheckDecision's answer for a decision accepted without any
// change: the cancel of an interrupt that already expired.
// Tell it with IsNoop, not by comparing pointers.
var Noop = &Rejection{Code: codeNoop, Detail: "the interrupt had already expired and was closed; nothing changed"}

// codeNoop is Noop's code; no rejection on the wire has it.
const codeNoop subjects.Code = "noop"

// IsNoop reports whether r is CheckDecision's no-op answer (Noop): the
// decision is accepted and changes nothing.
func (r *Rejection) IsNoop() bool { return r != nil && r.Code == codeNoop }

// CheckDecision applies the decision rules to d, sent by p (an empty name:
// an anonymous decision) at now. It returns the interrupt's index, or why
// the decision is refused. An interrupt already decided with the same
// decision id by the same identity is not refused: that is a duplicate, and
// rec.Interrupts[i].Decision is set.
func (s *Set) CheckDecision(rec *subjects.Run, d subjects.Decision, p authz.Principal, now time.Time) (int, *Rejection) {
	if rec == nil {
		return -1, Reject(subjects.CodeUnknownRun, "no run with this id")
	}
	i := Find(rec, d.InterruptID)
	if i < 0 {
		return -1, Reject(subjects.CodeUnknownInterrupt, "run %s has no interrupt %s", rec.RunID, d.InterruptID)
	}
	st := rec.Interrupts[i]
	// A duplicate only from whoever made the decision: reusing another
	// identity's decision id (or vote id) is refused, and so recorded.
	for _, other := range accepted(st) {
		if other.DecisionID == d.DecisionID && other.Approver != d.Approver {
			return -1, Reject(subjects.CodeNotAllowed, "decision id %s is another identity's decision on interrupt %s; "+
				"send your own decision with a fresh id", d.DecisionID, st.ID)
		}
	}
	// Authorized before anything else is said about the interrupt: even the
	// no-op cancel of an expired one is accepted only from who may decide it.
	if err := authz.Decide(st.Interrupt, p); err != nil {
		return -1, Reject(subjects.CodeNotAllowed, "%v", err)
	}
	// A decision id names one decision: the same identity sending it again
	// with another answer, or for another interrupt, is refused, as a
	// payment API refuses an idempotency key reused with other parameters.
	for j, in := range rec.Interrupts {
		for _, other := range accepted(in) {
			if other.DecisionID != d.DecisionID || other.Approver != d.Approver {
				continue
			}
			if j != i {
				return -1, Reject(subjects.CodeDecisionIDReused, "decision id %s already decided interrupt %s; "+
					"send a fresh id for interrupt %s", d.DecisionID, in.ID, st.ID)
			}
			if !SameDecision(other, d) {
				return -1, Reject(subjects.CodeDecisionIDReused, "decision id %s was accepted on interrupt %s with "+
					"another body (status, payload, metadata, comment or arguments); the first decision stands", d.DecisionID, st.ID)
			}
		}
	}
	if _, dup := Holds(rec, i, d); dup {
		return i, nil
	}
	if st.Decision != nil {
		if st.Decision.Approver == subjects.ExpiryApprover {
			// After expiry a resolve is refused and a cancel accepted (it
			// changes nothing: the interrupt is closed).
			if d.Status == subjects.StatusResolved {
				return -1, Reject(subjects.CodeExpired, "interrupt %s expired at %s and was %s; it can still be cancelled",
					st.ID, st.ExpiresAt.Format(time.RFC3339), st.Decision.Status)
			}
			return i, Noop
		}
		return -1, Reject(subjects.CodeAlreadyDecided, "interrupt %s was %s by decision %s",
			st.ID, st.Decision.Status, st.Decision.DecisionID)
	}
	if rec.Status != subjects.RunSuspended || st.Pass != rec.Pass {
		return -1, Reject(subjects.CodeAlreadyDecided, "run %s is %s; interrupt %s no longer waits", rec.RunID, rec.Status, st.ID)
	}
	if st.ExpiresAt != nil && !now.Before(*st.ExpiresAt) && d.Status == subjects.StatusResolved {
		return -1, Reject(subjects.CodeExpired, "interrupt %s expired at %s; it can still be cancelled",
			st.ID, st.ExpiresAt.Format(time.RFC3339))
	}
	// The error names the rule and where it failed, never the value.
	if err := s.schemas().CheckAnswer(st.Interrupt, d.Status, d.Payload); errors.Is(err, schema.ErrBudget) {
		return -1, Reject(subjects.CodeSchemaBudget, "%v", err)
	} else if err != nil {
		return -1, Reject(subjects.CodeSchemaMismatch, "%v", err)
	}
	if rej := s.checkVote(rec, st, d, p); rej != nil {
		return -1, rej
	}
	return i, nil
}

// accepted lists what st holds as accepted decisions: its open votes, or
// its decision and the votes it carries, each as a decision.
func accepted(st subjects.InterruptState) []subjects.Decision {
	var out []subjects.Decision
	votes := st.Votes
	if st.Decision != nil {
		out = append(out, *st.Decision)
		votes = st.Decision.Votes
	}
	for _, v := range votes {
		out = append(out, subjects.Decision{DecisionID: v.DecisionID, InterruptID: st.ID, Status: v.Status,
			Payload: v.Payload, Metadata: v.Metadata, Approver: v.Approver, Comment: v.Comment, Arguments: v.Arguments})
	}
	return out
}

// SameDecision reports whether a and b say the same: status, comment, and
// payload and metadata as JSON values (key order and spacing aside).
func SameDecision(a, b subjects.Decision) bool {
	return a.InterruptID == b.InterruptID && a.Status == b.Status && a.Comment == b.Comment &&
		sameJSON(a.Payload, b.Payload) && sameJSON(a.Metadata, b.Metadata) && sameJSON(a.Arguments, b.Arguments)
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, ea := decodeJSON(a)
	vb, eb := decodeJSON(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

func decodeJSON(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// Principal is identity with the groups it belongs to.
func (s *Set) Principal(identity string) authz.Principal {
	p := authz.Principal{Name: identity}
	if s.Groups != nil && identity != "" {
		p.Groups = s.Groups(identity)
	}
	return p
}

// ApplyDecision returns rec with decision d (checked by CheckDecision)
// recorded on interrupt i at now; seq is the decision's stream sequence
// (zero for a decision the coordinator made, such as an expiry). When it
// was the last decision the pass waited for, the run is resuming.
func ApplyDecision(rec *subjects.Run, i int, d subjects.Decision, seq uint64, now time.Time) *subjects.Run {
	now = utc(now)
	cp := clone(rec)
	st := &cp.Interrupts[i]
	if len(st.Votes) > 0 && len(d.Votes) == 0 {
		// The votes so far go with whatever closes the interrupt (an
		// expiry too): the replay receives every vote.
		d.Votes = st.Votes
	}
	st.Votes = nil
	d = *subjects.Versioned(&d)
	st.Decision, st.DecidedAt, st.DecisionSeq = &d, &now, seq
	st.Order = decisionCount(rec) + 1
	if len(cp.Pending()) == 0 {
		cp.Status = subjects.RunResuming
	}
	cp.UpdatedAt = now
	return cp
}

// CompletesPass reports whether st's decision was the last one its pass
// waited for.
func CompletesPass(rec *subjects.Run, st subjects.InterruptState) bool {
	for _, in := range rec.Interrupts {
		if in.Pass == st.Pass && (in.Decision == nil || in.Order > st.Order) {
			return false
		}
	}
	return true
}

func decisionCount(rec *subjects.Run) int {
	n := 0
	for _, in := range rec.Interrupts {
		if in.Decision != nil {
			n++
		}
	}
	return n
}

// Replay is the work item of rec's next pass, carrying every decision and
// journaled step so far. It is due only while ReplayDue says so.
func Replay(rec *subjects.Run) subjects.Work {
	w := subjects.Work{PassRef: subjects.PassRef{Version: subjects.Version, RunID: rec.RunID, Agent: rec.Agent,
		ThreadID: rec.ThreadID, Pass: rec.Pass + 1, Input: rec.Input}, Journal: rec.Journal}
	for _, in := range rec.Interrupts {
		if in.Decision != nil {
			w.Decisions = append(w.Decisions, *in.Decision)
		}
	}
	return *subjects.Versioned(&w)
}

// ReplayDue reports whether the replay that st's decision started is still
// to be scheduled: the run resumes from st's pass and its replay has not
// reported back.
func ReplayDue(rec *subjects.Run, st subjects.InterruptState) bool {
	return CompletesPass(rec, st) && rec.Status == subjects.RunResuming && rec.Pass == st.Pass
}

// ExpiryDecision is the decision an expiry timer applies to st at deadline
// under policy p: a cancel, or a resolve with the payload the agent chose.
// Silence is never approval: nothing else is ever resolved.
func ExpiryDecision(st subjects.InterruptState, timer string, deadline time.Time, p subjects.ExpiryPolicy) subjects.Decision {
	d := subjects.Decision{Version: subjects.Version, DecisionID: ExpiryDecisionID(timer), InterruptID: st.ID,
		Status: subjects.StatusCancelled, Approver: subjects.ExpiryApprover, Metadata: json.RawMessage(`{"reason":"expired"}`),
		Comment: "nobody decided by " + deadline.Format(time.RFC3339)}
	if p.Action == subjects.ExpiryResolve {
		d.Status, d.Payload = subjects.StatusResolved, p.Payload
		d.Comment += "; resolved with the agent's default"
	}
	return d
}

// ExpiryDecisionID is the decision id of the expiry applied by timer.
func ExpiryDecisionID(timer string) string { return "expiry-" + timer }
