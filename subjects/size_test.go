package subjects_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/interlockhq/interlock/subjects"
)

func TestDecisionAllowance(t *testing.T) {
	base := subjects.MaxDecisionSize + subjects.DecisionOverhead + subjects.TimerOverhead
	in := subjects.Interrupt{ID: "i", Reason: "r"}
	assert.Equal(t, base, subjects.DecisionAllowance(in, subjects.ExpiryPolicy{}, 0), "one deadline, no reminders")
	assert.Equal(t, base+2*subjects.TimerOverhead, subjects.DecisionAllowance(in, subjects.ExpiryPolicy{}, 2), "two reminders")
	big := json.RawMessage(`"` + strings.Repeat("p", 100<<10) + `"`)
	assert.Equal(t, len(big)+2*subjects.DecisionOverhead+subjects.TimerOverhead,
		subjects.DecisionAllowance(in, subjects.ExpiryPolicy{Action: subjects.ExpiryResolve, Payload: big}, 0),
		"an expiry's own payload larger than a decision")
	esc := subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 60, Times: 3, Approvers: []string{"bob"}}
	assert.Equal(t, base+3*(subjects.TimerOverhead+6)+3*subjects.TimerOverhead, subjects.DecisionAllowance(in, esc, 0),
		"each escalation adds its approvers, its history and one more deadline")
	esc.Times = 1_000_000
	assert.Greater(t, subjects.DecisionAllowance(in, esc, 0), 1<<30, "a million escalations cannot fit any record")
}

func TestRecordBound(t *testing.T) {
	rec := &subjects.Run{RunID: "r", Interrupts: []subjects.InterruptState{
		{Interrupt: subjects.Interrupt{ID: "open"}},
		{Interrupt: subjects.Interrupt{ID: "done"}, Decision: &subjects.Decision{Status: subjects.StatusResolved}},
	}}
	data, _ := json.Marshal(rec)
	one := func(subjects.Interrupt) int { return 1000 }
	assert.Equal(t, len(data)+subjects.RecordMargin+1000, subjects.RecordBound(rec, one), "only open interrupts get an allowance")
}
