package jetstream

import (
	"github.com/nats-io/nats.go"
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

// Serve answers the requests on subject with what fn returns (every
// process serving subject in the same queue shares the requests), at most
// parallel at once, each in its own goroutine. A request without a reply
// subject is dropped. Unsubscribe stops serving.
func (c *Client) Serve(subject, queue string, parallel int, fn func(data []byte) []byte) (*Subscription, error) {
	return c.ServeSubjects(subject, queue, parallel, func(_ string, data []byte) []byte { return fn(data) })
}

// ServeSubjects is Serve for a wildcard subject: fn also gets the subject
// each request was sent on (which NATS permissions vouch for).
func (c *Client) ServeSubjects(subject, queue string, parallel int, fn func(subject string, data []byte) []byte) (*Subscription, error) {
	slots := make(chan struct{}, max(parallel, 1))
	sub, err := c.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			_ = m.Respond(fn(m.Subject, m.Data))
		}()
	})
	if err != nil {
		return nil, translate(err)
	}
	return c.confirmed(sub)
}
