package jetstream

import (
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
)

// TestPullBackoff: failed pull requests in a row wait 0.1 s, 0.2 s, 0.4 s,
// ... up to 2 s; the fourth failure is a warning, and every 30th after it;
// a request filled or expired starts again from nothing.
func TestPullBackoff(t *testing.T) {
	var b pullBackoff
	var waits []time.Duration
	var warned []int
	for i := 1; i <= 70; i++ {
		wait, warn := b.failed()
		waits = append(waits, wait)
		if warn {
			warned = append(warned, i)
		}
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}, waits[:7])
	assert.Equal(t, 2*time.Second, waits[69])
	assert.Equal(t, []int{4, 34, 64}, warned)
	b.reset()
	wait, warn := b.failed()
	assert.Equal(t, 100*ms, wait)
	assert.False(t, warn)
}

// TestLimitsOf: a pull request asks within the consumer's MaxRequestBatch
// and MaxRequestExpires, with a heartbeat of at most a quarter of its
// wait (the server refuses one over half).
func TestLimitsOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want requestLimits
	}{
		{"no limits", jetstream.ConsumerConfig{}, requestLimits{batch: math.MaxInt, wait: 10 * time.Second, heartbeat: time.Second}},
		{"batch", jetstream.ConsumerConfig{MaxRequestBatch: 3}, requestLimits{batch: 3, wait: 10 * time.Second, heartbeat: time.Second}},
		{"expires above the wait", jetstream.ConsumerConfig{MaxRequestExpires: time.Minute},
			requestLimits{batch: math.MaxInt, wait: 10 * time.Second, heartbeat: time.Second}},
		{"expires", jetstream.ConsumerConfig{MaxRequestExpires: 2 * time.Second},
			requestLimits{batch: math.MaxInt, wait: 2 * time.Second, heartbeat: 500 * time.Millisecond}},
		{"expires short", jetstream.ConsumerConfig{MaxRequestBatch: 1, MaxRequestExpires: 100 * time.Millisecond},
			requestLimits{batch: 1, wait: 100 * time.Millisecond, heartbeat: 25 * time.Millisecond}},
	} {
		assert.Equal(t, tc.want, limitsOf(tc.cfg), tc.name)
	}
}
