// Package subjects owns Interlock's wire protocol v1: the NATS subject names
// every process uses, the validation of subject tokens that come from user
// data, and the JSON messages that travel on those subjects.
//
// It imports only the standard library, so a notifier, a gateway or a test in
// any process can build and parse Interlock traffic without a NATS dependency.
//
// # Subjects
//
// Every subject starts with a configurable prefix (default "interlock"); the
// token after it is the subject's [Kind]:
//
//	<prefix>.work.<agent>                   replays: work items carrying decisions (coordinator only)
//	<prefix>.start.<agent>                  first passes: the work item that starts a run
//	<prefix>.suspended.<agent>.<run>        a pass stopped on interrupts (the notifier feed)
//	<prefix>.completed.<agent>.<run>        a pass finished the run
//	<prefix>.failed.<agent>.<run>           a pass failed the run
//	<prefix>.resume.<run>[.<approver>]      decisions (the resume subject)
//	<prefix>.events.<run>.<type>            lifecycle and audit trail (coordinator only)
//	<prefix>.observed.<run>.<type>          what the notifier and the gateway observe, for the audit trail
//	<prefix>.dlq.<source>                   dead letters, with the reason they failed
//	<prefix>.timers.at.<run>.<timer>        durable timers, scheduled; they fire onto
//	<prefix>.timers.due.<run>               due timers, for the coordinator
//	<prefix>.reminder.<agent>.<run>         notices for notifiers about interrupts still
//	<prefix>.escalated.<agent>.<run>        waiting: reminded, escalated, expired
//	<prefix>.expired.<agent>.<run>
//	<prefix>.agui.<agent>.<run>             AG-UI events a pass emits, for the AG-UI bridge
//	<prefix>.links.mint                     the link service (core NATS request/reply, stored nowhere)
//	<prefix>.chat.post                      the chat card service (core NATS request/reply, stored nowhere)
//
// Workers of every SDK share one durable consumer per agent,
// [WorkerDurable] (worker_<agent>), filtering [Namespace.AgentWork] (the
// agent's work and start subjects); [Namespace.Backlog] matches every
// agent's waiting work. Verdicts of decisions go to the decider's inbox,
// under [InboxPrefix].
//
// A [Namespace] builds and parses them. Agent names and run ids become subject
// tokens, so they are validated by [ValidateToken]; ids that are not tokens
// (interrupt, decision, thread and approver ids) travel in message bodies.
//
// # Messages
//
// Every message is one JSON object carrying "version": 1. The decoders
// ([DecodeDecision], [DecodeSuspension], ...) are the only way outside input
// enters the system: they enforce size limits, reject unknown fields and
// return errors that wrap [ErrMalformed], [ErrTooLarge] or
// [ErrUnsupportedVersion], and a [*ProtocolError] that carries the rejection
// [Code] a sender sees.
package subjects
