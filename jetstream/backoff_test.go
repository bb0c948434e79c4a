package jetstream

import (
	"testing"
	"time"

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
