package notifier

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWebhookErrorHidesURL: a Slack webhook's URL is its secret; when the
// POST fails, the error (which reaches logs and dead letters) names the host
// only.
func TestWebhookErrorHidesURL(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens: the POST fails
	for _, typ := range []string{"slack", "webhook"} {
		s, err := newSink(SinkConfig{Name: "x", Type: typ, URL: "http://" + addr + "/services/T000/B000/S3CRETPATH?token=S3CRETQUERY",
			Timeout: 2 * time.Second}, nil)
		require.NoError(t, err)
		err = s.Deliver(context.Background(), &Notification{Key: "k"})
		require.Error(t, err, typ)
		assert.NotContains(t, err.Error(), "S3CRET", typ)
		assert.Contains(t, err.Error(), addr, typ)
	}
}
