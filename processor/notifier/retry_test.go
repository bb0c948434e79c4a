package notifier

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
)

// busyReceiver answers the first request with status and the Retry-After
// header retryAfter returns at that moment, later ones with 200, and
// records when each arrived.
type busyReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	times []time.Time
}

func newBusyReceiver(t *testing.T, status int, retryAfter func() string) *busyReceiver {
	r := &busyReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.times = append(r.times, time.Now())
		first := len(r.times) == 1
		r.mu.Unlock()
		if first {
			w.Header().Set("Retry-After", retryAfter())
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *busyReceiver) got() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.times...)
}

// busyConfig retries after 10ms, and at most 1m later (the budget).
const busyConfig = `
retry: {attempts: 3, backoff: [10ms, 1m]}
sinks:
  ops: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [ops]}
`

// A receiver that answers 429 or 503 with Retry-After is not asked again
// before that time, though the backoff says 10ms.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		header func() string
	}{
		{http.StatusTooManyRequests, func() string { return "2" }},
		{http.StatusServiceUnavailable, func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hook := newBusyReceiver(t, c.status, c.header)
			n := e.start(fmt.Sprintf(busyConfig, hook.URL), nil)
			e.suspend("refunds")
			require.Eventually(t, func() bool { return n.Count("ops", OutcomeDelivered) == 1 }, 15*time.Second, 10*time.Millisecond)
			got := hook.got()
			require.Len(t, got, 2)
			// An HTTP date has whole seconds: allow for the truncation.
			assert.GreaterOrEqual(t, got[1].Sub(got[0]), 1900*time.Millisecond, "not retried before Retry-After")
		})
	}
}

// A Retry-After longer than the retry budget (the longest backoff) dead-
// letters the notification at once, saying why, rather than retrying early
// or holding it for an hour.
func TestRetryAfterBeyondTheBudgetIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newBusyReceiver(t, http.StatusTooManyRequests, func() string { return "3600" })
	n := e.start(fmt.Sprintf(busyConfig, hook.URL), nil)
	e.suspend("refunds")
	require.Eventually(t, func() bool { return n.Count("ops", OutcomeDeadLettered) == 1 }, 15*time.Second, 10*time.Millisecond)
	dlq, _ := e.admin.Namespace().DeadLetter("notifier_ops")
	msgs, err := e.admin.Messages(ctx(t), jetstream.StreamDLQ, dlq, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Contains(t, msgs[0].Header.Get(jetstream.HeaderDLQReason), "Retry-After 1h0m0s is beyond the retry budget of 1m0s")
	assert.Len(t, hook.got(), 1)
}
