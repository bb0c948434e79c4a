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

// TestRecordLimit: a record at the limit has a sealed copy (base64 of the
// JSON and the seal's overhead) that fits, with the room an event keeps
// for its own fields, a message of the server's max payload; four bytes more
// does not (base64 counts in threes). The Python SDK computes the same
// (record_limit).
func TestRecordLimit(t *testing.T) {
	t.Parallel()
	copyOf := func(record int64) int64 { return (record + subjects.SealOverhead + 2) / 3 * 4 }
	for _, mp := range []int64{1 << 20, 8 << 20, 64 << 10} {
		limit := subjects.RecordLimit(mp)
		if copyOf(limit)+subjects.RecordCopyRoom > mp {
			t.Errorf("max payload %d: a record of %d bytes has a copy of %d, over it with %d bytes of room", mp, limit,
				copyOf(limit), subjects.RecordCopyRoom)
		}
		if copyOf(limit+4)+subjects.RecordCopyRoom <= mp {
			t.Errorf("max payload %d: the limit %d leaves room for larger records", mp, limit)
		}
	}
	if got := subjects.RecordLimit(1 << 20); got != 774_115 {
		t.Errorf("subjects.RecordLimit(1 MiB) = %d, the Python SDK's record_limit says 774115", got)
	}
	if got := subjects.RecordLimit(subjects.RecordCopyRoom); got != 0 {
		t.Errorf("subjects.RecordLimit(%d) = %d, want 0", subjects.RecordCopyRoom, got)
	}
}
