package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/subjects"
)

// The chat card service: the notifier asks the gateway (subjects.ChatPost)
// to post an interrupt's Slack message through one of its sinks, and the
// gateway, the only holder of the bot token, draws the message from the
// stored run record into the channel its own configuration maps the sink
// to (SlackConfig.Channels), signs each button (slack.Seal) and records
// the card it posted. A click counts only on such a card.
//
// chat.postMessage has no idempotency key, so each post is recorded as an
// intent in the gateway's links bucket before it is made, and as posted
// after; the post carries the intent's key in its message metadata. A
// request for a key already posted is answered from the record; one that
// finds a post under way (another gateway's, inside its lease) is answered
// unavailable, to be asked again; one that finds an intent whose lease
// ran out (its gateway died between posting and recording) looks for the
// post in the channel's history (for a reply, the thread's) and records
// it instead of posting again.

// postLease is how long an intent belongs to the gateway that made it:
// longer than one post takes (the Web API client's timeout).
const postLease = 20 * time.Second

// postIntent is what the links bucket holds under a post's intent key.
type postIntent struct {
	// State is "posting" until the post is confirmed, then "posted".
	State string `json:"state"`
	// Since is when the first attempt began: the history is searched from
	// a minute before. Until ends the lease of the attempt under way.
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	Channel string    `json:"channel"`
	TS      string    `json:"ts,omitempty"`
	// Thread is the ts of the card a reply is posted under.
	Thread string `json:"thread,omitempty"`
	// Buttons: a new card's sink shows buttons (postedCard.Buttons), as
	// the request that made the intent said.
	Buttons bool `json:"buttons,omitempty"`
}

// slackCardsKey is the key, in the links bucket, of the cards (channel and
// ts) the gateway posted for an interrupt: the messages whose clicks count
// and which follow the interrupt once it is decided. Only the gateway
// writes that bucket.
func slackCardsKey(run, interrupt string) string {
	sum := sha256.Sum256([]byte(run + "\x00" + interrupt))
	return "slackcards-" + hex.EncodeToString(sum[:16])
}

// postedCard is one card listed under slackCardsKey: its message, and
// whether its sink lets it show buttons (the question may still not: one
// that may not be decided from chat is drawn without, and a click on it
// is refused chat_off). A card whose sink does not (`buttons: false`) is
// redrawn without them, and a click on it decides nothing (chat_forged).
// A card listed before the field existed reads as one whose sink does not.
type postedCard struct {
	slack.Posted
	Buttons bool `json:"buttons,omitempty"`
}

