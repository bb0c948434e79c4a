package jetstream_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// Found by a review of the ninth session. A carrier whose header block
// holds a line nats-server ignores (no colon,
// a folded line, a second NATS/1.0 line) is stored as sent; an answer of it
// stored under a key must read as an answer (ErrForeign, written over),
// not as a failed read: nats.go failed the whole block, the message came
// with a nil Header, and directLast and Batch took it for a status reply.
func TestAnswerWithUnreadableHeaderLine(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	b, err := c.Bucket(ctx(t), "answers", "test", 0)
	require.NoError(t, err)
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
	_, _, err = b.Page(ctx(t), 0, 100)
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
