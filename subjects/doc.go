// Package subjects owns Interlock's wire protocol v1: the NATS subject names
// every process uses, the validation of subject tokens that come from user
// data, and the JSON messages that travel on those subjects.
//
// It imports only the standard library, so a notifier, a gateway or a test in
// any process can build and parse Interlock traffic without a NATS dependency.
//
// # Subjects
//
// Every subject starts with a configurable prefix (default "interlock"):
//
//	<prefix>.work.<agent>                 work items for an agent's workers
//	<prefix>.suspended.<agent>.<run>      a pass stopped on interrupts (the notifier feed)
//	<prefix>.completed.<agent>.<run>      a pass finished the run
//	<prefix>.failed.<agent>.<run>         a pass failed the run
//	<prefix>.resume.<run>[.<approver>]    decisions (the resume subject)
//	<prefix>.events.<run>.<type>          lifecycle and audit trail
//	<prefix>.dlq.<source>                 dead letters, with the reason they failed
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
