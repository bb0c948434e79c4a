package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	chatslack "github.com/interlockhq/interlock/processor/chat/slack"
)

// slackAPI is the Slack sink on the Web API (a bot token, chat.postMessage):
// one Block Kit message per interrupt, with Approve / Deny buttons (and
// "Answer…" for a responseSchema) that the gateway's interactivity endpoint
// handles, unless the sink or the interrupt turns chat decisions off.
// Reminders, escalations and expiries are posted in the message's thread.
//
// chat.postMessage has no idempotency key, so each post is recorded as an
// intent in the deliveries bucket before it is made, and as posted after:
// a notifier that died in between finds the intent, looks for its post in
// the channel's history (by the message metadata it carries) and records
// it instead of posting again. A reply in the thread (reminder, escalation,
// expiry) is not in the channel's history: its intent names the thread, and
// the reply is looked for there (conversations.replies).
type slackAPI struct {
	client  *chatslack.Client
	channel string
	buttons bool
	marks   *jetstream.Bucket
	crash   func(point string) bool
}

// intent is what the deliveries bucket holds under a post's intent key.
type intent struct {
	// State is "posting" until the post is confirmed, then "posted".
	State   string    `json:"state"`
	At      time.Time `json:"at"`
	Channel string    `json:"channel"`
	TS      string    `json:"ts,omitempty"`
	// Thread is the ts of the message a reply is posted under; empty for
	// a message of its own.
	Thread string `json:"thread,omitempty"`
}

// attach gives the sink the deliveries bucket and the fault hook, at Start.
func (s *slackAPI) attach(marks *jetstream.Bucket, crash func(string) bool) {
	s.marks, s.crash = marks, crash
}

// errCrashed: a test's fault hook abandoned the delivery.
var errCrashed = errors.New("abandoned by fault injection")

func (s *slackAPI) Deliver(ctx context.Context, n *Notification) error {
	if s.marks == nil {
		return &permanent{errors.New("slack sink not started")}
	}
	for _, d := range n.Decide {
		if err := s.deliverOne(ctx, n, d); err != nil {
			return err
		}
	}
	return nil
}

func (s *slackAPI) deliverOne(ctx context.Context, n *Notification, d Decide) error {
	key := chatslack.IntentKey(n.Key, d.ID)
	var thread string
	var msg chatslack.Message
	card := chatslack.CardOf(n.Suspension.Agent, n.Suspension.RunID, d.Interrupt, d.InboxURL)
	card.Buttons = card.Buttons && s.buttons
	if n.Kind == KindNew {
		msg = card.Message()
	} else {
		// A notice goes in the thread of the interrupt's message, if it has one.
		first, err := s.record(ctx, chatslack.IntentKey(deliveryKey(n.Sink, &n.Suspension, KindNew, ""), d.ID))
		if err != nil {
			return err
		}
		if first != nil && first.State == "posted" {
			thread = first.TS
			if n.Kind == KindExpired {
				card.Decided = &chatslack.Decided{Status: "Expired", At: time.Now()}
				if err := s.client.Update(ctx, first.Channel, first.TS, card.Message()); err != nil {
					return s.classify(err)
				}
			}
		}
		msg = chatslack.Message{Text: n.Headline, Blocks: []chatslack.Block{{"type": "section",
			"text": chatslack.Block{"type": "mrkdwn", "text": chatslack.Escape(n.Headline)}}}}
		if thread == "" {
			msg = card.Message()
			msg.Blocks = append([]chatslack.Block{msg.Blocks[0], {"type": "context", "elements": []chatslack.Block{
				{"type": "mrkdwn", "text": chatslack.Escape(n.Headline)}}}}, msg.Blocks[1:]...)
		}
	}
	rec, rev, err := s.entry(ctx, key)
	if err != nil {
		return err
	}
	switch {
	case rec != nil && rec.State == "posted":
		return nil
	case rec != nil:
		// An earlier attempt recorded its intent and did not record the
		// post: it may have posted. Look before posting again.
		found, err := s.find(ctx, key, rec)
		if err != nil {
			return err
		}
		if found != "" {
			return s.posted(ctx, key, d.ID, n, found, rev)
		}
		if rec.Thread != thread {
			// The question's message was posted since: the intent names
			// the thread this post goes to, so a retry looks there.
			data, _ := json.Marshal(intent{State: "posting", At: rec.At, Channel: rec.Channel, Thread: thread})
			if rev, err = s.marks.Update(ctx, key, data, rev); err != nil {
				return fmt.Errorf("slack post %s: %w", key, err)
			}
		}
	default:
		data, _ := json.Marshal(intent{State: "posting", At: time.Now().UTC(), Channel: s.channel, Thread: thread})
		if rev, err = s.marks.Update(ctx, key, data, 0); err != nil {
			// Another notifier took it: this delivery is its to finish.
			return fmt.Errorf("slack post %s: %w", key, err)
		}
	}
	posted, err := s.client.PostMessage(ctx, s.channel, thread, msg, &chatslack.MessageMetadata{EventType: chatslack.EventType,
		EventPayload: map[string]string{"key": key, "run": n.Suspension.RunID, "interrupt": d.ID}})
	if err != nil {
		return s.classify(err)
	}
	if s.crash != nil && s.crash("slack-after-post") {
		return errCrashed
	}
	return s.posted(ctx, key, d.ID, n, posted.TS, rev)
}

