// Package processor is Interlock's Go SDK: what an agent body uses
// (Interrupt, IsResuming, Step, Emit), the Worker that runs passes, and the
// Client that starts runs, decides interrupts and reads runs. It holds
// aliases of the everyday wire types of package subjects (Decision, Run,
// Event, Verdict, their statuses), so one import suffices. The coordinator
// that keeps run records is a service of its own (processor/coordinator);
// nothing of it is in this package.
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
// coordinator (`interlock serve`, or processor/coordinator embedded) is the
// only writer of run records and writes them with compare-and-set; every
// step is idempotent, so a crash anywhere converges on redelivery.
// docs/architecture.md follows a decision through the packages.
//
// # Running passes
//
// A Worker holds at most its concurrency plus one work item per agent and
// keeps every item it holds alive with heartbeats. Before a pass it checks,
// on every delivery, that the pass has not already reported (a check bounded
// by the client's request timeout, not by the pass's). Each pass has a
// timeout (WithPassTimeout, default DefaultPassTimeout): at the timeout the
// body's context is cancelled with cause ErrPassTimeout; a body that then
// returns an error, or does not return within half the consumer's ack wait,
// is retried after the consumer's backoff, and on the last attempt the run
// fails with ErrPassTimeout. Stop(ctx) waits for the passes under way while ctx lasts,
// then cancels them (cause ErrWorkerStopped); StopAndCancel cancels at once.
// A pass cut short by a stop publishes nothing and is run again elsewhere.
// A body runs twice only if its worker loses the work item after the body
// ran and before its outcome was stored; side effects outside Interlock
// should carry an idempotency key built from RunOf(ctx) (run and pass), the
// tool call and the step.
//
// # Errors
//
// ErrSuspended, ErrCancelled, ErrNotInRun, ErrToolCallMismatch and
// ErrInvalidRequest are what the SDK returns inside a body (and
// ErrPassTimeout and ErrWorkerStopped the causes of its context's end);
// ErrRejected (with a *RejectionError carrying the verdict) and
// ErrRunNotFound are what the Client returns.
package processor
