package coordinator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// TestDecisionRacingTheIndexEntry: a decision handled while the handler of
// the input that puts the interrupt's pending-index entry stands between
// the record and the put (an automated approver answering within
// milliseconds) used to leave the decided interrupt listed as pending for
// good: its removal went out before the entry was put. Each case decides
// from inside the fault hook at that point; with crash, the handler then
// dies at the next point and its input is delivered again.
func TestDecisionRacingTheIndexEntry(t *testing.T) {
	t.Parallel()
	escalates := expiring
	escalates.Approvers = []string{"alice"}
	escalates.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 60, Approvers: []string{"boss"}}
	tests := []struct {
		name string
		// held is the point where the decision is made, died the one where
		// the handler then dies (none: it does not).
		held, died string
	}{
		{name: "suspension", held: "outcome-after-record"},
		{name: "suspension, dying after the put", held: "outcome-after-record", died: "outcome-after-index"},
		{name: "escalation", held: "timer-after-record"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			in, approver := open, ""
			if tc.held == "timer-after-record" {
				in, approver = escalates, "boss"
			}
			decided, died := false, false
			var decideErr error
			e.withFault(func(point string) bool {
				switch {
				case point == tc.held && !decided:
					decided = true
					decideErr = e.co.handleDecision(ctx(t), e.decision("r1", approver, resolve("d1", in.ID, ""), ""))
				case point == tc.died && !died:
					died = true
					return true
				}
				return false
			})
			if tc.held == "timer-after-record" {
				e.suspend("r1", 0, in)
				e.now = deadline
				require.NoError(t, handleUntilDone(t, e.co.handleTimer, e.timer("r1", in.ID, subjects.TimerExpire)))
			} else {
				require.NoError(t, handleUntilDone(t, e.co.handleOutcome, e.suspension("r1", 0, in)))
			}
			require.True(t, decided, "the decision was made at %s", tc.held)
			require.NoError(t, decideErr)
			assert.Equal(t, tc.died != "", died)
			rec := e.record("r1")
			require.NotNil(t, rec.Interrupts[0].Decision, "the decision is recorded")
			assert.Equal(t, subjects.RunResuming, rec.Status)
			pending, err := store.AllPending(ctx(t), e.st)
			require.NoError(t, err)
			assert.Empty(t, pending, "a decided interrupt is not listed as pending")
			var suspended int
			for _, ev := range e.events("r1") {
				if ev.Type == subjects.EventSuspended {
					suspended++
				}
			}
			assert.Equal(t, 1, suspended, "one suspension event")
		})
	}
}
