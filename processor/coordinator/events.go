package coordinator

import (
	"context"
	"errors"
	"strconv"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// event publishes an event once: dedup says what it is about, so
// publishing it again after a crash is a no-op.
func (co *Coordinator) event(ctx context.Context, ev subjects.Event, dedup string) error {
	return co.store.Commit(ctx, store.Effects{Events: []store.Event{co.newEvent(ev, dedup)}})
}

// newEvent is ev, versioned and timed now unless it has a time, about dedup.
func (co *Coordinator) newEvent(ev subjects.Event, dedup string) store.Event {
	ev.Version = subjects.Version
	if ev.At.IsZero() {
		ev.At = co.now()
	}
	return store.Event{Event: ev, Dedup: dedup}
}

// rejectInput records bad input on the events subject and dead-letters it:
// the message and the reason are kept.
func (co *Coordinator) rejectInput(ctx context.Context, m *jetstream.Delivery, run string, err error) error {
	return co.refuseInput(ctx, m, run, "seq", err)
}

// rejectObservation is rejectInput for an observation: its entry's id
// names it obs<N>, as the entry recording one does. Its stream's sequences
// run alongside the others', so under seq<N> a refused outcome and a
// refused observation at the same sequence shared an id, and the second
// entry was dropped as a duplicate (a notifier could drop the audit of a
// refused outcome on purpose).
func (co *Coordinator) rejectObservation(ctx context.Context, m *jetstream.Delivery, run string, err error) error {
	return co.refuseInput(ctx, m, run, "obs", err)
}

func (co *Coordinator) refuseInput(ctx context.Context, m *jetstream.Delivery, run, key string, err error) error {
	ev := subjects.Event{Type: subjects.EventInputRejected, RunID: run, Code: subjects.CodeOf(err),
		Detail: err.Error(), Subject: m.Subject}
	switch {
	case errors.Is(err, subjects.ErrInvalidSubject):
		ev.Code = subjects.CodeInvalidSubject
	case errors.Is(err, schema.ErrUnsafe):
		ev.Code = subjects.CodeSchemaUnsafe
	}
	if perr := co.event(ctx, ev, key+strconv.FormatUint(m.Sequence, 10)); perr != nil {
		return perr
	}
	co.cfg.Logger.Warn("input rejected", "subject", m.Subject, "code", ev.Code, "error", err)
	return jetstream.DeadLetter(err)
}
