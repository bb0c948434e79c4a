package processor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// A start for a run id that already exists is refused before anything is
// published, so its first pass cannot run again with other input (once the
// duplicate window has passed, JetStream would not drop the work item).
func TestStartExistingRunRefused(t *testing.T) {
	t.Parallel()
	var calls counter
	h := newHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	run := h.start("refunds", map[string]any{"amount": 1})
	h.suspendedAtPass(run, 0)
	_, err := h.client.Start(h.ctx(), "refunds", map[string]any{"amount": 1000}, WithRunID(run))
	require.ErrorIs(t, err, ErrRunExists)
	rec, err := h.client.Run(h.ctx(), run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.JSONEq(t, `{"amount":1}`, string(rec.Input), "the run keeps its input")
}
