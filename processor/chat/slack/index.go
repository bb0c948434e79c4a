package slack

// MessagesKey is the key, in the notifier's deliveries bucket, under which
// the Slack messages of one interrupt are listed (a JSON array of Posted):
// the notifier adds each message it posts, and the gateway reads them to
// make the messages follow the interrupt once it is decided.
func MessagesKey(run, interrupt string) string { return "slackmsgs." + run + "." + interrupt }

// IntentKey is the key of one post's intent and record: sink posting
// interrupt for the notification key.
func IntentKey(notification, interrupt string) string {
	return "slack." + notification + "." + interrupt
}

// EventType is the message metadata event type of Interlock's posts; its
// payload carries the intent key, so a notifier that crashed between
// posting and recording finds its post in the channel's history.
const EventType = "interlock_interrupt"
