package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

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
