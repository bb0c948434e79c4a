// Package jetstream is Interlock's only door to NATS: it provisions the
// streams, consumers and KV bucket, publishes with deduplication, runs
// consumer loops with explicit acks and dead-lettering, and translates every
// nats.go error into this package's sentinels, so the rest of Interlock never
// sees a nats.go type.
//
// # Streams
//
// For prefix "interlock" (stream names take the prefix upper-cased):
//
//	INTERLOCK_WORK       interlock.work.>       work queue of passes to run
//	INTERLOCK_RUNS       interlock.suspended.>  pass outcomes: suspensions,
//	                     interlock.completed.>  completions and failures
//	                     interlock.failed.>
//	INTERLOCK_DECISIONS  interlock.resume.>     decisions
//	INTERLOCK_EVENTS     interlock.events.>     lifecycle and audit trail
//	INTERLOCK_DLQ        interlock.dlq.>        dead letters
//
// and the KV bucket interlock_runs holds the run records.
//
// # Consumer loops
//
// [Client.Consume] runs a [Handler] per message. A nil error acks; an error
// naks with a backoff delay; [RetryAfter] naks with a chosen delay; after
// MaxDeliver attempts, or at once for [DeadLetter], the message is copied to
// the dead-letter stream with the reason and terminated. Panics are recovered
// into a retry. A handler that runs long is kept alive with InProgress.
package jetstream
