package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoredMsg is a message read back from a stream.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	// Header is what the publisher stored (a direct get's own removed).
	Header Header
	Data   []byte
	Time   time.Time
}

// LastMsg returns the last message of stream s on subject, which may contain
// wildcards. It returns ErrNotFound when there is none.
func (c *Client) LastMsg(ctx context.Context, s Stream, subject string) (StoredMsg, error) {
	st, err := c.stream(ctx, s)
	if err != nil {
		return StoredMsg{}, err
	}
	if directly(st) {
		// nats.go reads a direct get's answer with an empty body as the
		// server's status when it carries a Status header, a publisher's
		// own one too; directLast reads the sequence the server appended
		// first.
		return c.directLast(ctx, c.StreamName(s), subject)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return StoredMsg{}, translate(err)
	}
	return storedOf(m, false), nil
}

// directly reports whether nats.go reads st with direct gets: it does when
// the stream's config, as last fetched, allows them, and otherwise asks
// $JS.API.STREAM.MSG.GET, whose answer holds the stored headers alone.
func directly(st jetstream.Stream) bool {
	info := st.CachedInfo()
	return info != nil && info.Config.AllowDirect
}

// storedOf is the message a get of nats.go read, directly or not. A
// direct get's answer (on every stream of Interlock's that allows them)
// carries the server's headers after the stored ones, and nats.go takes
// subject, sequence and time from the first of each; a publisher's own
// headers of those names come first, so the server's (the last) are taken
// instead (serverHeader), and left out of the headers as stored. The other
// answer's headers are the stored ones, kept whole: a message the server
// stored from an answer it sent carries the server's headers once each,
// and CheckPublished must see them.
func storedOf(m *jetstream.RawStreamMsg, direct bool) StoredMsg {
	if !direct {
		return StoredMsg{Subject: m.Subject, Sequence: m.Sequence, Header: Header(m.Header), Data: m.Data, Time: m.Time}
	}
	out := StoredMsg{Subject: m.Subject, Sequence: m.Sequence, Header: storedHeader(m.Header), Data: m.Data, Time: m.Time}
	if len(m.Header.Values(jetstream.SubjectHeader)) > 1 {
		out.Subject = serverHeader(m.Header, jetstream.SubjectHeader)
	}
	if len(m.Header.Values(jetstream.SequenceHeader)) > 1 {
		out.Sequence, _ = strconv.ParseUint(serverHeader(m.Header, jetstream.SequenceHeader), 10, 64)
	}
	if len(m.Header.Values(jetstream.TimeStampHeaer)) > 1 {
		out.Time, _ = time.Parse(time.RFC3339Nano, serverHeader(m.Header, jetstream.TimeStampHeaer))
	}
	return out
}

// LeaderLast reports whether stream s holds a message on subject, which
// may contain wildcards, and the last one's sequence (0: none), asking the
// stream's leader ($JS.API.STREAM.MSG.GET.<stream>), never a replica that
// may lag as a direct get can be: for a check whose "none" must be true.
func (c *Client) LeaderLast(ctx context.Context, s Stream, subject string) (uint64, error) {
	name := c.StreamName(s)
	api := "$JS.API.STREAM.MSG.GET." + name
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return 0, err
	}
	m, err := c.nc.RequestWithContext(ctx, api, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, fmt.Errorf("read %s on %s: %w: the stream is missing", name, subject, ErrNotProvisioned)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s on %s: %w", name, subject, c.refused(api, translate(err)))
	}
	var reply struct {
		Message *struct {
			Sequence uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return 0, fmt.Errorf("read %s on %s: %w", name, subject, err)
	}
	switch {
	case reply.Error != nil && reply.Error.Code == 404:
		return 0, nil
	case reply.Error != nil:
		return 0, fmt.Errorf("read %s on %s: %s (%d)", name, subject, reply.Error.Description, reply.Error.ErrCode)
	case reply.Message == nil:
		return 0, fmt.Errorf("read %s on %s: a reply with no message", name, subject)
	}
	return reply.Message.Sequence, nil
}

// DirectLast returns the last message of stream s (which allows direct
// gets) on subject, which may contain wildcards, with one direct get whose
// API subject names the subject: $JS.API.DIRECT.GET.<stream>.<subject>. So
// NATS permissions can confine a user's reads to subjects of its own (an
// agent to <prefix>.*.<agent>.*), and it needs no STREAM.INFO. It returns
// ErrNotFound when there is none.
func (c *Client) DirectLast(ctx context.Context, s Stream, subject string) (StoredMsg, error) {
	return c.directLast(ctx, c.StreamName(s), subject)
}

