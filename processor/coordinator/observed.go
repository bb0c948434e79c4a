package coordinator

import (
	"context"
	"fmt"
	"strconv"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// handleObserved records another role's observation (a notification that
// failed, a request refused) in the audit trail, which only the
// coordinator writes. The entry's type and author come from the subject
// the observation was published on, which NATS permissions let only that
// role use; its time is when the server stored it; it is stored once per
// observation, whatever the observer put in its message id.
func (co *Coordinator) handleObserved(ctx context.Context, m *jetstream.Delivery) error {
	a, err := co.ns.Parse(m.Subject)
	if err == nil && a.Kind != subjects.KindObserved {
		err = fmt.Errorf("%w: %q is not an observation subject", subjects.ErrInvalidSubject, m.Subject)
	}
	if err != nil {
		return co.rejectInput(ctx, m, subjects.NoRun, err)
	}
	ev, err := subjects.DecodeObservation(a.Event, m.Data)
	if err != nil {
		return co.rejectInput(ctx, m, a.Run, err)
	}
	ev.RunID, ev.At = a.Run, m.Time.UTC()
	return co.event(ctx, ev, "obs"+strconv.FormatUint(m.Sequence, 10))
}
