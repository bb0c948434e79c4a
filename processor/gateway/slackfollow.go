package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/subjects"
)

// The Slack messages follow their interrupts: when one is decided anywhere
// (Slack, the inbox, a link, the CLI, AG-UI, its deadline), each card the
// gateway posted about it (listed under slackCardsKey in its own links
// bucket) is updated with chat.update to say who decided what and when,
// without its buttons.
//
// The gateway reads the decisions and expiries from a durable consumer on
// the events stream (SlackDurable, created by `interlock provision`): a
// decision made while no gateway runs is caught up by the next one to
// start, and gateways running side by side share the work, each event
// handled by one of them. An event is acked once its messages are updated;
// a failed chat.update is retried with the consumer's backoff and
// dead-lettered after its last delivery.

// SlackDurable is the durable consumer the gateways read decided
// interrupts from, to update their Slack messages.
const SlackDurable = "gateway_slack"

// slackFollowEvents are the events that may decide an interrupt, and the
// votes that leave one waiting (protocol version 2), after which its
// cards show the votes so far.
var slackFollowEvents = []subjects.EventType{subjects.EventDecisionAccepted, subjects.EventExpired, subjects.EventVoteRecorded}

// slackConsumer is the consumer SlackDurable: the decision and expiry
// events of every run, from its creation on.
func slackConsumer(ns subjects.Namespace) jetstream.ConsumeConfig {
	prefix := strings.TrimSuffix(ns.All(subjects.KindEvents), ">")
	var filters []string
	for _, t := range slackFollowEvents {
		filters = append(filters, prefix+"*."+string(t))
	}
	return jetstream.ConsumeConfig{
		Stream:         jetstream.StreamEvents,
		Durable:        SlackDurable,
		FilterSubjects: filters,
		DeliverNew:     true,
		MaxDeliver:     10,
		BackOff:        []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute},
	}
}

// errSlackNotDecided: the event names an interrupt its run's record does
// not show decided yet (the record is written after); tried again.
var errSlackNotDecided = errors.New("interrupt not decided in its run's record yet")

// followSlack consumes SlackDurable and updates the messages of each
// decided interrupt, until Stop or Close.
func (g *Gateway) followSlack() error {
	cc := slackConsumer(g.nc.Namespace())
	cc.Logger = g.cfg.Logger
	f := &follower{g: g}
	cons, err := g.nc.Consume(g.base, cc, f.handle)
	if err != nil {
		return fmt.Errorf("gateway: following Slack messages: %w", err)
	}
	// Stopped first by Stop and Close, not waited for as background work:
	// it runs until told. Its updates under way are waited for while ctx
	// lasts, then cancelled (redelivered to the next gateway) and waited
	// for until they return.
	g.stopFollow = func(ctx context.Context) error {
		err := cons.Stop(ctx)
		if err != nil {
			_ = cons.Stop(context.Background())
		}
		return err
	}
	return nil
}

// follower updates the Slack messages of the interrupts the events it is
// given decided.
type follower struct {
	g *Gateway
}

// handle updates the messages of the interrupts the event m decided. It
// returns nil (ack) when they are updated or there are none.
func (f *follower) handle(ctx context.Context, m *jetstream.Delivery) error {
	g := f.g
	if jetstream.CheckPublished(m.Header) != nil {
		return nil // an answer the server stored here for another user, not the coordinator's entry
	}
	// Type and run from the subject the entry was stored under.
	ev, err := subjects.StoredEvent(g.nc.Namespace(), m.Subject, m.Data)
	if err != nil {
		return jetstream.DeadLetter(fmt.Errorf("event: %w", err))
	}
	if ev.RunID == subjects.NoRun {
		return nil
	}
	ids := ev.InterruptIDs
	if ev.Verdict != nil && ev.Verdict.InterruptID != "" {
		ids = []string{ev.Verdict.InterruptID}
	}
	rec, err := g.client.Run(ctx, ev.RunID)
	if errors.Is(err, jetstream.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// A card Slack refuses for good (deleted, its channel archived) is
	// dead-lettered once the others are updated: it must not leave them
	// showing buttons.
	var refused []error
	for _, st := range rec.Interrupts {
		if len(ids) > 0 && !slices.Contains(ids, st.ID) {
			continue
		}
		msgs, _, err := g.slackCards(ctx, ev.RunID, st.ID)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			continue
		}
		if st.Decision == nil && ev.Type != subjects.EventVoteRecorded {
			return jetstream.RetryAfter(time.Second, fmt.Errorf("%s/%s: %w", ev.RunID, st.ID, errSlackNotDecided))
		}
		for _, p := range msgs {
			// A waiting interrupt keeps its buttons, signed for the
			// message's channel, where it was posted with them; a decided
			// one shows who decided what.
			msg := g.slackCard(rec, st).Message()
			if st.Decision == nil {
				c := g.drawCard(rec, st, p.Channel)
				c.Buttons = c.Buttons && p.Buttons
				msg = c.Message()
			}
			err := g.slackAPI().Update(ctx, p.Channel, p.TS, msg)
			if err == nil {
				continue
			}
			if retry := slackRetry(err); !jetstream.DeadLettered(retry) {
				return retry // updating every card again is harmless
			}
			refused = append(refused, fmt.Errorf("card %s/%s: %w", p.Channel, p.TS, err))
		}
	}
	if len(refused) > 0 {
		return jetstream.DeadLetter(errors.Join(refused...))
	}
	return nil
}

// slackRetry is how a failed chat.update comes back: after Slack's
// Retry-After when rate limited, with the consumer's backoff when Slack
// or the network failed, dead-lettered at once when Slack refused it (a
// deleted message, a revoked token: no retry changes that).
func slackRetry(err error) error {
	var ae *slack.APIError
	switch {
	case !errors.As(err, &ae):
		return err
	case ae.RetryAfter > 0:
		return jetstream.RetryAfter(ae.RetryAfter, err)
	case ae.Temporary():
		return err
	default:
		return jetstream.DeadLetter(err)
	}
}