// slackPostKey is the intent key of one request: its sink, kind, key, run
// and interrupt; for a new card, its run, interrupt and channel only, so
// that one card is posted per interrupt and channel however many ask at
// once (two sinks mapped to one channel, or one asking under two keys).
func slackPostKey(r subjects.ChatPostRequest, channel string) string {
	parts := []string{r.Sink, r.Kind, r.Key, r.RunID, r.InterruptID}
	if r.Kind == subjects.ChatNew {
		parts = []string{"card", channel, r.RunID, r.InterruptID}
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return "slackpost-" + hex.EncodeToString(sum[:16])
}

// serveChat answers the chat card service's requests until Stop or Close.
func (g *Gateway) serveChat() error {
	stop, err := g.serve("chat card service", g.nc.Namespace().ChatPost(), func(ctx context.Context, data []byte) any {
		reply := g.chatPost(ctx, data)
		reply.Version = subjects.Version
		return reply
	})
	g.stopChat = stop
	return err
}

// chatPost posts the message a notifier asks for, drawn from the stored
// record, into the channel the gateway maps the sink to. Refusals that
// name something the gateway will not do (a sink it posts nothing for, a
// bad request) are audited as access_refused; a run or interrupt not
// recorded yet is answered unavailable.
func (g *Gateway) chatPost(ctx context.Context, data []byte) subjects.ChatPostReply {
	req, err := subjects.DecodeChatPostRequest(data)
	if err != nil {
		return g.chatRefused(ctx, req, subjects.CodeOf(err), err.Error())
	}
	channel, ok := g.cfg.Slack.Channels[req.Sink]
	if !ok {
		return g.chatRefused(ctx, req, subjects.CodeChatNotRouted,
			fmt.Sprintf("sink %s is not one the gateway posts Slack cards for (--slack-channel)", req.Sink))
	}
	// Only the notifier may ask (auth.conf), and only about suspensions it
	// read from the stream the coordinator records: a run or interrupt not
	// in the record is one not recorded yet (the coordinator is restarting
	// or behind), so the answer is unavailable, to be asked again, never a
	// refusal that would drop the card.
	rec, i, err := g.interruptOf(ctx, req.RunID, req.InterruptID)
	switch {
	case errors.Is(err, processor.ErrRunNotFound):
		return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: "the run is not recorded yet"}
	case err != nil:
		return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: err.Error()}
	case i < 0:
		return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: "the interrupt is not recorded yet"}
	}
	st := rec.Interrupts[i]
	cards, _, err := g.slackCards(ctx, req.RunID, req.InterruptID)
	if err != nil {
		return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: err.Error()}
	}
	var thread string
	if j := slices.IndexFunc(cards, func(p postedCard) bool { return p.Channel == channel }); j >= 0 {
		if req.Kind == subjects.ChatNew {
			// One card per interrupt and channel: the notifier chooses the
			// keys, and each card posted is listed and followed for good.
			return subjects.ChatPostReply{Channel: cards[j].Channel, TS: cards[j].TS}
		}
		thread = cards[j].TS
	}
	card := g.drawCard(rec, st, channel)
	card.Buttons = card.Buttons && !req.NoButtons
	msg := card.Message()
	if req.Kind != subjects.ChatNew {
		note := noticeText(req.Kind, st)
		if thread != "" {
			msg = slack.Message{Text: note, Blocks: []slack.Block{{"type": "section",
				"text": slack.Block{"type": "mrkdwn", "text": note}}}}
		} else {
			// No card to reply under: the notice comes as the card.
			msg.Blocks = append([]slack.Block{msg.Blocks[0], {"type": "context", "elements": []slack.Block{
				{"type": "mrkdwn", "text": note}}}}, msg.Blocks[1:]...)
		}
	}
	p, err := g.slackPost(ctx, req, channel, thread, msg)
	if err != nil {
		return slackPostFailed(err)
	}
	if thread == "" {
		if err := g.addSlackCard(ctx, req.RunID, req.InterruptID, p); err != nil {
			return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: err.Error()}
		}
	} else if req.Kind == subjects.ChatExpired && st.Decision != nil {
		// The card follows at once (the gateway_slack follower would too).
		if err := g.slackAPI().Update(ctx, channel, thread, g.slackCard(rec, st).Message()); err != nil {
			g.cfg.Logger.Warn("slack card not updated", "run", req.RunID, "error", err)
		}
	}
	return subjects.ChatPostReply{Channel: p.Channel, TS: p.TS}
}

// drawCard is the card of st in rec as the gateway posts it into channel:
// its buttons signed for that channel, a link to the inbox when the
// gateway knows its URL.
func (g *Gateway) drawCard(rec *subjects.Run, st subjects.InterruptState, channel string) slack.Card {
	c := g.slackCard(rec, st)
	ref := slack.Ref{Run: rec.RunID, Interrupt: st.ID}
	c.Sign = func(action string) string { return g.seal.Value(ref, action, channel) }
	if base := strings.TrimRight(g.cfg.Slack.InboxURL, "/"); base != "" && c.Decided == nil {
		c.InboxURL = base + "/inbox#" + rec.RunID + "/" + st.ID
	}
	return c
}

// noticeText is a notice in a card's thread, in the gateway's words.
func noticeText(kind string, st subjects.InterruptState) string {
	deadline := ""
	if st.ExpiresAt != nil {
		deadline = " Deadline: " + slack.Date(*st.ExpiresAt) + "."
	}
	switch kind {
	case subjects.ChatReminder:
		return "*Reminder:* this request still waits for a decision." + deadline
	case subjects.ChatEscalated:
		return "*Escalated:* who may decide is now " + slack.Escape(authz.WhoMayDecide(st.Interrupt)) + "." + deadline
	}
	if st.Decision != nil {
		return "*" + slack.Escape(slack.StatusWord(st.Interrupt, *st.Decision)) + ":* nothing to decide any more."
	}
	return "*Expired:* nothing to decide any more."
}

