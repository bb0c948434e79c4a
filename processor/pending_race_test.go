package processor

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestDecisionRacingTheIndexEntry: a decision handled between the
// suspension's record and its pending-index entry (an automated approver
// answering the suspension within milliseconds) used to leave the decided
// interrupt listed as pending for good: its removal went out before the
// entry was put. The coordinator's suspension handler is held right after
// the record while the decision is accepted, then let go; in the second
// case it also dies right after the put, and its replacement handles the
// redelivered suspension.
func TestDecisionRacingTheIndexEntry(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash after the put %v", crash), func(t *testing.T) {
			t.Parallel()
			var calls counter
			h := newBareHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
			reached, release, crashed := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var held, died sync.Once
			h.startWorker(nil)
			h.startCoordinator(func(point string) bool {
				switch point {
				case "outcome-after-record":
					held.Do(func() { close(reached); <-release })
				case "outcome-after-index":
					picked := false
					if crash {
						died.Do(func() { picked = true; close(crashed) })
					}
					return picked
				}
				return false
			})
			run := h.start("refunds", nil)
			<-reached
			rec := h.suspendedAtPass(run, 0)
			h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 5})
			close(release)
			if crash {
				<-crashed
				h.restart("coordinator")
			}

			rec = h.waitFor(run, Finished)
			require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
			// Every outcome handled and acked, the redelivered suspension
			// included (the completion can be handled before it).
			require.Eventually(t, func() bool {
				st, err := h.admin.ConsumerState(h.ctx(), jetstream.StreamRuns, "coordinator_runs")
				return err == nil && st.Pending == 0 && st.AckPending == 0
			}, waitLimit, 20*time.Millisecond)
			h.assertNotPending(run)
			assert.Len(t, h.waitEvents(run, subjects.EventSuspended, 1), 1, "one suspension event")
		})
	}
}

// TestDecisionRacingTheEscalatedEntry: the same race for an escalation,
// whose re-put of the entry (new deadline, new approvers) follows its
// record; the escalation approver decides while the timer's handler is
// held between the two.
func TestDecisionRacingTheEscalatedEntry(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, map[string]AgentFunc{"a": gated(func() Request {
		return Request{Timeout: time.Second, Approvers: []string{"alice"},
			OnExpiry: Expiry{Action: subjects.ExpiryEscalate, Approvers: []string{"boss"}, Extend: time.Minute}}
	})})
	reached, release := make(chan struct{}), make(chan struct{})
	var held sync.Once
	h.startWorker(nil)
	h.startCoordinator(func(point string) bool {
		if point == "timer-after-record" {
			held.Do(func() { close(reached); <-release })
		}
		return false
	})
	run := h.start("a", nil)
	<-reached
	rec := h.waitFor(run, func(r *subjects.Run) bool { return len(r.Pending()) == 1 && r.Pending()[0].Escalations == 1 })
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusResolved, Payload: "ok", Approver: "boss"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome, "%+v", v)
	close(release)

	assert.JSONEq(t, `{"payload":"ok","by":"boss"}`, string(h.waitFor(run, Finished).Result))
	h.waitEvents(run, subjects.EventEscalated, 1) // the held handler has gone on past the re-put
	require.Eventually(t, func() bool {
		st, err := h.admin.ConsumerState(h.ctx(), jetstream.StreamTimers, "coordinator_timers")
		return err == nil && st.AckPending == 0
	}, waitLimit, 20*time.Millisecond)
	h.assertNotPending(run)
}

// assertNotPending checks that the pending index lists nothing of run.
func (h *harness) assertNotPending(run string) {
	h.t.Helper()
	pending, err := h.client.Pending(h.ctx())
	require.NoError(h.t, err)
	for _, p := range pending {
		assert.NotEqual(h.t, run, p.RunID, "a decided interrupt is still listed as pending: %s", p.ID)
	}
}
