package processor

import (
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// The everyday wire types, so that an agent or a client needs no other
// import; they are the types of package subjects, which documents them.
type (
	// Decision is the answer to one interrupt.
	Decision = subjects.Decision
	// Status is a decision's status: StatusResolved or StatusCancelled.
	Status = subjects.Status
	// Run is a run record.
	Run = subjects.Run
	// RunStatus is where a run is: suspended, resuming, completed, failed.
	RunStatus = subjects.RunStatus
	// InterruptState is an interrupt of a run with its decision, if any.
	InterruptState = subjects.InterruptState
	// PendingInterrupt is an interrupt waiting for a decision, with its run.
	PendingInterrupt = subjects.PendingInterrupt
	// Event is a lifecycle or audit event of a run.
	Event = subjects.Event
	// EventType names an event.
	EventType = subjects.EventType
	// Verdict is the coordinator's answer to a decision.
	Verdict = subjects.Verdict
	// Outcome is a verdict's outcome.
	Outcome = subjects.Outcome
	// Code is the stable reason a decision or an input was refused.
	Code = subjects.Code
	// ExpiryAction is what happens to an interrupt at its deadline.
	ExpiryAction = subjects.ExpiryAction
	// AgentWork is the work waiting for one agent.
	AgentWork = store.AgentWork
)

// Decision statuses.
const (
	StatusResolved  = subjects.StatusResolved
	StatusCancelled = subjects.StatusCancelled
)

// Run statuses.
const (
	RunSuspended = subjects.RunSuspended
	RunResuming  = subjects.RunResuming
	RunCompleted = subjects.RunCompleted
	RunFailed    = subjects.RunFailed
)

// Verdict outcomes.
const (
	OutcomeAccepted  = subjects.OutcomeAccepted
	OutcomeRejected  = subjects.OutcomeRejected
	OutcomeDuplicate = subjects.OutcomeDuplicate
)

// Interrupt reasons.
const (
	ReasonToolCall      = subjects.ReasonToolCall
	ReasonInputRequired = subjects.ReasonInputRequired
	ReasonConfirmation  = subjects.ReasonConfirmation
)

// Expiry actions.
const (
	ExpiryCancel   = subjects.ExpiryCancel
	ExpiryResolve  = subjects.ExpiryResolve
	ExpiryEscalate = subjects.ExpiryEscalate
)

// InterruptID is the id of the ordinal-th interrupt (from 0) raised within
// tool call toolCallID ("" outside any tool call) of run.
func InterruptID(run, toolCallID string, ordinal int) string {
	return subjects.InterruptID(run, toolCallID, ordinal)
}
