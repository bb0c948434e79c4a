// Package notifier is Interlock's notifier service: it tells people, once,
// that an agent is blocked and how to decide. It reads the suspension feed
// and the coordinator's notices (reminder, escalated, expired) with one
// durable consumer per sink, routes each interrupt by expr expressions,
// renders it for the sink's channel (webhook, Slack, e-mail, log, NATS) and
// records each delivery once, with retries, Retry-After and dead letters.
// Slack cards with buttons are the gateway's to draw and post: that sink
// only asks it (subjects.ChatPost) and holds no Slack token.
//
// Config is the notifier's configuration file (LoadConfig reads and checks it);
// Options are how this process runs it: its logger, metrics registry,
// replacement sinks and in-flight bound. docs/notifiers.md describes the
// file, the kinds and the delivery guarantees.
package notifier
