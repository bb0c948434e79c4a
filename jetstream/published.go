package jetstream

import (
	"strings"

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
	for k := range h {
		for _, s := range serverHeaders {
			if strings.EqualFold(k, s) {
				return subjects.Refusal(subjects.CodeNotAllowed,
					"not a client's publish: it carries %s, which nats-server adds to a JetStream API answer it sent to this subject", s)
			}
		}
	}
	if h.Get(HeaderMsgID) == "" {
		return subjects.Refusal(subjects.CodeNotAllowed,
			"not a client's publish: it carries no %s (every client's input does; an answer the server sent to this subject may not)", HeaderMsgID)
	}
	return nil
}