// slackPost posts msg once per request key (see the intent above), and
// returns the post with whether its sink shows buttons (as the request
// that made the intent said: for a new card another request may have).
func (g *Gateway) slackPost(ctx context.Context, req subjects.ChatPostRequest, channel, thread string, msg slack.Message) (postedCard, error) {
	key := slackPostKey(req, channel)
	now := time.Now().UTC()
	in, rev, err := g.postIntentOf(ctx, key)
	if err != nil {
		return postedCard{}, err
	}
	switch {
	case in != nil && in.State == "posted":
		return postedCard{Posted: slack.Posted{Channel: in.Channel, TS: in.TS}, Buttons: in.Buttons}, nil
	case in != nil && now.Before(in.Until):
		return postedCard{}, fmt.Errorf("%w: a post of this request is under way", errPostBusy)
	case in != nil:
		// An earlier attempt recorded its intent and not its post: it may
		// have posted. Look before posting again.
		ts, err := g.findPost(ctx, key, in)
		if err != nil {
			return postedCard{}, err
		}
		if ts != "" {
			return g.postRecorded(ctx, key, *in, ts, rev)
		}
		// Not posted: this request's message goes, drawn as it asks.
		in.Until, in.Thread, in.Buttons = now.Add(time.Duration(g.lease.Load())), thread, !req.NoButtons
		if rev, err = g.putIntent(ctx, key, *in, rev); err != nil {
			return postedCard{}, err
		}
	default:
		in = &postIntent{State: "posting", Since: now, Until: now.Add(time.Duration(g.lease.Load())), Channel: channel, Thread: thread,
			Buttons: !req.NoButtons}
		if rev, err = g.putIntent(ctx, key, *in, 0); err != nil {
			return postedCard{}, err
		}
	}
	p, err := g.slackAPI().PostMessage(ctx, in.Channel, thread, msg, &slack.MessageMetadata{EventType: slack.EventType,
		EventPayload: map[string]string{"key": key, "run": req.RunID, "interrupt": req.InterruptID}})
	var ae *slack.APIError
	if errors.As(err, &ae) {
		// Slack answered: nothing was posted. The next attempt need not
		// wait out the lease.
		in.Until = time.Time{}
		_, _ = g.putIntent(ctx, key, *in, rev)
	}
	if err != nil {
		return postedCard{}, err
	}
	if crash := g.crash.Load(); crash != nil && (*crash)("slack-after-post") {
		return postedCard{}, fmt.Errorf("%w: abandoned by fault injection", errPostBusy)
	}
	return g.postRecorded(ctx, key, *in, p.TS, rev)
}

// errPostBusy: the post is another attempt's for now; ask again.
var errPostBusy = errors.New("slack post under way")

func (g *Gateway) postIntentOf(ctx context.Context, key string) (*postIntent, uint64, error) {
	raw, rev, err := g.usedLinks.Entry(ctx, key)
	if errors.Is(err, jetstream.ErrNotFound) {
		// None, or an answer the server stored there for another user
		// (jetstream.ErrForeign), which the first write replaces.
		return nil, rev, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var in postIntent
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, 0, fmt.Errorf("slack post intent %s: %w", key, err)
	}
	return &in, rev, nil
}

func (g *Gateway) putIntent(ctx context.Context, key string, in postIntent, rev uint64) (uint64, error) {
	data, _ := json.Marshal(in)
	rev, err := g.usedLinks.Update(ctx, key, data, rev)
	if errors.Is(err, jetstream.ErrConflict) {
		// Another gateway took it: the post is its to finish.
		return 0, fmt.Errorf("%w: %w", errPostBusy, err)
	}
	return rev, err
}

// postRecorded records the post of intent in at ts under key.
func (g *Gateway) postRecorded(ctx context.Context, key string, in postIntent, ts string, rev uint64) (postedCard, error) {
	p := postedCard{Posted: slack.Posted{Channel: in.Channel, TS: ts}, Buttons: in.Buttons}
	_, err := g.putIntent(ctx, key, postIntent{State: "posted", Since: time.Now().UTC(), Channel: in.Channel, TS: ts, Buttons: in.Buttons}, rev)
	return p, err
}

