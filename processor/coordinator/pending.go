package coordinator

import "github.com/interlockhq/interlock/subjects"

// pendingEntries are the pending index's entries of rec's waiting
// interrupts. The index is written with the effects of the record change
// that opens or closes an interrupt, so listing what waits costs what
// waits, not every run ever recorded.
func pendingEntries(rec *subjects.Run) []subjects.PendingInterrupt {
	var out []subjects.PendingInterrupt
	for _, in := range rec.Pending() {
		out = append(out, pendingEntry(rec, in))
	}
	return out
}

// pendingEntry is st's entry in the pending index.
func pendingEntry(rec *subjects.Run, st subjects.InterruptState) subjects.PendingInterrupt {
	return subjects.PendingInterrupt{RunID: rec.RunID, Agent: rec.Agent, ThreadID: rec.ThreadID,
		InterruptState: st, SuspendedAt: rec.UpdatedAt}
}
