package gateway

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/subjects"
)

// The Slack messages follow their interrupts: when one is decided anywhere
// (Slack, the inbox, a link, the CLI, AG-UI, its deadline), each message
// the notifier posted about it (listed under slack.MessagesKey in the
// deliveries bucket, which the gateway may read) is updated with
// chat.update to say who decided what and when, without its buttons.
//
// The gateway follows the core NATS events feed: a decision made while no
// gateway runs leaves its messages as they were until someone clicks (the
// click is then answered "already decided" and the message updated). With
// several gateways each updates the messages; chat.update is idempotent.

// followQueue bounds the runs waiting for their messages to be updated.
const followQueue = 1024

// followSlack subscribes to the decisions on the events feed and updates
// the messages of each decided interrupt, until Close.
func (g *Gateway) followSlack() error {
	runs := make(chan string, followQueue)
	ns := g.nc.Namespace()
	sub, err := g.nc.Subscribe(ns.All(subjects.KindEvents), func(subject string, data []byte) {
		a, err := ns.Parse(subject)
		if err != nil {
			return
		}
		switch a.Event {
		case subjects.EventDecisionAccepted, subjects.EventExpired, subjects.EventResumed:
		default:
			return
		}
		select {
		case runs <- a.Run:
		default:
			g.cfg.Logger.Warn("slack messages not followed: too many decisions at once", "run", a.Run)
		}
	})
	if err != nil {
		return err
	}
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		defer sub.Unsubscribe()
		f := &follower{g: g, done: map[string]bool{}}
		for {
			select {
			case <-g.base.Done():
				return
			case run := <-runs:
				f.run(run)
			}
		}
	}()
	return nil
}

// follower remembers the interrupts whose messages it updated, so the
// events of a run's later passes do not update them again.
type follower struct {
	g       *Gateway
	done    map[string]bool
	bucket  *jetstream.Bucket
	noSlack bool
}

// run updates the messages of run's decided interrupts.
func (f *follower) run(run string) {
	g := f.g
	ctx, cancel := context.WithTimeout(g.base, g.cfg.Timeout)
	defer cancel()
	if f.bucket == nil {
		b, err := g.nc.OpenBucket(ctx, "deliveries")
		if err != nil {
			if !f.noSlack {
				g.cfg.Logger.Info("slack messages not followed: no deliveries bucket (no notifier provisioned)", "error", err)
				f.noSlack = true
			}
			return
		}
		f.bucket = b
	}
	rec, err := g.client.Run(ctx, run)
	if err != nil {
		return
	}
	for _, st := range rec.Interrupts {
		key := slack.MessagesKey(run, st.ID)
		if st.Decision == nil || f.done[key] {
			continue
		}
		raw, err := f.bucket.Get(ctx, key)
		if errors.Is(err, jetstream.ErrNotFound) {
			continue
		}
		if err != nil {
			g.cfg.Logger.Warn("slack messages not read", "run", run, "error", err)
			continue
		}
		var msgs []slack.Posted
		_ = json.Unmarshal(raw, &msgs)
		card := g.slackCard(rec, st)
		msg := card.Message()
		ok := true
		for _, m := range msgs {
			if err := g.slackAPI().Update(ctx, m.Channel, m.TS, msg); err != nil {
				ok = false
				g.cfg.Logger.Warn("slack message not updated", "run", run, "interrupt", st.ID, "error", err)
			}
		}
		if ok {
			if len(f.done) > 100_000 {
				clear(f.done)
			}
			f.done[key] = true
		}
	}
}
