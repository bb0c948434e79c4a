package processor

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/histogram"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestTenThousandDeadlines arms 10,000 interrupts with deadlines spread over
// a minute and checks that every one expires exactly once. It takes over a
// minute, so it runs only with INTERLOCK_SOAK=1:
//
//	INTERLOCK_SOAK=1 go test -run TestTenThousandDeadlines -v -timeout 10m ./processor
func TestTenThousandDeadlines(t *testing.T) {
	t.Parallel()
	if os.Getenv("INTERLOCK_SOAK") == "" {
		t.Skip("set INTERLOCK_SOAK=1 to run the 10,000-deadline soak test")
	}
	const n = 10_000
	spread := time.Minute
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	h.startCoordinator(nil) // two coordinators share the timers
	start := time.Now()
	deadlines := make(map[string]time.Time, n)
	for i := range n {
		run := fmt.Sprintf("soak-%05d", i)
		deadline := start.Add(5*time.Second + time.Duration(rand.Int64N(int64(spread)))).UTC()
		deadlines[run] = deadline
		s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "soak"},
			Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", ExpiresAt: &deadline}}}
		data, _ := json.Marshal(s)
		subject, _ := h.admin.Namespace().Suspended("soak", run)
		_, err := h.admin.Publish(h.ctx(), subject, data, run+":0", nil)
		require.NoError(t, err)
	}
	t.Logf("published %d suspensions in %s", n, time.Since(start).Round(time.Millisecond))
	var lateness histogram.Histogram
	pending := make(map[string]bool, n)
	for run := range deadlines {
		pending[run] = true
	}
	deadline := time.Now().Add(spread + 3*time.Minute)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for run := range pending {
			rec, err := h.client.Run(h.ctx(), run)
			if err != nil || rec.Interrupts[0].Decision == nil {
				continue
			}
			in := rec.Interrupts[0]
			require.Equal(t, subjects.ExpiryApprover, in.Decision.Approver)
			require.False(t, in.DecidedAt.Before(deadlines[run]), "%s expired early", run)
			lateness.Record(in.DecidedAt.Sub(deadlines[run]))
			delete(pending, run)
		}
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond) // polling 10,000 records; not synchronisation
		}
	}
	require.Empty(t, pending, "%d interrupts never expired", len(pending))
	// None twice: one expired event per run.
	msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamEvents, h.admin.Namespace().All(subjects.KindEvents)[:len("interlock.events.")]+"*."+string(subjects.EventExpired), 0, 2*n)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, m := range msgs {
		var ev subjects.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		seen[ev.RunID]++
	}
	require.Len(t, seen, n)
	for run, c := range seen {
		require.Equal(t, 1, c, run)
	}
	t.Logf("10,000 deadlines over %s: all expired once; lateness p50 %s, p99 %s, max bucket %s; total %s",
		spread, lateness.Quantile(0.5).Round(time.Millisecond), lateness.Quantile(0.99).Round(time.Millisecond),
		lateness.Quantile(1).Round(time.Millisecond), time.Since(start).Round(time.Second))
}
