package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestDirectLast: the last message on a subject, wildcards included, with
// its headers; ErrNotFound when none; ErrNotProvisioned when the stream
// allows no direct gets (one provisioned before it did).
func TestDirectLast(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := c.Namespace()
	susp, err := ns.Suspended("refunds", "run-1")
	require.NoError(t, err)
	done, err := ns.Completed("refunds", "run-1")
	require.NoError(t, err)
	other, err := ns.Completed("billing", "run-1")
	require.NoError(t, err)
	_, err = c.Publish(ctx, susp, []byte(`{"pass":0}`), "run-1:0:k", nil)
	require.NoError(t, err)
	_, err = c.Publish(ctx, done, []byte(`{"pass":1}`), "run-1:1:k", nil)
	require.NoError(t, err)
	_, err = c.Publish(ctx, other, []byte(`{"pass":7}`), "x", nil)
	require.NoError(t, err)

	outcomes, err := ns.RunOutcomes("refunds", "run-1")
	require.NoError(t, err)
	last, err := c.DirectLast(ctx, jetstream.StreamRuns, outcomes)
	require.NoError(t, err)
	assert.Equal(t, done, last.Subject)
	assert.JSONEq(t, `{"pass":1}`, string(last.Data))
	assert.Equal(t, "run-1:1:k", last.Header.Get(jetstream.HeaderMsgID))
	assert.NotZero(t, last.Sequence)

	none, err := ns.RunOutcomes("refunds", "run-2")
	require.NoError(t, err)
	_, err = c.DirectLast(ctx, jetstream.StreamRuns, none)
	assert.ErrorIs(t, err, jetstream.ErrNotFound)

	// A runs stream made before it allowed direct gets.
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	info, err := js.StreamInfo(c.StreamName(jetstream.StreamRuns))
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(info.Config.Name))
	old := info.Config
	old.AllowDirect = false
	_, err = js.AddStream(&old)
	require.NoError(t, err)
	_, err = c.DirectLast(ctx, jetstream.StreamRuns, outcomes)
	assert.ErrorIs(t, err, jetstream.ErrNotProvisioned)
}
