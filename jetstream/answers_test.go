package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njetstream "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// plant has the server store body under key of the bucket bucket (a name
// given to BucketName) as a direct get's answer; op, when set, is the
// KV-Operation header its carrier was stored with.
func plant(t *testing.T, c *jetstream.Client, nc *nats.Conn, bucket, key, carrier string, body []byte, op string, bare bool) {
	t.Helper()
	h := nats.Header{}
	if op != "" {
		h.Set("KV-Operation", op)
	}
	jstest.Answer(t, nc, "INTERLOCK_RUNS", carrier, h, body, c.BucketStreamName(bucket), "$KV."+c.BucketName(bucket)+"."+key, bare)
}

// answersBucket is a server, a client of it, a plain connection (any
// user's) and the bucket "answers", for planting answers in.
func answersBucket(t *testing.T) (*embedded.Server, *jetstream.Client, *nats.Conn, *jetstream.Bucket) {
	t.Helper()
	srv, c, nc := serverAndConn(t)
	b, err := c.Bucket(ctx(t), "answers", "test", 0)
	require.NoError(t, err)
	return srv, c, nc, b
}

// serverAndConn is a server, a client of it and a plain connection (any
// user's).
func serverAndConn(t *testing.T) (*embedded.Server, *jetstream.Client, *nats.Conn) {
	t.Helper()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return srv, c, nc
}

// Readers of a bucket take an answer the server stored under a key for
// another user for no entry, mark over it, and write over it with
// compare-and-set; Has, for marks that fail closed, counts it.
func TestBucketAnswersAreNoEntries(t *testing.T) {
	t.Parallel()
	_, c, nc, b := answersBucket(t)
	for i, tc := range []struct {
		name string
		op   string
		bare bool
	}{{"headers", "", false}, {"bare", "", true}, {"delete-headers", "DEL", false}} {
		key := tc.name
		carrier := "interlock.completed.a.carrier-" + key
		plant(t, c, nc, "answers", key, carrier, []byte(`{"owner":"mallory"}`), tc.op, tc.bare)

		_, rev, err := b.Entry(ctx(t), key)
		require.ErrorIs(t, err, jetstream.ErrNotFound, tc.name)
		require.ErrorIs(t, err, jetstream.ErrForeign, tc.name)
		require.NotZero(t, rev, "the answer's revision, to write over")
		_, err = b.Get(ctx(t), key)
		assert.ErrorIs(t, err, jetstream.ErrForeign)
		marked, err := b.Marked(ctx(t), key)
		require.NoError(t, err)
		assert.False(t, marked, "an answer marks nothing")
		has, err := b.Has(ctx(t), key)
		require.NoError(t, err)
		assert.True(t, has, "Has fails closed: an answer saying DEL deletes nothing (%s)", tc.name)

		if i == 0 {
			next, err := b.Update(ctx(t), key, []byte(`{"owner":"ada"}`), rev)
			require.NoError(t, err, "written over with compare-and-set")
			v, got, err := b.Entry(ctx(t), key)
			require.NoError(t, err)
			assert.Equal(t, next, got)
			assert.JSONEq(t, `{"owner":"ada"}`, string(v))
			continue
		}
		first, err := b.Mark(ctx(t), key, []byte(`1`))
		require.NoError(t, err)
		assert.True(t, first, "the mark is written over the answer")
		first, err = b.Mark(ctx(t), key, []byte(`2`))
		require.NoError(t, err)
		assert.False(t, first)
		v, err := b.Get(ctx(t), key)
		require.NoError(t, err)
		assert.Equal(t, "1", string(v))
	}

	// A create or update of nats.go's (an entry from before writes carried
	// a message id) is a client's write; a plain put is not.
	njs, err := njetstream.New(nc)
	require.NoError(t, err)
	kv, err := njs.KeyValue(ctx(t), c.BucketName("answers"))
	require.NoError(t, err)
	_, err = kv.Create(ctx(t), "legacy", []byte(`old`))
	require.NoError(t, err)
	v, err := b.Get(ctx(t), "legacy")
	require.NoError(t, err)
	assert.Equal(t, "old", string(v))
	_, err = kv.Put(ctx(t), "legacy-put", []byte(`old`))
	require.NoError(t, err)
	_, err = b.Get(ctx(t), "legacy-put")
	assert.True(t, errors.Is(err, jetstream.ErrForeign), "a plain put cannot be told from an answer asked without headers")
	require.NoError(t, b.Put(ctx(t), "legacy-put", []byte(`new`)))
	v, err = b.Get(ctx(t), "legacy-put")
	require.NoError(t, err)
	assert.Equal(t, "new", string(v), "Put writes with a message id")
}

