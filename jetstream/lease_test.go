package jetstream

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/embedded"
)

// flakyProgress is a message whose first renewals fail, as a renewal does
// when its connection cannot send it (reconnecting with a full buffer).
type flakyProgress struct {
	jetstream.Msg
	failures atomic.Int32
}

func (m *flakyProgress) InProgress() error {
	if m.failures.Add(-1) >= 0 {
		return errors.New("nats: outbound buffer limit exceeded")
	}
	return m.Msg.InProgress()
}

// TestLeaseOutlivesAFailedRenewal: a lease whose renewal fails tries again
// rather than stop, so the message is not handed to another process while
// its handler still runs. It stopped renewing at the first failure.
func TestLeaseOutlivesAFailedRenewal(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, Sync: embedded.SyncInterval})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEASE", Subjects: []string{"lease.>"}})
	require.NoError(t, err)
	const ackWait = time.Second
	cons, err := js.CreateOrUpdateConsumer(ctx, "LEASE", jetstream.ConsumerConfig{Durable: "held",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "lease.1", []byte("work"))
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	raw := <-batch.Messages()
	require.NotNil(t, raw)

	m := &flakyProgress{Msg: raw}
	m.failures.Store(1)
	l := hold(m, func() time.Duration { return ackWait / 4 }, &leaseSet{})
	defer l.release()

	// Held for three ack waits: the server must not offer it again.
	again, err := cons.Fetch(1, jetstream.FetchMaxWait(3*ackWait))
	require.NoError(t, err)
	for redelivered := range again.Messages() {
		md, _ := redelivered.Metadata()
		t.Fatalf("the held message was delivered again (delivery %d) after a renewal failed", md.NumDelivered)
	}
	require.NoError(t, again.Error())
	require.LessOrEqual(t, m.failures.Load(), int32(-1), "the failing renewal was tried, and renewals went on")
}
