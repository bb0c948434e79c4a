package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// TestPendingIndexFollowsTheRecords: an interrupt enters the pending index
// when its run suspends, moves its deadline with an escalation, and leaves
// when decided.
func TestPendingIndexFollowsTheRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pending := func() map[string]subjects.PendingInterrupt {
		list, err := store.AllPending(ctx(t), e.st)
		require.NoError(t, err)
		out := map[string]subjects.PendingInterrupt{}
		for _, p := range list {
			out[p.RunID] = p
		}
		return out
	}
	plain := open
	plain.Message = "plain"
	escalates := expiring
	escalates.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 3600}
	e.suspend("a", 0, plain)
	e.suspend("b", 0, escalates)
	require.Len(t, pending(), 2)
	assert.Equal(t, "plain", pending()["a"].Message)
	assert.True(t, pending()["b"].ExpiresAt.Equal(deadline))

	e.decide("a", "", resolve("d1", "open", ""))
	assert.NotContains(t, pending(), "a", "a decided interrupt leaves the index")

	e.now = deadline
	require.NoError(t, e.co.handleTimer(ctx(t), e.timer("b", "expiring", subjects.TimerExpire)))
	b, ok := pending()["b"]
	require.True(t, ok, "an escalated interrupt stays")
	assert.True(t, b.ExpiresAt.Equal(deadline.Add(time.Hour)), "an escalation moves the deadline in the index: %v", b.ExpiresAt)
	assert.Equal(t, 1, b.Escalations)
}