// A header block holding a blank line, or a bare LF, is read as nats-server
// reads it (third_party/nats.go/INTERLOCK.md): headers after a blank line
// are headers, and a bare LF ends no line. nats.go stopped at the blank
// line, where the server appends its own headers to a direct get's
// answer, so an answer stored under a key passed for a client's write.
// Found by a review of the ninth session.
func TestHeaderBlockReadAsTheServerReadsIt(t *testing.T) {
	t.Parallel()
	h, err := nats.DecodeHeadersMsg([]byte("NATS/1.0\r\nNats-Msg-Id: a\r\n\r\nNats-Stream: KV_x\r\n\r\n"))
	require.NoError(t, err)
	assert.Equal(t, "KV_x", h.Get("Nats-Stream"), "a header after a blank line")
	h, err = nats.DecodeHeadersMsg([]byte("NATS/1.0\r\nNats-Msg-Id: a\nNats-TTL: never\r\n\r\n"))
	require.NoError(t, err)
	assert.Empty(t, h.Get("Nats-TTL"), "a bare LF ends no line: the server applies no such header")
	assert.Equal(t, "a\nNats-TTL: never", h.Get("Nats-Msg-Id"))

	srv, c, nc, b := answersBucket(t)
	// The carrier's visible headers: a message id, and one copy of each
	// header a direct get's answer carries (a reader strips the server's
	// last value of each); the server's own come after the blank line.
	hdr := "NATS/1.0\r\nNats-Msg-Id: forged-1\r\nNats-Stream: X\r\nNats-Subject: $KV.x.victim\r\nNats-Sequence: 999\r\n" +
		"Nats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n\r\n"
	jstest.AnswerRaw(t, nc, srv.URL(), "INTERLOCK_RUNS", "interlock.completed.a.blank", hdr, []byte(`{"owner":"mallory"}`),
		c.BucketStreamName("answers"), "$KV."+c.BucketName("answers")+".victim")
	_, rev, err := b.Entry(ctx(t), "victim")
	require.ErrorIs(t, err, jetstream.ErrForeign, "an answer with the server's headers hidden passes for a client's write")
	assert.NotEqual(t, uint64(999), rev, "the revision is the server's, not the carrier's")
}

// A key marked and then deleted stays marked: Mark said so before this
// session's change and returned the delete marker's not-found after it.
// Found by a review of the ninth session.
func TestMarkAfterDeleteStaysMarked(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	b, err := c.Bucket(ctx(t), "marks", "test", 0)
	require.NoError(t, err)
	first, err := b.Mark(ctx(t), "k", []byte(`1`))
	require.NoError(t, err)
	require.True(t, first)
	require.NoError(t, b.Delete(ctx(t), "k"))
	first, err = b.Mark(ctx(t), "k", []byte(`2`))
	require.NoError(t, err)
	assert.False(t, first, "a key marked then deleted stays marked")
}

// Found by a review of the ninth session. A carrier whose header block
// holds a line nats-server ignores (no colon,
// a folded line, a second NATS/1.0 line) is stored as sent; an answer of it
// stored under a key must read as an answer (ErrForeign, written over),
// not as a failed read: nats.go failed the whole block, the message came
// with a nil Header, and directLast and Batch took it for a status reply.
func TestAnswerWithUnreadableHeaderLine(t *testing.T) {
	t.Parallel()
	srv, c, nc, b := answersBucket(t)
	require.NoError(t, b.Put(ctx(t), "ok", []byte(`1`)))
	for i, line := range []string{"garbage", "  folded", "NATS/1.0"} {
		key := "k" + string(rune('a'+i))
		jstest.AnswerRaw(t, nc, srv.URL(), "INTERLOCK_RUNS", "interlock.completed.a.c-"+key,
			"NATS/1.0\r\nNats-Msg-Id: f-"+key+"\r\n"+line+"\r\n\r\n", []byte(`{"owner":"mallory"}`),
			c.BucketStreamName("answers"), "$KV."+c.BucketName("answers")+"."+key)
		_, _, err := b.Entry(ctx(t), key)
		assert.ErrorIs(t, err, jetstream.ErrForeign, "%q", line)
		first, err := b.Mark(ctx(t), key, []byte(`1`))
		assert.NoError(t, err, "%q: the mark is not written over the answer", line)
		assert.True(t, first)
	}
	_, _, err := b.Page(ctx(t), 0, 100)
	assert.NoError(t, err, "one answer breaks every listing of the bucket")
}

