package coordinator

import (
	"context"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

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

// indexed follows a put of entries of run into the pending index: it reads
// the run's record once more and removes again the entries whose
// interrupts no longer wait. A decision accepted between the record change
// that opened them and the put (an automated approver answering within
// milliseconds, or another coordinator) sent its removal before the entry
// existed, and the put would list a decided interrupt for good; a decision
// accepted after this read removes the entry itself, as its removal goes
// out after the put.
func (co *Coordinator) indexed(ctx context.Context, run string, entries []subjects.PendingInterrupt) error {
	rec, err := co.load(ctx, run)
	if err != nil {
		return err
	}
	waiting := map[string]bool{}
	if rec != nil {
		for _, in := range rec.Pending() {
			waiting[in.ID] = true
		}
	}
	var gone []store.PendingRef
	for _, e := range entries {
		if !waiting[e.ID] {
			gone = append(gone, store.PendingRef{RunID: run, InterruptID: e.ID})
		}
	}
	if len(gone) == 0 {
		return nil
	}
	co.cfg.Logger.Debug("pending index entries decided while they were put; removed again", "run", run, "entries", len(gone))
	return co.store.Commit(ctx, store.Effects{Unindex: gone})
}