// findPost looks in the channel's history (in the thread's replies, for a
// reply), from a minute before the first attempt, for the post carrying
// key; it returns its ts, or "".
func (g *Gateway) findPost(ctx context.Context, key string, in *postIntent) (string, error) {
	oldest := strconv.FormatInt(in.Since.Add(-time.Minute).Unix(), 10)
	var msgs []slack.HistoryMessage
	var err error
	if in.Thread != "" {
		msgs, err = g.slackAPI().Replies(ctx, in.Channel, in.Thread, oldest)
	} else {
		msgs, err = g.slackAPI().History(ctx, in.Channel, oldest)
	}
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		if m.Metadata != nil && m.Metadata.EventType == slack.EventType && m.Metadata.EventPayload["key"] == key {
			return m.TS, nil
		}
	}
	return "", nil
}

// slackCards are the cards the gateway posted for an interrupt, and the
// revision of their list (or of what its key holds when none is listed:
// an answer the server stored there is no list).
func (g *Gateway) slackCards(ctx context.Context, run, interrupt string) ([]postedCard, uint64, error) {
	raw, rev, err := g.usedLinks.Entry(ctx, slackCardsKey(run, interrupt))
	if errors.Is(err, jetstream.ErrNotFound) {
		// None, or an answer the server stored there for another user
		// (jetstream.ErrForeign), which the first write replaces.
		return nil, rev, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var out []postedCard
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, 0, fmt.Errorf("slack cards of %s/%s: %w", run, interrupt, err)
	}
	return out, rev, nil
}

// addSlackCard lists p among the cards of run's interrupt.
func (g *Gateway) addSlackCard(ctx context.Context, run, interrupt string, p postedCard) error {
	for range 10 {
		cards, rev, err := g.slackCards(ctx, run, interrupt)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(cards, func(c postedCard) bool { return c.Posted == p.Posted }) {
			return nil
		}
		out, _ := json.Marshal(append(cards, p))
		if _, err := g.usedLinks.Update(ctx, slackCardsKey(run, interrupt), out, rev); !errors.Is(err, jetstream.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("slack cards of %s/%s: %w", run, interrupt, jetstream.ErrConflict)
}

// slackPostFailed is the reply to a post that failed: unavailable (ask
// again) when Slack was busy, failed on its side or could not be reached,
// or another attempt holds the post; chat_post_failed when Slack refused
// it for good.
func slackPostFailed(err error) subjects.ChatPostReply {
	var ae *slack.APIError
	if errors.As(err, &ae) && !ae.Temporary() && ae.RetryAfter == 0 {
		return subjects.ChatPostReply{Code: subjects.CodeChatPostFailed, Detail: err.Error()}
	}
	return subjects.ChatPostReply{Code: subjects.CodeUnavailable, Detail: err.Error()}
}

// chatRefused audits a refused chat post request and says why in the
// reply. The asker is the notifier (only its NATS user may ask).
func (g *Gateway) chatRefused(ctx context.Context, req subjects.ChatPostRequest, code subjects.Code, detail string) subjects.ChatPostReply {
	request := fmt.Sprintf("chat.post %s %s/%s via sink %s", req.Kind, req.RunID, req.InterruptID, req.Sink)
	g.audit(ctx, req.RunID, code, "", detail, "nats", request)
	return subjects.ChatPostReply{Code: code, Detail: detail}
}

// interruptOf reads run's record, waiting up to recordWait for the
// coordinator to record the interrupt (the notifier reads the suspension
// from the same stream as the coordinator, and may be first), and returns
// it with the interrupt's index (-1: not there).
func (g *Gateway) interruptOf(ctx context.Context, run, interrupt string) (*subjects.Run, int, error) {
	wait, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	has := func(r *subjects.Run) int {
		return slices.IndexFunc(r.Interrupts, func(in subjects.InterruptState) bool { return in.ID == interrupt })
	}
	rec, err := g.client.Wait(wait, run, func(r *subjects.Run) bool { return has(r) >= 0 })
	if err != nil && wait.Err() != nil && ctx.Err() == nil {
		// Waited long enough: what the record says now decides.
		rec, err = g.client.Run(ctx, run)
	}
	if err != nil {
		return nil, -1, err
	}
	return rec, has(rec), nil
}
