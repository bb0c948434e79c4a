package subjects

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
