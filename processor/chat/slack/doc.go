// Package slack is Interlock's Slack adapter, used by the gateway, which
// alone holds the bot token: it posts the cards (for the notifier's Slack
// sinks, which ask it) and receives their clicks and form submissions.
// Here are the request signature (Verify, Sign), the interaction payloads
// Slack posts (Interaction), the few Web API methods used (Client), the
// Block Kit messages and modals built for an interrupt (Card, Modal) and
// the seal on what a card carries (Seal: each button's value signed for
// its run, interrupt, action and channel), and Socket Mode (Socket: the
// same interactions received over WebSocket connections opened with an
// app-level token, for a gateway Slack cannot reach).
//
// It knows Slack and nothing of who may decide: the gateway maps a Slack
// user to an approver identity and asks package authz. Another chat
// (Microsoft Teams, Discord) is another package beside this one, with the
// same three jobs (verify, parse, render); see docs/architecture.md.
package slack
