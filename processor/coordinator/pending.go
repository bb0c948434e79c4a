package coordinator

import (
	"context"
	"errors"

	"github.com/interlockhq/interlock/processor/rules"
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
	st.VoteSeqs = nil // the record's bookkeeping of redeliveries, not what waits
	return subjects.PendingInterrupt{RunID: rec.RunID, Agent: rec.Agent, ThreadID: rec.ThreadID,
		InterruptState: st, SuspendedAt: rec.UpdatedAt}
}

// unindexDecided follows a put of pending-index entries for the interrupts
// ids of run: it reads the run's record once more and removes the entries
// of those the record shows decided. A decision accepted between the
// record change that opened them and the put (an automated approver
// answering within milliseconds, or another coordinator) sent its removal
// before the entry existed, and the put would list a decided interrupt for
// good; a decision accepted after this read removes the entry itself, as
// its removal goes out after the put. Only a decision removes an entry: a
// read from a replica that is behind can then keep one a moment longer,
// never drop one that still waits.
func (co *Coordinator) unindexDecided(ctx context.Context, run string, ids []string) error {
	rec, err := co.load(ctx, run)
	if errors.Is(err, store.ErrForeignRecord) {
		return nil // no record to say what was decided: the entries stay
	}
	if err != nil || rec == nil {
		return err
	}
	var gone []store.PendingRef
	for _, id := range ids {
		if i := rules.Find(rec, id); i < 0 || rec.Interrupts[i].Decision == nil {
			continue
		}
		// Usually the decision's own removal came after the put: then
		// there is nothing to remove, and no marker to write.
		if indexed, err := co.store.Indexed(ctx, run, id); err != nil {
			return err
		} else if indexed {
			gone = append(gone, store.PendingRef{RunID: run, InterruptID: id})
		}
	}
	if len(gone) == 0 {
		return nil
	}
	co.cfg.Logger.Debug("pending index entries of decided interrupts removed after their put", "run", run, "entries", len(gone))
	return co.store.Commit(ctx, store.Effects{Unindex: gone})
}
