package subjects

import "strings"

// AnonymousInbox is the inbox identity of anonymous decisions (published on
// <prefix>.resume.<run>, with no approver token).
const AnonymousInbox = "anonymous"

// InboxPrefix is the inbox prefix of a NATS user or approver identity:
// "_INBOX.<identity>" ("_INBOX.anonymous" for ""). Each user connects with
// its own prefix (nats.go's custom inbox prefix) and may subscribe only
// under it, so nobody reads another's replies. The coordinator sends the
// verdict of a decision published as identity only under this prefix.
func InboxPrefix(identity string) string {
	if identity == "" {
		identity = AnonymousInbox
	}
	return "_INBOX." + identity
}

// ReplyAllowed reports whether the verdict of a decision published as
// identity ("" for anonymous) may be sent to replyTo: a literal subject
// (no wildcards, no empty tokens, no whitespace) under InboxPrefix(identity).
func ReplyAllowed(identity, replyTo string) bool {
	return literalUnder(InboxPrefix(identity), replyTo)
}

// IsInbox reports whether a service may answer a request on subject: a
// literal subject under "_INBOX", whoever's. NATS does not check a
// request's reply subject against its publisher's permissions, so a reply
// elsewhere (a stream's subject, a KV key) would be published with the
// service's rights, where the requester chose.
func IsInbox(subject string) bool {
	return literalUnder("_INBOX", subject)
}

// literalUnder reports whether subject is prefix followed by one or more
// tokens, with no wildcards, empty tokens or whitespace.
func literalUnder(prefix, subject string) bool {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return false
	}
	for _, t := range strings.Split(rest, ".") {
		if t == "" || t == "*" || t == ">" || strings.ContainsAny(t, " \t\r\n") {
			return false
		}
	}
	return true
}
