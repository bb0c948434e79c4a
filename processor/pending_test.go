package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// The pending index follows the records: an interrupt appears when its run
// suspends, moves with an escalation, and leaves when decided or expired.
func TestPendingIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{
		"gate": gated(func() Request { return Request{Message: "plain"} }),
		"esc": gated(func() Request {
			return Request{Message: "escalates", Timeout: time.Second,
				OnExpiry: Expiry{Action: subjects.ExpiryEscalate, Extend: time.Hour}}
		}),
	})
	pending := func() map[string]PendingInterrupt {
		list, err := h.client.Pending(h.ctx())
		require.NoError(t, err)
		out := map[string]PendingInterrupt{}
		for _, p := range list {
			out[p.RunID] = p
		}
		return out
	}
	a := h.start("gate", nil)
	idA := h.suspendedAtPass(a, 0).Pending()[0].ID
	b := h.start("esc", nil)
	first := *h.suspendedAtPass(b, 0).Pending()[0].ExpiresAt
	require.Eventually(t, func() bool { return len(pending()) == 2 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "plain", pending()[a].Message)

	h.decide(a, idA, subjects.StatusResolved, true)
	require.Eventually(t, func() bool { _, ok := pending()[a]; return !ok }, 10*time.Second, 20*time.Millisecond,
		"a decided interrupt leaves the index")

	h.waitEvents(b, subjects.EventEscalated, 1)
	require.Eventually(t, func() bool {
		p, ok := pending()[b]
		return ok && p.ExpiresAt.Equal(first.Add(time.Hour)) && p.Escalations == 1
	}, 10*time.Second, 20*time.Millisecond, "an escalation moves the deadline in the index")
}
