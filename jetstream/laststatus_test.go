package jetstream_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// A stored message with an empty body and a Status header of its own is
// a message, not the server's 404: LastMsg (nats.go's direct get) read
// the publisher's Status before the sequence the server appended.
func TestLastMsgStoredStatusHeader(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
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
