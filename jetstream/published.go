package jetstream

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/subjects"
)

// serverHeaders are the headers nats-server adds to a direct get's answer
// (a batch's too): a message that carries one was sent by the server.
var serverHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp",
	"Nats-Num-Pending", "Nats-Last-Sequence"}

// CheckPublished returns nil when h are the headers of a client's publish,
// and otherwise an error with code not_allowed saying why. nats-server
// sends a JetStream API answer to whatever reply subject the request
// names, with its own rights, so a user allowed one read (a direct get of
// a message it stored) could have a body of its choosing stored on a
// subject it may not publish, a decision in another's name among them
// (docs/security.md, "Answers the server sends for you"). A direct get's
// answer carries the server's headers, or, asked for without them, no
// header at all; a client's publish of an Interlock input always carries
// its Nats-Msg-Id (docs/protocol.md, "Headers and deduplication").
func CheckPublished(h Header) error {
	if err := checkNotAnswer(h, "a client's publish"); err != nil {
		return err
	}
	if h.Get(HeaderMsgID) == "" {
		return subjects.Refusal(subjects.CodeNotAllowed,
			"not a client's publish: it carries no %s (every client's input does; an answer the server sent to this subject may not)", HeaderMsgID)
	}
	return nil
}

// CheckWritten returns nil when h are the headers of a client's write of
// a bucket entry, and otherwise an error with code not_allowed saying why:
// CheckPublished's, or, for an entry written before writes carried a
// message id, a KV create or update's compare-and-set header or a delete
// marker's KV-Operation, which an answer the server stores under a key
// never carries without the headers it adds (an answer asked for without
// headers has none, a status answer only its status). A plain KV put
// carries none of these, so one written before cannot be told from an
// answer and is refused too.
func CheckWritten(h Header) error {
	if err := checkNotAnswer(h, "a client's write"); err != nil {
		return err
	}
	if h.Get(HeaderMsgID) == "" && h.Get(jetstream.ExpectedLastSubjSeqHeader) == "" && h.Get(kvOperation) == "" {
		return subjects.Refusal(subjects.CodeNotAllowed,
			"not a client's write: it carries no %s, compare-and-set or KV operation header (an answer the server sent to this key may not)",
			HeaderMsgID)
	}
	return nil
}

// HeaderScheduler names the schedule a message the server's scheduler
// stored was fired from. A client may set it only beside a schedule's
// purge, which no due timer is.
const HeaderScheduler = "Nats-Scheduler"

// CheckFired returns nil when h are the headers of a message the server's
// scheduler fired (a due timer), and otherwise an error with code
// not_allowed saying why. Fired messages carry no message id (the
// scheduler strips it), so CheckPublished cannot tell them from a direct
// get's answer sent to the timer's subject; the scheduler's own header
// can, since an answer either carries the server's headers or none.
func CheckFired(h Header) error {
	if err := checkNotAnswer(h, "a timer the scheduler fired"); err != nil {
		return err
	}
	if h.Get(HeaderScheduler) == "" {
		return subjects.Refusal(subjects.CodeNotAllowed,
			"not a timer the scheduler fired: it carries no %s (an answer the server sent to this subject may not)", HeaderScheduler)
	}
	return nil
}

// checkNotAnswer refuses headers carrying one the server adds to a direct
// get's answer, saying the message is not what.
func checkNotAnswer(h Header, what string) error {
	for k := range h {
		for _, s := range serverHeaders {
			if strings.EqualFold(k, s) {
				return subjects.Refusal(subjects.CodeNotAllowed,
					"not %s: it carries %s, which nats-server adds to a JetStream API answer it sent to this subject", what, s)
			}
		}
	}
	return nil
}
