// Package slack is Interlock's Slack adapter, shared by the notifier's
// Slack sink (which posts messages) and the gateway's interactivity endpoint
// (which receives clicks and form submissions): the request signature
// (Verify, Sign), the interaction payloads Slack posts (Interaction), the
// few Web API methods used (Client) and the Block Kit messages and modals
// built for an interrupt (Card, Modal).
//
// It knows Slack and nothing of who may decide: the gateway maps a Slack
// user to an approver identity and asks package authz. Another chat
// (Microsoft Teams, Discord) is another package beside this one, with the
// same three jobs (verify, parse, render); see docs/architecture.md.
package slack