// storedHeader is a direct get's answer's headers as stored: without the
// server's, which it appends to each answer (the last value of each of its
// names). What remains is what the publisher stored, which CheckPublished
// can then judge like a delivery's headers.
func storedHeader(h nats.Header) Header {
	out := make(Header, len(h))
	for k, v := range h {
		out[k] = v
	}
	for _, k := range serverHeaders {
		if v := out[k]; len(v) > 0 {
			if v = v[:len(v)-1]; len(v) == 0 {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
	}
	return out
}

// serverHeader is the value the server gave key in a direct get's answer:
// its last. The server appends its headers (Nats-Subject, Nats-Sequence,
// Nats-Time-Stamp) after the stored message's own, and a publisher may have
// stored headers of those names to make a reader take its message for
// another subject's, or another sequence.
func serverHeader(h nats.Header, key string) string {
	v := h.Values(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// directLast is DirectLast on the stream named name.
func (c *Client) directLast(ctx context.Context, name, subject string) (StoredMsg, error) {
	api := "$JS.API.DIRECT.GET." + name + "." + subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, api, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody answers direct gets: the stream is missing, or was made
		// before it allowed them (provisioning raises allow_direct).
		return StoredMsg{}, fmt.Errorf("read %s on %s: %w: the stream is missing or allows no direct gets", name, subject,
			ErrNotProvisioned)
	}
	if err != nil {
		return StoredMsg{}, fmt.Errorf("read %s on %s: %w", name, subject, c.refused(api, translate(err)))
	}
	// As in Batch: only a reply without a sequence is the server's status.
	seqHeader := serverHeader(m.Header, jetstream.SequenceHeader)
	if seqHeader == "" {
		switch status := m.Header.Get("Status"); status {
		case "404":
			return StoredMsg{}, fmt.Errorf("read %s on %s: %w", name, subject, ErrNotFound)
		default:
			return StoredMsg{}, fmt.Errorf("read %s on %s: status %q %s", name, subject, status, m.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(seqHeader, 10, 64)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("read %s: a reply with sequence %q: %w", name, seqHeader, err)
	}
	at, _ := time.Parse(time.RFC3339Nano, serverHeader(m.Header, jetstream.TimeStampHeaer))
	return StoredMsg{Subject: serverHeader(m.Header, jetstream.SubjectHeader), Sequence: seq, Header: storedHeader(m.Header),
		Data: m.Data, Time: at}, nil
}

// stream returns a handle on stream s, asking the server only the first
// time.
func (c *Client) stream(ctx context.Context, s Stream) (jetstream.Stream, error) {
	name := c.StreamName(s)
	if st, ok := c.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, translate(err)
	}
	c.streams.Store(name, st)
	return st, nil
}

// StreamLeader names the server that leads stream, "" during an election.
func (c *Client) StreamLeader(ctx context.Context, stream string) (string, error) {
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		return "", translate(err)
	}
	if st.CachedInfo().Cluster == nil {
		return "", nil
	}
	return st.CachedInfo().Cluster.Leader, nil
}

// ConsumerState is where a durable consumer stands.
type ConsumerState struct {
	// Delivered counts messages handed out at least once; Pending the ones
	// not yet handed out; AckPending the ones handed out and not yet acked.
	Delivered, Pending, AckPending uint64
	// AckWait is how long the server waits for an ack or a heartbeat.
	AckWait time.Duration
	// Waiting counts the pull requests open now: a consumer someone is
	// pulling from has at least one.
	Waiting int
}

// ConsumerState returns the state of durable on stream s.
func (c *Client) ConsumerState(ctx context.Context, s Stream, durable string) (ConsumerState, error) {
	cons, err := c.js.Consumer(ctx, c.StreamName(s), durable)
	if err != nil {
		return ConsumerState{}, translate(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return ConsumerState{}, translate(err)
	}
	return ConsumerState{Delivered: info.Delivered.Stream, Pending: info.NumPending, AckPending: uint64(info.NumAckPending),
		AckWait: info.Config.AckWait, Waiting: info.NumWaiting}, nil
}

// SubjectCounts returns how many messages stream s holds on each subject
// matching filter.
func (c *Client) SubjectCounts(ctx context.Context, s Stream, filter string) (map[string]uint64, error) {
	st, err := c.js.Stream(ctx, c.StreamName(s))
	if err != nil {
		return nil, translate(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, translate(err)
	}
	return info.State.Subjects, nil
}

// StoredBytes is what Interlock's streams and runs bucket hold on disk.
func (c *Client) StoredBytes(ctx context.Context) (uint64, error) {
	names := []string{"KV_" + c.BucketName(RunsBucket), "KV_" + c.BucketName(PendingBucket)}
	for _, s := range Streams {
		names = append(names, c.StreamName(s))
	}
	var total uint64
	for _, name := range names {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			return 0, translate(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, translate(err)
		}
		total += info.State.Bytes
	}
	return total, nil
}

// MsgCount returns how many messages stream s holds.
func (c *Client) MsgCount(ctx context.Context, s Stream) (uint64, error) {
	st, err := c.js.Stream(ctx, c.StreamName(s))
	if err != nil {
		return 0, translate(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, translate(err)
	}
	return info.State.Msgs, nil
}

// KeptAll reports whether stream s, one that denies deletes and purges
// (the events stream), holds every message ever stored in it: no age,
// byte, message or per-subject limit drops one now, and none dropped one
// before (its first sequence is still the stream's first).
func (c *Client) KeptAll(ctx context.Context, s Stream) (bool, error) {
	st, err := c.js.Stream(ctx, c.StreamName(s))
	if err != nil {
		return false, translate(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, translate(err)
	}
	cfg := info.Config
	return cfg.MaxAge == 0 && cfg.MaxBytes <= 0 && cfg.MaxMsgs <= 0 && cfg.MaxMsgsPerSubject <= 0 && info.State.FirstSeq <= 1, nil
}

// SubjectCount returns how many messages stream s holds on subject (no
// wildcards).
func (c *Client) SubjectCount(ctx context.Context, s Stream, subject string) (int, error) {
	counts, err := c.SubjectCounts(ctx, s, subject)
	return int(counts[subject]), err
}

// Messages returns up to limit messages of stream s on subject (which may
// contain wildcards), oldest first, starting at sequence from (0 for the
// first); fewer than limit only when no more match. On a stream that
// allows direct gets (events, AG-UI events, dead letters) that is one
// batched request (Batch), or more when the server ends a batch early (it
// caps a batch's bytes); on the others, which only tests and operators
// list, one request per message.
func (c *Client) Messages(ctx context.Context, s Stream, subject string, from uint64, limit int) ([]StoredMsg, error) {
	st, err := c.stream(ctx, s)
	if err != nil {
		return nil, err
	}
	if st.CachedInfo().Config.AllowDirect {
		var out []StoredMsg
		for {
			msgs, more, err := c.Batch(ctx, c.StreamName(s), subject, from, limit-len(out))
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
			if !more || len(msgs) == 0 || len(out) == limit {
				return out, nil
			}
			from = msgs[len(msgs)-1].Sequence + 1
		}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, translate(err)
	}
	var out []StoredMsg
	if info.State.Msgs == 0 {
		return nil, nil
	}
	if from == 0 {
		from = info.State.FirstSeq
	}
	for seq := from; len(out) < limit && seq <= info.State.LastSeq; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			if err = translate(err); isNotFound(err) {
				break
			}
			return out, err
		}
		sm := storedOf(m, directly(st))
		out = append(out, sm)
		seq = sm.Sequence + 1
	}
	return out, nil
}

// batchBytes bounds the bytes of one batched read: the server ends the
// batch there (with more to come), which keeps a reader's memory bounded
// and stays far below the server's slow-consumer limit (max_pending,
// 64 MB by default), which also caps a batch.
const batchBytes = 1 << 20

// numPendingHeader counts, on a batch's end, the messages matching its
// filter after the last one sent.
const numPendingHeader = "Nats-Num-Pending"

// Batch reads up to limit messages of the named stream on subjects
// matching filter, oldest first, from sequence from on (0: the first), with
// one batched direct get ($JS.API.DIRECT.GET.<stream>, nats-server 2.11+):
// one request, answered by the stream (any replica: the stream must allow
// direct gets) with the messages and an end-of-batch status. more says
// whether messages matching filter remain after the last one returned.
func (c *Client) Batch(ctx context.Context, stream, filter string, from uint64, limit int) (msgs []StoredMsg, more bool, err error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("read %s: a batch of %d messages", stream, limit)
	}
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq,omitempty"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{from, filter, limit, batchBytes})
	if err != nil {
		return nil, false, err
	}
	inbox := c.nc.NewInbox()
	replies := make(chan *nats.Msg, limit+1)
	sub, err := c.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, false, translate(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	api := "$JS.API.DIRECT.GET." + stream
	if err := c.nc.PublishRequest(api, inbox, req); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", stream, translate(err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("read %s: %w", stream, c.refused(api, ctx.Err()))
		}
		// A stored message carries its sequence; only a reply without one
		// is the server's status. A publisher may have stored a Status
		// header of its own, which must not end (or fail) the read.
		seqHeader := serverHeader(m.Header, jetstream.SequenceHeader)
		if seqHeader == "" {
			switch status := m.Header.Get("Status"); status {
			case "204": // end of batch
				return msgs, m.Header.Get(numPendingHeader) != "0", nil
			case "404": // nothing matches
				return nil, false, nil
			default:
				return nil, false, fmt.Errorf("read %s: status %q %s", stream, status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(seqHeader, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("read %s: a reply with sequence %q: %w", stream, seqHeader, err)
		}
		at, _ := time.Parse(time.RFC3339Nano, serverHeader(m.Header, jetstream.TimeStampHeaer))
		msgs = append(msgs, StoredMsg{Subject: serverHeader(m.Header, jetstream.SubjectHeader), Sequence: seq,
			Header: storedHeader(m.Header), Data: m.Data, Time: at})
	}
}
