package processor

import (
	"errors"
	"fmt"

	"github.com/interlockhq/interlock/subjects"
)

var (
	// ErrNotInRun means Interrupt, Step or RunOf was called with a context
	// that does not belong to a pass of a run.
	ErrNotInRun = errors.New("not inside an Interlock run")
	// ErrSuspended is matched by the error Interrupt returns on the suspend
	// pass. Return it (or an error wrapping it) from the agent body.
	ErrSuspended = errors.New("run suspended on an interrupt")
	// ErrCancelled is matched by the error Interrupt returns when the
	// interrupt's decision is "cancelled": a denial, or an expiry.
	ErrCancelled = errors.New("interrupt cancelled")
	// ErrToolCallMismatch means a Request names a tool call other than the
	// one its context is scoped to with WithToolCall.
	ErrToolCallMismatch = errors.New("request tool call differs from the context's")
	// ErrInvalidRequest means an interrupt request cannot be published.
	ErrInvalidRequest = errors.New("invalid interrupt request")
	// ErrRejected is matched by the error Decide returns when the
	// coordinator rejected the decision.
	ErrRejected = errors.New("decision rejected")
	// ErrRunNotFound means no run record exists for the run id.
	ErrRunNotFound = errors.New("run not found")
	// ErrRunExists means Start was given the id of a run that already
	// exists: a run is started once.
	ErrRunExists = errors.New("run already exists")
	// ErrPassTimeout is the cause of a body's context cancelled at its
	// agent's pass timeout, and what a run that timed out on every attempt
	// fails with.
	ErrPassTimeout = errors.New("pass timed out")
	// ErrWorkerStopped is the cause of a body's context cancelled because
	// its worker stops.
	ErrWorkerStopped = errors.New("worker stopped")
	// ErrSuspensionTooLarge ends a pass whose suspension the worker refused
	// to publish: its run record, with the largest decision allowed for
	// each interrupt, would not fit the server's max payload (see
	// subjects.RecordBound). The run fails with this reason instead of
	// suspending on a question whose answer could not be recorded.
	ErrSuspensionTooLarge = errors.New("suspension too large")
	// ErrInvalidOption means an option was given a value it cannot take.
	ErrInvalidOption = errors.New("invalid option")
	// ErrCallMismatch is matched by the error Interrupt (on the replay)
	// and CheckCall return when the call about to run is not the call its
	// approvers approved (its digest differs from the decision's
	// callDigest): run nothing. This check inside the agent stops
	// mistakes, not a hostile agent; only an executor outside the agent
	// enforces an approval.
	ErrCallMismatch = errors.New("call differs from the approved call")
)

// CallMismatchError is the refusal to run a call other than the approved
// one; it matches ErrCallMismatch.
type CallMismatchError struct {
	InterruptID string
	// Approved is the digest the decision approved; Got the digest of the
	// call about to run.
	Approved, Got string
}

func (e *CallMismatchError) Error() string {
	return fmt.Sprintf("interrupt %s: %v: approved digest %s, the call about to run has digest %s",
		e.InterruptID, ErrCallMismatch, e.Approved, e.Got)
}

// Is makes errors.Is(err, ErrCallMismatch) true.
func (e *CallMismatchError) Is(target error) bool { return target == ErrCallMismatch }

// SuspendError is returned by Interrupt on the suspend pass.
type SuspendError struct {
	InterruptID string
}

func (e *SuspendError) Error() string { return "suspended on interrupt " + e.InterruptID }

// Is makes errors.Is(err, ErrSuspended) true.
func (e *SuspendError) Is(target error) bool { return target == ErrSuspended }

// CancelledError is returned by Interrupt, with the decision, when the
// interrupt was cancelled. Silence and denial never look like approval.
type CancelledError struct {
	InterruptID string
	// Comment is the approver's comment, if any.
	Comment string
	// Approver is who cancelled, when known.
	Approver string
	// Reason is CancelDenied (a person cancelled) or CancelExpired (nobody
	// decided by the deadline: the coordinator's expiry cancelled). It comes
	// from who cancelled, never from the decision's metadata.
	Reason string
}

// The reasons of a CancelledError.
const (
	// CancelDenied: an approver cancelled the interrupt.
	CancelDenied = "denied"
	// CancelExpired: the coordinator's expiry (approver
	// subjects.ExpiryApprover) cancelled the interrupt.
	CancelExpired = "expired"
)

func (e *CancelledError) Error() string {
	s := "interrupt " + e.InterruptID + " cancelled"
	if e.Reason == CancelExpired {
		s = "interrupt " + e.InterruptID + " expired"
	}
	if e.Approver != "" {
		s += " by " + e.Approver
	}
	if e.Comment != "" {
		s += ": " + e.Comment
	}
	return s
}

// Is makes errors.Is(err, ErrCancelled) true.
func (e *CancelledError) Is(target error) bool { return target == ErrCancelled }

// RejectionError is returned by Decide when the coordinator rejected a
// decision; Verdict.Code says why.
type RejectionError struct {
	Verdict subjects.Verdict
}

func (e *RejectionError) Error() string {
	return fmt.Sprintf("decision rejected: %s: %s", e.Verdict.Code, e.Verdict.Detail)
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectionError) Is(target error) bool { return target == ErrRejected }

type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks an agent body's error as transient: the pass is run again
// later instead of failing the run.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err: err}
}
