package rules

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/subjects"
)

// Outcome is a decoded pass outcome of any kind.
type Outcome struct {
	subjects.PassRef
	// Kind is subjects.KindSuspended, KindCompleted or KindFailed.
	Kind       subjects.Kind
	Journal    subjects.Journal
	Suspension *subjects.Suspension
	Result     json.RawMessage
	Failure    string
}

// DecodeOutcome decodes the body of an outcome of kind (the subject's kind
// token).
func DecodeOutcome(kind subjects.Kind, data []byte) (Outcome, error) {
	switch kind {
	case subjects.KindSuspended:
		s, err := subjects.DecodeSuspension(data)
		return Outcome{PassRef: s.PassRef, Kind: kind, Journal: s.Journal, Suspension: &s}, err
	case subjects.KindCompleted:
		c, err := subjects.DecodeCompletion(data)
		return Outcome{PassRef: c.PassRef, Kind: kind, Journal: c.Journal, Result: c.Result}, err
	case subjects.KindFailed:
		f, err := subjects.DecodeFailure(data)
		return Outcome{PassRef: f.PassRef, Kind: kind, Failure: f.Error}, err
	}
	return Outcome{}, fmt.Errorf("%w: %s is not a pass outcome", subjects.ErrInvalidSubject, kind)
}

// StaleError is the answer to an outcome of a pass the record does not
// expect: a redelivery, or a pass that ran twice.
type StaleError struct{ Expected int }

func (e *StaleError) Error() string { return fmt.Sprintf("expected pass %d", e.Expected) }

// Arrival is how an input reached the coordinator: its stream sequence and
// the trace context it carried.
type Arrival struct {
	Seq         uint64
	TraceParent string
}

// ApplyOutcome returns rec (nil: no record yet) with outcome o recorded at
// now. An outcome the record has moved past is a *StaleError; an invalid one
// (a first pass that is not pass 0, an interrupt raised twice, an unsafe
// schema) is an error for the input to be refused with.
func (s *Set) ApplyOutcome(rec *subjects.Run, o Outcome, a Arrival, now time.Time) (*subjects.Run, error) {
	now = utc(now)
	if rec == nil {
		if o.Pass != 0 {
			return nil, fmt.Errorf("%w: pass %d of run %s, which has no record (a first pass is pass 0)",
				subjects.ErrMalformed, o.Pass, o.RunID)
		}
		rec = &subjects.Run{Version: subjects.Version, RunID: o.RunID, Agent: o.Agent, ThreadID: o.ThreadID,
			Input: o.Input, CreatedAt: now, Pass: -1, Interrupts: []subjects.InterruptState{}}
		if o.Suspension != nil {
			// Recorded once, from the run's first suspension (the worker
			// copies the start subject's token): never changed later.
			rec.Requester = o.Suspension.Requester
		}
	} else {
		// The subject's agent token is what NATS permissions vouch for (o.Agent
		// was checked against it): another agent's outcome changes nothing.
		if o.Agent != rec.Agent {
			return nil, subjects.WrongAgent(o.RunID, o.Agent, rec.Agent)
		}
		if rec.Status != subjects.RunResuming || o.Pass != rec.Pass+1 {
			return nil, &StaleError{Expected: ExpectedPass(rec)}
		}
		rec = clone(rec)
	}
	rec.Pass = o.Pass
	if trace.Valid(a.TraceParent) {
		rec.TraceParent = a.TraceParent
	}
	if len(o.Journal) > 0 {
		j := make(subjects.Journal, len(rec.Journal)+len(o.Journal))
		for k, v := range rec.Journal {
			j[k] = v
		}
		for k, v := range o.Journal {
			j[k] = v
		}
		rec.Journal = j
	}
	rulings := map[string]Ruling{}
	switch o.Kind {
	case subjects.KindSuspended:
		for _, in := range o.Suspension.Interrupts {
			if s.Operator != nil {
				r := s.Operator(rec, in)
				in = s.stricter(in, r.Require)
				for _, f := range r.Failed {
					rec.RuleFailures = append(rec.RuleFailures, subjects.RuleFailure{InterruptID: in.ID, Pass: o.Pass, Detail: f})
				}
				if r.Approve != "" || r.Deny != "" {
					rulings[in.ID] = r
				}
			}
			if len(in.ResponseSchema) > 0 {
				if err := s.schemas().Compile(in.ResponseSchema); err != nil {
					return nil, fmt.Errorf("interrupt %s: %w", in.ID, err)
				}
			}
			if i := Find(rec, in.ID); i >= 0 {
				return nil, fmt.Errorf("%w: interrupt %s was already raised in pass %d; a replay returns its decision instead",
					subjects.ErrMalformed, in.ID, rec.Interrupts[i].Pass)
			}
			if err := s.checkSatisfiable(in, rec.Requester); err != nil {
				return nil, err
			}
			if in.ExpiresAt == nil && s.Expiry.Timeout > 0 {
				deadline := now.Add(s.Expiry.Timeout)
				in.ExpiresAt = &deadline
			}
			rec.Interrupts = append(rec.Interrupts, subjects.InterruptState{Interrupt: in, Pass: o.Pass})
		}
		rec.Status = subjects.RunSuspended
		rec.SuspensionSeq = a.Seq
	case subjects.KindCompleted:
		rec.Status, rec.Result = subjects.RunCompleted, o.Result
	case subjects.KindFailed:
		rec.Status, rec.Error = subjects.RunFailed, o.Failure
	default:
		return nil, fmt.Errorf("%w: %s is not a pass outcome", subjects.ErrInvalidSubject, o.Kind)
	}
	rec.UpdatedAt = now
	if len(rulings) > 0 {
		rec = s.settle(rec, rulings, now)
	}
	return subjects.Versioned(rec), nil
}

// ExpectedPass is the pass whose outcome rec waits for (or last recorded).
func ExpectedPass(rec *subjects.Run) int {
	if rec.Status == subjects.RunResuming {
		return rec.Pass + 1
	}
	return rec.Pass
}

// Recorded reports whether rec already holds outcome o: every interrupt of
// a suspension raised in its pass, or the same terminal outcome.
func Recorded(rec *subjects.Run, o Outcome) bool {
	switch o.Kind {
	case subjects.KindSuspended:
		for _, in := range o.Suspension.Interrupts {
			if i := Find(rec, in.ID); i < 0 || rec.Interrupts[i].Pass != o.Pass {
				return false
			}
		}
		return true
	default:
		return rec.Status.Terminal() && rec.Pass == o.Pass && o.Kind == statusKind(rec.Status)
	}
}

func statusKind(s subjects.RunStatus) subjects.Kind {
	if s == subjects.RunCompleted {
		return subjects.KindCompleted
	}
	return subjects.KindFailed
}
