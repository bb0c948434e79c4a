package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header is a message's headers.
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Headers Interlock sets on messages.
const (
	// HeaderMsgID is JetStream's dedup key.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderReplyTo asks the coordinator to send the decision's verdict to
	// this subject as well as to the events stream.
	HeaderReplyTo = "Interlock-Reply-To"
	// HeaderVia names the path a decision came by, for the audit trail.
	HeaderVia = "Interlock-Via"
	// HeaderEmitSettled, on an AG-UI event a worker stored, is how many of
	// its pass's Emit calls came before the pass's first undecided
	// interrupt (up to and including this event): a replay makes those
	// same calls first, in order.
	HeaderEmitSettled = "Interlock-Emit-Settled"
	// HeaderEmitTentative, on an AG-UI event a worker stored, lists the
	// digests (comma-separated) of the run's kept events that no replay
	// has placed yet: those emitted after an undecided interrupt, which a
	// replay may emit again elsewhere (after acting on that interrupt).
	HeaderEmitTentative = "Interlock-Emit-Tentative"
	// HeaderRecordWrites, on an audit entry of a change to a run's record,
	// is the record's writes after that change (subjects.Run.Writes): of a
	// run whose record an answer replaced, the coordinator puts back the
	// latest copy the trail carries only when no entry after it names a
	// later write, or was written by a coordinator that wrote no copies.
	HeaderRecordWrites = "Interlock-Record-Writes"
	// Dead-letter headers: why the message failed and where it came from.
	HeaderDLQReason     = "Interlock-Dlq-Reason"
	HeaderDLQSubject    = "Interlock-Dlq-Subject"
	HeaderDLQStream     = "Interlock-Dlq-Stream"
	HeaderDLQSequence   = "Interlock-Dlq-Sequence"
	HeaderDLQDeliveries = "Interlock-Dlq-Deliveries"
	HeaderDLQConsumer   = "Interlock-Dlq-Consumer"
)

// PubAck is the server's acknowledgement of a stored message.
type PubAck struct {
	Stream    string
	Sequence  uint64
	Duplicate bool
}

// Publish stores data on subject, deduplicated by msgID when it is not empty,
// and returns once the server has stored it.
func (c *Client) Publish(ctx context.Context, subject string, data []byte, msgID string, h Header) (PubAck, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header(h)}
	if msgID != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(HeaderMsgID, msgID)
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return PubAck{}, fmt.Errorf("publish %s: %w", subject, c.refused(subject, err))
	}
	return PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// refused is err translated, or ErrPermission when the server refused this
// user a publish on subject: it drops the message and says so only
// asynchronously, so the publish itself just times out.
func (c *Client) refused(subject string, err error) error {
	last := c.nc.LastError()
	if last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject+`"`) {
		return fmt.Errorf("%w: the server refused this user a publish on %s (%s)", ErrPermission, subject, last.Error())
	}
	return c.written(subject, err)
}

// OutMsg is one message for PublishAll.
type OutMsg struct {
	Subject string
	Data    []byte
	// MsgID deduplicates, when set.
	MsgID  string
	Header Header
}

// ScheduleMsg is the message that stores data on subject as a durable
// timer the server publishes to target at at (whole seconds), for
// PublishAll.
func ScheduleMsg(subject, target string, at time.Time, data []byte, msgID string) OutMsg {
	return OutMsg{Subject: subject, Data: data, MsgID: msgID, Header: Header{
		"Nats-Schedule": {"@at " + at.UTC().Format(time.RFC3339)}, "Nats-Schedule-Target": {target}}}
}

