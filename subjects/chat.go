package subjects

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Codes of the gateway's refusals of chat interactions (a Slack click or
// form), audited as access_refused.
const (
	// CodeChatSignature: the request's signature is missing or does not
	// match its body (not signed with the app's signing secret).
	CodeChatSignature Code = "chat_signature"
	// CodeChatStale: the request's timestamp is outside the five-minute
	// window.
	CodeChatStale Code = "chat_stale"
	// CodeChatReplayed: the same signed request came again inside its
	// window; it was handled once.
	CodeChatReplayed Code = "chat_replayed"
	// CodeChatWorkspace: the request comes from a workspace (team or
	// enterprise) other than the one the gateway is pinned to.
	CodeChatWorkspace Code = "chat_workspace"
	// CodeChatUnknownUser: the chat user maps to no identity.
	CodeChatUnknownUser Code = "chat_unknown_user"
	// CodeChatOff: the interrupt forbids chat decisions
	// (chatDecisions: false).
	CodeChatOff Code = "chat_off"
)

// KindChat carries the chat card service: a notifier asks the gateway, on
// <prefix>.chat.post (core NATS request/reply, stored nowhere), to post
// one interrupt's Slack message through one sink. The gateway alone holds
// the bot token: it draws the message from the stored run record, never
// from the notifier's words, into the channel its own configuration maps
// the sink to. Only the notifier user may ask and only the gateway user
// may answer (deploy/nats/auth.conf).
const KindChat Kind = "chat"

// ChatPost is the subject of the chat card service's requests.
func (n Namespace) ChatPost() string { return n.join(KindChat, "post") }

// Codes of the chat card service and of chat clicks (besides
// unknown_run, unknown_interrupt, malformed, unsupported_version and
// unavailable).
const (
	// CodeChatNotRouted: the sink is not one the gateway posts cards for
	// (its configuration maps each Slack sink to a channel).
	CodeChatNotRouted Code = "chat_not_routed"
	// CodeChatPostFailed: Slack refused the post for good (an unknown
	// channel, a revoked token); trying again changes nothing.
	CodeChatPostFailed Code = "chat_post_failed"
	// CodeChatForged: a click or a form names an interrupt with a value
	// the gateway did not sign, or comes from a message that is not a
	// card the gateway posted for that interrupt.
	CodeChatForged Code = "chat_forged"
)

// Kinds of chat post, the notification's kind: the question's card, or a
// notice in its thread.
const (
	ChatNew       = "new"
	ChatReminder  = "reminder"
	ChatEscalated = "escalated"
	ChatExpired   = "expired"
)

// ChatPostRequest asks the chat card service to post the message of one
// interrupt for one sink: its card (kind new), or a notice in the card's
// thread (reminder, escalated, expired). It carries no text: the gateway
// draws every message from the stored record.
type ChatPostRequest struct {
	Version     int    `json:"version"`
	RunID       string `json:"runId"`
	InterruptID string `json:"interruptId"`
	// Sink is the notifier's sink; the gateway, not the notifier, knows
	// which channel it posts to.
	Sink string `json:"sink"`
	Kind string `json:"kind"`
	// Key names this post (the notifier's delivery key): the same key,
	// with the same run, interrupt, sink and kind, is posted once.
	Key string `json:"key"`
	// NoButtons asks for a card without buttons (the sink's buttons:
	// false); a card never has more buttons than the interrupt allows.
	NoButtons bool `json:"noButtons,omitempty"`
}

// ChatPostReply is the chat card service's answer: where the message is,
// or why there is none.
type ChatPostReply struct {
	Version int    `json:"version"`
	Channel string `json:"channel,omitempty"`
	TS      string `json:"ts,omitempty"`
	// Code and Detail say why nothing was posted.
	Code   Code   `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// MaxChatKey bounds a chat post's key.
const MaxChatKey = 512

// DecodeChatPostRequest decodes and checks a chat post request: known
// fields only, this version, run and sink valid tokens, the interrupt a
// valid id, a known kind and a key.
func DecodeChatPostRequest(data []byte) (ChatPostRequest, error) {
	var r ChatPostRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, malformed("chat post request: %v", err)
	}
	if r.Version != Version {
		return r, &ProtocolError{Code: CodeUnsupportedVersion, err: ErrUnsupportedVersion,
			Detail: fmt.Sprintf("chat post request version %d; this build speaks %d", r.Version, Version)}
	}
	for _, f := range []struct{ what, v string }{{"run id", r.RunID}, {"sink", r.Sink}} {
		if err := ValidateToken(f.what, f.v); err != nil {
			return r, malformedBy(err)
		}
	}
	if err := validateID("interruptId", r.InterruptID); err != nil {
		return r, err
	}
	switch r.Kind {
	case ChatNew, ChatReminder, ChatEscalated, ChatExpired:
	default:
		return r, malformed("chat post request: kind %q is not new, reminder, escalated or expired", r.Kind)
	}
	if r.Key == "" || len(r.Key) > MaxChatKey {
		return r, malformed("chat post request: key must be 1 to %d bytes, not %d", MaxChatKey, len(r.Key))
	}
	return r, nil
}
