package jetstream

import (
	"github.com/nats-io/nats.go"

	"github.com/interlockhq/interlock/subjects"
)

// Subscription is a core NATS subscription.
type Subscription struct{ sub *nats.Subscription }

// Unsubscribe stops the subscription.
func (s *Subscription) Unsubscribe() { _ = s.sub.Unsubscribe() }

// Subscribe calls fn for every message on subject (core NATS, not stored).
func (c *Client) Subscribe(subject string, fn func(subject string, data []byte)) (*Subscription, error) {
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Subject, m.Data) })
	if err != nil {
		return nil, translate(err)
	}
	return c.confirmed(sub)
}

// confirmed flushes so that the server holds sub before it is used. A flush
// cut short by the loss of the connection (a node died; the client may
// already be connected to another by the time it returns) leaves the
// subscription standing: nats.go subscribes again on reconnect, before it
// sends anything published meanwhile. Only a closed connection fails.
func (c *Client) confirmed(sub *nats.Subscription) (*Subscription, error) {
	if err := c.nc.Flush(); err != nil && c.nc.IsClosed() {
		_ = sub.Unsubscribe()
		return nil, translate(err)
	}
	return &Subscription{sub: sub}, nil
}

// NewInbox returns a fresh subject for replies.
func (c *Client) NewInbox() string { return c.nc.NewInbox() }

// A Service answers requests on a subject (core NATS request and reply).
type Service struct {
	// Subject is what it serves, wildcards allowed.
	Subject string
	// Queue is the queue group its instances share the requests in.
	Queue string
	// Parallel bounds the requests answered at once, each in its own
	// goroutine (at least 1).
	Parallel int
	// Answer is the reply to a request's data, sent on subject (which NATS
	// permissions vouch for).
	Answer func(subject string, data []byte) []byte
	// Refused, when set, is told of a request whose reply subject is not an
	// inbox (subjects.IsInbox): it is neither answered nor given to Answer.
	Refused func(subject, reply string)
}

// Serve answers the requests s describes until Unsubscribe. A request
// without a reply subject is dropped; one whose reply subject is not an
// inbox is refused. NATS does not check a reply subject against its
// publisher's permissions: answered, it would be published with this
// client's rights wherever the requester pointed (a run record's key, an
// audit entry's subject).
func (c *Client) Serve(s Service) (*Subscription, error) {
	slots := make(chan struct{}, max(s.Parallel, 1))
	sub, err := c.nc.QueueSubscribe(s.Subject, s.Queue, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			if !subjects.IsInbox(m.Reply) {
				if s.Refused != nil {
					s.Refused(m.Subject, m.Reply)
				}
				return
			}
			_ = m.Respond(s.Answer(m.Subject, m.Data))
		}()
	})
	if err != nil {
		return nil, translate(err)
	}
	return c.confirmed(sub)
}
