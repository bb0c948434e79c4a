// Package processor is the run lifecycle of Interlock: the Go SDK an agent
// body uses (Interrupt, IsResuming, Step), the Worker that runs passes, the
// Coordinator that keeps run records and applies the decision rules, and the
// Client that starts runs and decides interrupts.
//
// # The replay model
//
// A run is a sequence of passes of the agent's body. The first pass runs
// until the body calls Interrupt: Interrupt records the request and returns
// an error matching ErrSuspended, the body returns it, and the worker
// publishes one suspension with every interrupt the pass raised. Nothing of
// the run stays in memory. When every interrupt is decided, the coordinator
// queues a replay: the body runs again from the top, and this time Interrupt
// returns the decision without reading its request. IsResuming is the
// predicate Interrupt uses to choose. Step journals results so that work
// before an interrupt (such as telling a person) happens once per run.
//
// Interrupts are tracked per tool call (WithToolCall) and, within one, by the
// order they are raised; their ids are derived from the run, the tool call
// and that ordinal (InterruptID), so a replay finds its decisions.
//
// # Roles
//
// Workers, coordinators and clients talk only through JetStream, so they can
// live in one process (as in `interlock demo`) or many, in any number. The
// coordinator is the only writer of run records and writes them with
// compare-and-set; every step is idempotent, so a crash anywhere converges on
// redelivery.
//
// # Errors
//
// ErrSuspended, ErrCancelled, ErrNotInRun, ErrToolCallMismatch and
// ErrInvalidRequest are what the SDK returns inside a body; ErrRejected (with
// a *RejectionError carrying the verdict) and ErrRunNotFound are what the
// Client returns.
package processor