// posted records the post at ts under key, and, for a new interrupt's
// message, lists it for the gateway (chatslack.MessagesKey).
func (s *slackAPI) posted(ctx context.Context, key, interrupt string, n *Notification, ts string, rev uint64) error {
	data, _ := json.Marshal(intent{State: "posted", At: time.Now().UTC(), Channel: s.channel, TS: ts})
	if _, err := s.marks.Update(ctx, key, data, rev); err != nil {
		return fmt.Errorf("slack post %s recorded: %w", key, err)
	}
	if n.Kind != KindNew {
		return nil
	}
	list := chatslack.MessagesKey(n.Suspension.RunID, interrupt)
	for range 10 {
		raw, rev, err := s.marks.Entry(ctx, list)
		if err != nil && !errors.Is(err, jetstream.ErrNotFound) {
			return err
		}
		var msgs []chatslack.Posted
		_ = json.Unmarshal(raw, &msgs)
		p := chatslack.Posted{Channel: s.channel, TS: ts}
		if slices.Contains(msgs, p) {
			return nil
		}
		out, _ := json.Marshal(append(msgs, p))
		if _, err := s.marks.Update(ctx, list, out, rev); !errors.Is(err, jetstream.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("slack message list %s: %w", list, jetstream.ErrConflict)
}

func (s *slackAPI) entry(ctx context.Context, key string) (*intent, uint64, error) {
	raw, rev, err := s.marks.Entry(ctx, key)
	if errors.Is(err, jetstream.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var in intent
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, 0, fmt.Errorf("slack intent %s: %w", key, err)
	}
	return &in, rev, nil
}

func (s *slackAPI) record(ctx context.Context, key string) (*intent, error) {
	in, _, err := s.entry(ctx, key)
	return in, err
}

// find looks in the channel's history (in the thread's replies, for a
// reply), from a minute before the intent, for the post carrying key; it
// returns its ts, or "".
func (s *slackAPI) find(ctx context.Context, key string, in *intent) (string, error) {
	oldest := strconv.FormatInt(in.At.Add(-time.Minute).Unix(), 10)
	var msgs []chatslack.HistoryMessage
	var err error
	if in.Thread != "" {
		msgs, err = s.client.Replies(ctx, in.Channel, in.Thread, oldest)
	} else {
		msgs, err = s.client.History(ctx, in.Channel, oldest)
	}
	if err != nil {
		return "", s.classify(err)
	}
	for _, m := range msgs {
		if m.Metadata != nil && m.Metadata.EventType == chatslack.EventType && m.Metadata.EventPayload["key"] == key {
			return m.TS, nil
		}
	}
	return "", nil
}

// classify makes Slack's refusals permanent (a bad token, an unknown
// channel) and its busy answers retries after their Retry-After.
func (s *slackAPI) classify(err error) error {
	var ae *chatslack.APIError
	if !errors.As(err, &ae) {
		return err
	}
	if ae.RetryAfter > 0 {
		return &busy{after: ae.RetryAfter, err: err}
	}
	if ae.Temporary() {
		return err
	}
	return &permanent{err}
}
