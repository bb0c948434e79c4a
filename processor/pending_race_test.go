package processor

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// TestDecisionRacingTheIndexEntry: a decision handled between the
// suspension's record and its pending-index entry (an automated approver
// answering the suspension within milliseconds) used to leave the decided
// interrupt listed as pending for good: its removal went out before the
// entry was put. The coordinator's suspension handler is held right after
// the record while the decision is accepted, then let go.
func TestDecisionRacingTheIndexEntry(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newBareHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.startWorker(nil)
	h.startCoordinator(func(point string) bool {
		if point == "outcome-after-record" {
			once.Do(func() { close(reached); <-release })
		}
		return false
	})
	run := h.start("refunds", nil)
	<-reached
	rec := h.suspendedAtPass(run, 0)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 5})
	close(release)

	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	// The suspension's handler has finished: its event is out.
	h.waitEvents(run, subjects.EventSuspended, 1)
	pending, err := h.client.Pending(h.ctx())
	require.NoError(t, err)
	for _, p := range pending {
		assert.NotEqual(t, run, p.RunID, "a decided interrupt is still listed as pending: %+v", p)
	}
}
