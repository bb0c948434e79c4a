package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// handleObserved records another role's observation (a notification that
// failed, a request refused) in the audit trail, which only the
// coordinator writes. The entry's type and author come from the subject
// the observation was published on, which NATS permissions let only that
// role use; its time is when the server stored it; it is stored once per
// observation, whatever the observer put in its message id, under its run
// only when that run has a record.
func (co *Coordinator) handleObserved(ctx context.Context, m *jetstream.Delivery) error {
	a, err := co.ns.Parse(m.Subject)
	if err == nil && a.Kind != subjects.KindObserved {
		err = fmt.Errorf("%w: %q is not an observation subject", subjects.ErrInvalidSubject, m.Subject)
	}
	if err != nil {
		return co.rejectObservation(ctx, m, subjects.NoRun, err)
	}
	if err := jetstream.CheckPublished(m.Header); err != nil {
		return co.rejectObservation(ctx, m, subjects.NoRun, err)
	}
	ev, err := subjects.DecodeObservation(a.Event, m.Data)
	if err != nil {
		return co.rejectObservation(ctx, m, a.Run, err)
	}
	ev.RunID, ev.At = a.Run, m.Time.UTC()
	if a.Run != subjects.NoRun {
		// Only a run that exists has a trail: an observation about another
		// id (a refused request naming a made-up run, whose id the sender
		// chose) is filed under no run, naming the id it claimed.
		exists, err := co.exists(ctx, a.Run)
		switch {
		case err != nil:
			return err
		case !exists && m.Deliveries < observedRecordTries:
			// The record may lag (a notifier reads a suspension from the
			// stream the coordinator records it from, and may be first).
			return jetstream.RetryAfter(observedRecordWait, fmt.Errorf("run %s has no record yet", a.Run))
		case !exists:
			ev.RunID, ev.Detail = subjects.NoRun, fmt.Sprintf("about run %s, which has no record: %s", a.Run, ev.Detail)
		}
	}
	return co.event(ctx, ev, "obs"+strconv.FormatUint(m.Sequence, 10))
}

// An observation about a run with no record is delivered again until its
// observedRecordTries-th delivery, observedRecordWait apart (about half a
// minute), before it is filed under no run: long enough for a record that
// lags its suspension (a notifier reads the suspension from the stream the
// coordinator records it from; a coordinator restarting, or behind, takes
// longer to record it).
const (
	observedRecordTries = 15
	observedRecordWait  = 2 * time.Second
)
