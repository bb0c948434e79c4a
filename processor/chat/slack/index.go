package slack

// EventType is the message metadata event type of Interlock's posts; its
// payload carries the post's intent key, so a gateway that crashed
// between posting and recording finds its post in the channel's history.
const EventType = "interlock_interrupt"
