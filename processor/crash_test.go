package processor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestCrashConverges abandons a worker or the coordinator between each pair
// of steps of the flow (its connection closes with the message unacked, as
// when a process dies), starts a fresh one, and checks that redelivery
// converges: the run completes once, the decision is applied once, the
// suspension has its record and its event, and the journaled step ran once.
func TestCrashConverges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		component string
		point     string
		// steps is how many times the journaled step runs: a pass abandoned
		// before its suspension was published never recorded it.
		steps int
	}{
		{"worker", "after-body:0", 2},
		// The outcome was published before the crash: the redelivered pass
		// sees it and does not run again.
		{"worker", "after-outcome:0", 1},
		{"worker", "after-body:1", 1},
		{"worker", "after-outcome:1", 1},
		{"coordinator", "outcome-start", 1},
		{"coordinator", "outcome-after-record", 1},
		{"coordinator", "outcome-after-index", 1},
		{"coordinator", "decision-after-record", 1},
		{"coordinator", "decision-after-work", 1},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.component, c.point), func(t *testing.T) {
			t.Parallel()
			var calls counter
			h := newBareHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
			hook, crashed := fault.Once(c.point)
			if c.component == "worker" {
				h.startWorker(hook)
				h.startCoordinator(nil)
			} else {
				h.startWorker(nil)
				h.startCoordinator(hook)
			}
			firstPass := c.point == "after-body:0" || c.point == "after-outcome:0" ||
				c.point == "outcome-start" || c.point == "outcome-after-record" || c.point == "outcome-after-index"

			run := h.start("refunds", nil)
			var rec *subjects.Run
			if firstPass {
				<-crashed
				h.restart(c.component)
			}
			rec = h.suspendedAtPass(run, 0)
			// A coordinator that dies mid-decision never answers: stop waiting then.
			dctx, cancel := context.WithCancel(h.ctx())
			defer cancel()
			if !firstPass {
				go func() { <-crashed; cancel() }()
			}
			v, err := h.client.Decide(dctx, DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
				Status: subjects.StatusResolved, Payload: map[string]any{"amount": 5}, DecisionID: "the-decision"})
			if err == nil {
				assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
			} else {
				// The coordinator died before answering; the decision is stored
				// and the replacement handles its redelivery.
				require.ErrorIs(t, err, context.Canceled)
			}
			<-crashed
			if !firstPass {
				h.restart(c.component)
			}

			rec = h.waitFor(run, Finished)
			require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
			// Every work item is acked, so no redelivery is still to come.
			require.Eventually(t, func() bool {
				n, err := h.admin.MsgCount(h.ctx(), jetstream.StreamWork)
				return err == nil && n == 0
			}, 10*time.Second, 20*time.Millisecond)
			assert.JSONEq(t, `{"quote":42,"amount":5,"approver":""}`, string(rec.Result))
			assert.Equal(t, c.steps, calls.get("step"), "journaled step runs")
			assert.Len(t, h.waitEvents(run, subjects.EventSuspended, 1), 1, "one suspension event")
			assert.Len(t, h.waitEvents(run, subjects.EventDecisionAccepted, 1), 1, "decision applied once")
			assert.Len(t, h.replays(run), 1, "one replay scheduled")
			assert.Len(t, h.waitEvents(run, subjects.EventCompleted, 1), 1)
			accepted := 0
			for _, in := range rec.Interrupts {
				if in.Decision != nil {
					accepted++
					assert.Equal(t, "the-decision", in.Decision.DecisionID)
				}
			}
			assert.Equal(t, 1, accepted)
			assert.Equal(t, 1, rec.Pass, "two passes, no more")
		})
	}
}

// restart replaces the abandoned component with a fresh one.
func (h *harness) restart(component string) {
	if component == "worker" {
		h.startWorker(nil)
	} else {
		h.startCoordinator(nil)
	}
}
