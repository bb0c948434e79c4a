package writes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"a.b", "a.b", true}, {"a.b", "a.c", false}, {"a.*", "a.b", true}, {"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true}, {"a.>", "a", false}, {"$KV.x.>", "$KV.x.k", true}, {"a.b.c", "a.b", false},
	} {
		assert.Equal(t, tc.want, match(strings.Split(tc.filter, "."), strings.Split(tc.subject, ".")), "%s ~ %s", tc.filter, tc.subject)
	}
}

// TestTap counts stored messages across streams, deleted ones included,
// and the bytes of what was published on their subjects only.
func TestTap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := jstest.Server(t).URL()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	q, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"}, Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "l", []byte("before"))
	require.NoError(t, err)

	tap, err := Start(ctx, url)
	require.NoError(t, err)
	_, err = js.PublishMsg(ctx, &nats.Msg{Subject: "q.a", Data: []byte("12345"), Header: nats.Header{"K": {"v"}}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "l", []byte("1"))
	require.NoError(t, err)
	require.NoError(t, nc.Publish("not.stored", []byte("ignored")))
	// Deliveries to a consumer are reads: not counted.
	cons, err := q.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	batch, err := cons.Fetch(1)
	require.NoError(t, err)
	for m := range batch.Messages() {
		assert.Equal(t, "q.a", m.Subject())
	}
	require.NoError(t, batch.Error())
	require.NoError(t, q.DeleteMsg(ctx, 1))
	got, err := tap.Stop(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), got.Msgs, "one message on each stream, the deleted one included")
	header := len("NATS/1.0\r\n") + len("K: v\r\n") + len("\r\n")
	assert.Equal(t, uint64(len("q.a")+5+header+len("l")+1), got.Bytes)
	assert.Equal(t, map[string]uint64{"Q": uint64(len("q.a") + 5 + header), "L": uint64(len("l") + 1)}, got.Streams,
		"the bytes by stream")
}
