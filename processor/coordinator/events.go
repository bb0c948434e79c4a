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
	ev := subjects.Event{Type: subjects.EventInputRejected, RunID: run, Code: subjects.CodeOf(err),
		Detail: err.Error(), Subject: m.Subject}
	switch {
	case errors.Is(err, subjects.ErrInvalidSubject):
		ev.Code = subjects.CodeInvalidSubject
	case errors.Is(err, schema.ErrUnsafe):
		ev.Code = subjects.CodeSchemaUnsafe
	}
	if perr := co.event(ctx, ev, "seq"+strconv.FormatUint(m.Sequence, 10)); perr != nil {
		return perr
	}
	co.cfg.Logger.Warn("input rejected", "subject", m.Subject, "code", ev.Code, "error", err)
	return jetstream.DeadLetter(err)
}