// PublishAll stores every message, sending them together rather than one
// round trip after another, and returns once the server has stored all of
// them (or the first error).
func (c *Client) PublishAll(ctx context.Context, msgs ...OutMsg) error {
	if len(msgs) == 1 {
		_, err := c.PublishOnce(ctx, msgs[0])
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		nm := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for k, v := range m.Header {
			nm.Header[k] = v
		}
		if m.MsgID != "" {
			nm.Header.Set(HeaderMsgID, m.MsgID)
		}
		f, err := c.js.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish %s: %w", m.Subject, c.written(m.Subject, err))
		}
		futures = append(futures, f)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				if _, err := c.reclaim(ctx, msgs[i], ack.Stream, ack.Sequence); err != nil {
					return err
				}
			}
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", msgs[i].Subject, c.written(msgs[i].Subject, err))
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", msgs[i].Subject, translate(ctx.Err()))
		}
	}
	return nil
}

// Notify sends data on subject without storing it (core NATS); for replies.
func (c *Client) Notify(subject string, data []byte) error {
	return translate(c.nc.Publish(subject, data))
}

// NotifyMsg sends data with headers on subject without storing it (core
// NATS) and returns once the server has it, so the caller may count it as
// handed over.
func (c *Client) NotifyMsg(ctx context.Context, subject string, data []byte, h Header) error {
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Data: data, Header: nats.Header(h)}); err != nil {
		return translate(err)
	}
	return translate(c.nc.FlushWithContext(ctx))
}

// Request sends data on subject (core NATS, stored nowhere) and returns the
// one reply, which arrives in this client's own inbox. No server on subject
// is an error wrapping ErrNoStream; none within ctx, ErrTimeout.
func (c *Client) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, translate(err)
	}
	return m.Data, nil
}

// PublishOnce publishes m and reports whether the stream held it before
// (its id was taken by an earlier publish of the same write). An id on the
// audit trail held by an answer the server stored for another user is
// reclaimed as PublishAll does, and m is then stored, not a duplicate.
func (c *Client) PublishOnce(ctx context.Context, m OutMsg) (duplicate bool, err error) {
	ack, err := c.Publish(ctx, m.Subject, m.Data, m.MsgID, m.Header)
	if err != nil || !ack.Duplicate {
		return false, err
	}
	return c.reclaim(ctx, m, ack.Stream, ack.Sequence)
}

// reclaim checks, for a message of the audit trail that the stream took
// for a duplicate, that what holds its id at seq is a publish of its
// writer's, and stores m again under another id when it is not: the server
// sends a JetStream API answer to whatever subject its request names, with
// its own rights, so another user could have an answer stored there first
// carrying the id m was to take, and the entry would be dropped
// (docs/security.md, "Answers the server sends for you"). Readers skip
// such answers (CheckPublished). The pending index's puts are checked too:
// their ids are computable from a run's and an interrupt's. Other streams'
// ids are keyed or random, and not checked here. It reports whether m's id is held by its writer's
// own publish (a duplicate).
func (c *Client) reclaim(ctx context.Context, m OutMsg, stream string, seq uint64) (duplicate bool, err error) {
	if stream != c.StreamName(StreamEvents) && stream != c.BucketStreamName(PendingBucket) {
		return true, nil
	}
	for try := 0; try < 3; try++ {
		held, _, err := c.Batch(ctx, stream, ">", seq, 1)
		if err != nil {
			return false, fmt.Errorf("publish %s: check the message holding its id %s: %w", m.Subject, m.MsgID, err)
		}
		if len(held) == 0 || held[0].Sequence != seq || held[0].Subject == m.Subject && CheckPublished(held[0].Header) == nil {
			// Our own, stored before (a retry), or no longer there to
			// judge: written over since (a key's put and then its delete).
			// A writer whose ids another user can compute must tag them
			// (IDSigner.Sign): a message of that user's can hold one and
			// then be written over.
			return true, nil
		}
		m.MsgID += ":reclaimed@" + strconv.FormatUint(seq, 10)
		ack, err := c.Publish(ctx, m.Subject, m.Data, m.MsgID, m.Header)
		if err != nil || !ack.Duplicate {
			return false, err
		}
		seq = ack.Sequence
	}
	return false, fmt.Errorf("publish %s: %w: its id %s is held by messages the server stored for another user", m.Subject,
		ErrPermission, m.MsgID)
}
