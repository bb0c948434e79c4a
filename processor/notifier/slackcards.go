package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// slackCards is the Slack sink whose messages carry decision buttons: it
// holds no Slack token and draws nothing. For each interrupt it asks the
// gateway's chat card service (subjects.ChatPost) to post the message, and
// the gateway, the only holder of the bot token, draws the card from the
// stored record into the channel it maps this sink to, its buttons signed
// (docs/security.md, "Deciding from Slack"). Reminders, escalations and
// expiries go the same way, into the card's thread.
//
// The request carries the notification's delivery key: the gateway posts
// each key once (it records its intent before posting and reconciles
// after a crash), so a redelivery of the notification does not post twice.
// When no gateway answers, or it cannot post for now, the delivery is
// retried and, after its last attempt, dead-lettered with a
// notification_failed event; a refusal (a sink the gateway posts nothing
// for, Slack refusing the channel) fails it at once, visibly the same way.
type slackCards struct {
	buttons bool
	client  *jetstream.Client
}

// chatTimeout bounds the wait for the gateway's post: longer than its
// wait for the run record and one post.
const chatTimeout = 15 * time.Second

// attachClient gives the sink the notifier's NATS client, at Start.
func (s *slackCards) attachClient(c *jetstream.Client) { s.client = c }

func (s *slackCards) Deliver(ctx context.Context, n *Notification) error {
	if s.client == nil {
		return &permanent{errors.New("slack sink not started")}
	}
	for _, d := range n.Decide {
		if err := s.post(ctx, n, d.ID); err != nil {
			return err
		}
	}
	return nil
}

func (s *slackCards) post(ctx context.Context, n *Notification, interrupt string) error {
	req, _ := json.Marshal(subjects.ChatPostRequest{Version: subjects.Version, RunID: n.Suspension.RunID,
		InterruptID: interrupt, Sink: n.Sink, Kind: string(n.Kind), Key: n.Key, NoButtons: !s.buttons})
	ctx, cancel := context.WithTimeout(ctx, chatTimeout)
	defer cancel()
	data, err := s.client.Request(ctx, s.client.Namespace().ChatPost(), req)
	if err != nil {
		return fmt.Errorf("slack %s/%s: %w: %w", n.Suspension.RunID, interrupt, ErrNoGateway, err)
	}
	var reply subjects.ChatPostReply
	if err := json.Unmarshal(data, &reply); err != nil {
		return fmt.Errorf("slack %s/%s: the gateway's answer: %w", n.Suspension.RunID, interrupt, err)
	}
	switch reply.Code {
	case "":
		return nil
	case subjects.CodeUnavailable:
		return fmt.Errorf("slack %s/%s: gateway: %s: %s", n.Suspension.RunID, interrupt, reply.Code, reply.Detail)
	}
	return &permanent{fmt.Errorf("slack %s/%s: %w: %s: %s", n.Suspension.RunID, interrupt, ErrGatewayRefused, reply.Code, reply.Detail)}
}
