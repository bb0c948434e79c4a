// Package jetstream is Interlock's only door to NATS: it provisions the
// streams, consumers and KV buckets, publishes with deduplication, runs
// consumer loops with explicit acks and dead-lettering, and translates every
// nats.go error into this package's sentinels, so the rest of Interlock never
// sees a nats.go type.
//
// # Streams
//
// For prefix "interlock" (stream names take the prefix upper-cased; see
// [Streams]):
//
//	INTERLOCK_WORK       interlock.work.>       work queue of passes to run: replays
//	                     interlock.start.>      and first passes (worker_<agent> consumers)
//	INTERLOCK_RUNS       interlock.suspended.>  pass outcomes: suspensions,
//	                     interlock.completed.>  completions and failures,
//	                     interlock.failed.>
//	                     interlock.reminder.>   and notices for notifiers
//	                     interlock.escalated.>
//	                     interlock.expired.>
//	INTERLOCK_DECISIONS  interlock.resume.>     decisions
//	INTERLOCK_EVENTS     interlock.events.>     lifecycle and audit trail
//	INTERLOCK_DLQ        interlock.dlq.>        dead letters
//	INTERLOCK_TIMERS     interlock.timers.>     durable timers (work queue, message schedules)
//	INTERLOCK_AGUI       interlock.agui.>       AG-UI events passes emit, for the bridge
//	INTERLOCK_OBSERVED   interlock.observed.>   observations waiting for the coordinator (work queue)
//
// # Buckets
//
// Key-value buckets take the prefix with dots as underscores. [Client.Provision]
// creates the core ones:
//
//	interlock_runs      run records ([RunsBucket]), written with compare-and-set
//	interlock_pending   interrupts waiting for a decision ([PendingBucket])
//	interlock_keys      the deployment's message-id key ([KeysBucket])
//
// and each role provisions its own with [Client.Bucket]: interlock_deliveries
// (notifier), interlock_links and interlock_sessions (gateway),
// interlock_threads (AG-UI bridge) and interlock_mcp_calls (MCP proxy).
//
// # Files
//
// One file per concept: conn.go (dialing, options, close and drain,
// retrying while the server is unavailable), topology.go (streams,
// buckets, provisioning, convergence and drift checks), bucket.go (key-value
// access), publish.go (Publish, PublishAll, OutMsg, headers, requests),
// subscribe.go (core NATS subscriptions and services), consume.go (durable
// consumer loops), reads.go (stored reads and batches: LastMsg, DirectLast,
// Messages, Batch, counts), keys.go (the message-id key) and errors.go (the
// sentinels nats.go errors become).
//
// # Consumer loops
//
// [Client.Consume] runs a [Handler] per message. A nil error acks; an error
// naks with a backoff delay; [RetryAfter] naks with a chosen delay; after
// MaxDeliver attempts, or at once for [DeadLetter], the message is copied to
// the dead-letter stream with the reason and terminated. Panics are recovered
// into a retry. A handler that runs long is kept alive with InProgress.
package jetstream
