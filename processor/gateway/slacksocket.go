package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/subjects"
)

// slackSocketAddr is the address Socket Mode interactions are audited
// from: they come over the connections the gateway opened, not from a
// client address.
const slackSocketAddr = "slack-socket-mode"

// serveSlackSocket opens the Socket Mode connections (SlackConfig.AppToken)
// and keeps them open until the gateway stops.
func (g *Gateway) serveSlackSocket() error {
	cfg := g.cfg.Slack
	sock := &slack.Socket{AppToken: cfg.AppToken, APIURL: cfg.APIURL, Connections: cfg.SocketConnections,
		Handle: g.slackEnvelope, Logger: g.cfg.Logger, MinBackoff: cfg.SocketBackoff}
	if err := sock.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sock.Run(ctx)
	}()
	g.stopSocket = func() { cancel(); <-done }
	return nil
}

// slackEnvelope handles a Socket Mode envelope: an interaction goes where
// the HTTP endpoint's goes (slackHandle), once new. No signature is
// checked: the payload came over a TLS connection that the app-level token
// opened, to Slack's host, which only Slack can send on. It is new when
// its interaction (the user's trigger, or without one the envelope id) was
// not handled before, so a redelivered envelope, on this connection or
// another, decides nothing twice (a form's errors are kept with the mark
// and sent with the redelivery's ack too). The mark is written "in
// progress" before handling and its outcome after: a redelivery that finds
// no outcome (the gateway died in between) is told it was not taken
// (slackNotTaken), not acknowledged empty. Every envelope is acknowledged,
// a form's with its response_action; one the gateway could not record is
// not (Slack sends it again).
func (g *Gateway) slackEnvelope(ctx context.Context, env slack.Envelope) (any, error) {
	if env.Type != slack.EnvelopeInteractive {
		return nil, nil // events and commands: acknowledged, nothing else
	}
	ctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	in, err := slack.ParsePayload(env.Payload)
	if err != nil {
		g.audit(ctx, subjects.NoRun, subjects.CodeBadRequest, "", err.Error(), slackSocketAddr, "slack socket mode envelope")
		return nil, nil
	}
	key := slackSocketKey(env, in)
	mark, _ := json.Marshal(socketMark{Envelope: env.EnvelopeID})
	first, err := g.slackFirst(ctx, key, mark, slackSocketAddr)
	if err != nil {
		return nil, err
	}
	if crash := g.crash.Load(); first && crash != nil && (*crash)("slack-socket-after-mark") {
		return nil, errors.New("slack socket mode: abandoned by fault injection")
	}
	if !first {
		var m socketMark
		data, err := g.usedLinks.Get(ctx, key)
		if err == nil && json.Unmarshal(data, &m) == nil && !m.Taken {
			// Marked, never handled (the gateway that marked it died,
			// or is still at it): say it was not taken, rather than
			// close the form with nothing decided.
			if ack := g.slackNotTaken(in); ack != nil {
				return ack, nil
			}
			return nil, nil
		}
		// A form's errors go with every ack of it: Slack shows the
		// last one it gets.
		if m.Ack != nil {
			return m.Ack, nil
		}
		return nil, nil
	}
	answer := g.slackHandle(ctx, in, key, slackSocketAddr)
	if data, err := json.Marshal(socketMark{Envelope: env.EnvelopeID, Taken: true, Ack: answer}); err == nil {
		if err := g.usedLinks.Put(ctx, key, data); err != nil {
			g.cfg.Logger.Warn("slack socket mode: the outcome of an interaction is not kept for a redelivery", "error", err)
		}
	}
	if answer == nil {
		return nil, nil // an empty ack, not "null"
	}
	return answer, nil
}

// slackNotTakenText tells the user an interaction was not taken.
const slackNotTakenText = "Interlock could not take this; submit again."

// slackNotTaken answers a redelivered interaction whose first delivery was
// marked and never handled: a form stays open saying so; a click is told
// in an ephemeral message.
func (g *Gateway) slackNotTaken(in *slack.Interaction) map[string]any {
	if in.Type == slack.TypeViewSubmission && in.View != nil && len(in.View.Blocks()) > 0 {
		return map[string]any{"response_action": "errors", "errors": map[string]string{in.View.Blocks()[0]: slackNotTakenText}}
	}
	g.slackLater(func(ctx context.Context) {
		g.slackEphemeral(ctx, in, "Interlock could not take this click; click again.")
	})
	return nil
}

// socketMark is what the replay mark of a Socket Mode interaction holds:
// its envelope id, whether it was handled and, for a form answered with
// errors, that answer, sent again with the ack of a redelivery.
type socketMark struct {
	Envelope string `json:"envelope"`
	// Taken is set once the interaction was handled (a click's decision
	// then follows the ack): a mark without it is in progress, or was
	// abandoned by a gateway that died.
	Taken bool           `json:"taken,omitempty"`
	Ack   map[string]any `json:"ack,omitempty"`
}

// slackSocketKey is the replay key of an interaction received over Socket
// Mode: its workspace, user and trigger (one per click or submission), or
// the envelope id when it has no trigger.
func slackSocketKey(env slack.Envelope, in *slack.Interaction) string {
	id := "envelope\x00" + env.EnvelopeID
	if in.TriggerID != "" {
		id = "trigger\x00" + in.Team.ID + "\x00" + in.User.ID + "\x00" + in.TriggerID
	}
	sum := sha256.Sum256([]byte("socket\x00" + id))
	return slackReplayPrefix + "sm-" + hex.EncodeToString(sum[:16])
}