// A header block without its closing blank line is stored as sent and its
// headers read by nats-server (it deduplicated a second copy by its
// message id); nats.go failed the whole block, so every read of the stream
// through STREAM.MSG.GET failed at that message, for good. Found by a
// third review of the ninth session.
func TestUnterminatedHeaderBlockRead(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	subject, _ := c.Namespace().Resume("r1")
	_, err := c.Publish(ctx(t), subject, []byte(`{"a":1}`), "a", nil)
	require.NoError(t, err)
	hdr := "NATS/1.0\r\nNats-Msg-Id: b\r\nX: y"
	jstest.RawPublish(t, srv.URL(), subject, hdr, []byte(`{"b":2}`))
	jstest.RawPublish(t, srv.URL(), subject, hdr, []byte(`{"b":2}`)) // a repeat the server drops by its id
	require.Eventually(t, func() bool {
		n, _ := c.SubjectCount(ctx(t), jetstream.StreamDecisions, subject)
		return n == 2
	}, 5*time.Second, 10*time.Millisecond)
	msgs, err := c.Messages(ctx(t), jetstream.StreamDecisions, subject, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	assert.Equal(t, "b", msgs[1].Header.Get(jetstream.HeaderMsgID))
	assert.Equal(t, "y", msgs[1].Header.Get("X"))
}

// A stored message with an empty body and a Status header of its own is
// a message, not the server's 404: LastMsg (nats.go's direct get) read
// the publisher's Status before the sequence the server appended.
func TestLastMsgStoredStatusHeader(t *testing.T) {
	t.Parallel()
	_, c, nc := serverAndConn(t)
	js, err := nc.JetStream()
	require.NoError(t, err)
	filter, err := c.Namespace().RunSuspensions("r1")
	require.NoError(t, err)
	subj := filter[:len(filter)-len("*.r1")] + "a.r1"
	_, err = js.Publish(subj, []byte(`{}`), nats.MsgId("s1"))
	require.NoError(t, err)
	m := nats.NewMsg(subj)
	m.Header.Set("Status", "404")
	m.Header.Set(nats.MsgIdHdr, "s2")
	ack, err := js.PublishMsg(m)
	require.NoError(t, err)
	last, err := c.LastMsg(ctx(t), jetstream.StreamRuns, filter)
	require.NoError(t, err, "the stream holds two messages on %s", subj)
	require.Equal(t, ack.Sequence, last.Sequence)
}

// A stored message with an empty body and Status and Description headers
// of its publisher's (or of an answer's carrier, which anyone allowed one
// direct get can have stored on a resume or work subject) is a message:
// the handler must see it, to refuse or dead-letter it. nats.go took it for
// the server's status: 409 "Consumer Deleted" ended the consume, 100 was
// dropped unacked and came back after every ack wait, and with a prefetch
// the fetch ended there and the next message stalled. Found by a review of
// the ninth session (third_party/nats.go/INTERLOCK.md).
func TestConsumeStoredStatusHeaders(t *testing.T) {
	t.Parallel()
	for _, prefetch := range []int{0, 4} {
		for _, st := range [][2]string{{"409", "Consumer Deleted"}, {"100", "Idle Heartbeat"}, {"404", "No Messages"}} {
			t.Run(fmt.Sprintf("prefetch=%d/status=%s", prefetch, st[0]), func(t *testing.T) {
				t.Parallel()
				c := jstest.Client(t, jstest.Server(t))
				subject, _ := c.Namespace().Resume("r1")
				for _, m := range []struct {
					id   string
					body []byte
					h    jetstream.Header
				}{{"a", []byte("a"), nil}, {"s", nil, jetstream.Header{"Status": {st[0]}, "Description": {st[1]}}}, {"b", []byte("b"), nil}} {
					_, err := c.Publish(ctx(t), subject, m.body, m.id, m.h)
					require.NoError(t, err)
				}
				var mu sync.Mutex
				var got []uint64
				k, err := c.Consume(ctx(t), jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions, Durable: "t", Prefetch: prefetch,
					AckWait: 2 * time.Second},
					func(_ context.Context, m *jetstream.Delivery) error {
						mu.Lock()
						defer mu.Unlock()
						got = append(got, m.Sequence)
						return nil
					})
				require.NoError(t, err)
				t.Cleanup(func() { k.Stop(context.Background()) })
				seen := func() []uint64 {
					mu.Lock()
					defer mu.Unlock()
					return slices.Clone(got)
				}
				require.Eventually(t, func() bool { return len(seen()) >= 3 }, 10*time.Second, 10*time.Millisecond,
					"handled %v: a stored Status %s read as the server's", seen(), st[0])
				require.Equal(t, []uint64{1, 2, 3}, seen())
			})
		}
	}
}
