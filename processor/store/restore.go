package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// A runs bucket kept in memory loses its records when the server restarts
// (on a cluster, when every replica does). The audit trail keeps a sealed
// copy of each record as its change left it (Effects.Record), so a store
// that seals records (SealRecords) puts them back: one run when it is read
// and missing (restoreRun), every run when the bucket has no marker saying
// it is whole (RestoreRecords).

// recordsMarkerKey is the key of the runs bucket's marker: not a run id
// (run ids are one token), and a delete marker, which every reader of the
// bucket skips.
const recordsMarkerKey = subjects.NoRun + ".records"

// The states of the runs bucket's marker, an IndexMarker under
// recordsMarkerKey: RecordsRestoring while a coordinator (By) puts records
// back, RecordsWhole once it has.
const (
	RecordsRestoring = "restoring"
	RecordsWhole     = "whole"
)

// restoreStale is how long a claim on putting records back stands before
// another coordinator takes it over (putting back is idempotent).
const restoreStale = 30 * time.Second

// sealedCopy is what the store reads of an event: its sealed record.
type sealedCopy struct {
	Record string `json:"record"`
}

// copyIn opens the sealed record an event message carries, nil when it
// carries none or one that does not open under the store's key.
func (s *JetStream) copyIn(run string, data []byte) *subjects.Run {
	if !bytes.Contains(data, []byte(`"record"`)) {
		return nil
	}
	var c sealedCopy
	if json.Unmarshal(data, &c) != nil || c.Record == "" {
		return nil
	}
	r, err := OpenRecord(s.sealKey, run, c.Record)
	if err != nil {
		return nil
	}
	return r
}

// latestCopy is the copy of run's record with the most writes its events
// carry, nil when they carry none.
func (s *JetStream) latestCopy(ctx context.Context, run string) (*subjects.Run, error) {
	filter, err := s.c.Namespace().RunEvents(run)
	if err != nil {
		return nil, err
	}
	// A new run has no events: one read of the last (from the stream's
	// leader) says so without reading the trail.
	last, err := s.c.LeaderLast(ctx, jetstream.StreamEvents, filter)
	if err != nil {
		return nil, fmt.Errorf("read run %s's last event: %w", run, err)
	}
	if last == 0 {
		return nil, nil
	}
	var best *subjects.Run
	for after := uint64(0); ; {
		msgs, err := s.c.Messages(ctx, jetstream.StreamEvents, filter, after+1, eventsBatch)
		if err != nil {
			return nil, fmt.Errorf("read run %s's record copies: %w", run, err)
		}
		for _, m := range msgs {
			if r := s.copyIn(run, m.Data); r != nil && (best == nil || r.Writes > best.Writes) {
				best = r
			}
			after = m.Sequence
		}
		if len(msgs) < eventsBatch {
			if after < last {
				// Direct gets may be answered by a replica that lags.
				return nil, fmt.Errorf("read run %s's record copies: %w: read up to %d of %d", run, errLagging, after, last)
			}
			return best, nil
		}
	}
}

// errLagging: a read of the trail ended before the last event the stream's
// leader holds (a replica answered, behind): the caller tries again.
var errLagging = errors.New("the trail's reader lags its leader")

// restoreRun reads run's record after the bucket had none: the latest copy
// in its events, put back, or an error matching ErrNotFound when its events
// carry none (a new run).
func (s *JetStream) restoreRun(ctx context.Context, run string) (*subjects.Run, uint64, error) {
	best, err := s.latestCopy(ctx, run)
	if err != nil {
		return nil, 0, err
	}
	if best == nil {
		return nil, 0, fmt.Errorf("run %s: %w", run, ErrNotFound)
	}
	if _, err := s.putBack(ctx, best); err != nil {
		return nil, 0, err
	}
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return nil, 0, err
	}
	data, rev, err := b.Entry(ctx, run)
	if err != nil {
		return nil, 0, err
	}
	return decodeRun(run, data, rev)
}

// putBack stores copy unless the bucket holds the record with as many
// writes or more; it reports whether it stored it.
func (s *JetStream) putBack(ctx context.Context, copy *subjects.Run) (bool, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return false, err
	}
	data, err := json.Marshal(copy)
	if err != nil {
		return false, err
	}
	for range MaxAttempts {
		var rev uint64
		cur, at, err := b.Entry(ctx, copy.RunID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return false, err
		default:
			have, _, err := decodeRun(copy.RunID, cur, at)
			if err != nil {
				return false, err
			}
			if have.Writes >= copy.Writes {
				return false, nil
			}
			rev = at
		}
		if _, err := b.Update(ctx, copy.RunID, data, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("put back run %s: %w after %d attempts", copy.RunID, ErrContended, MaxAttempts)
}

// RestoreRecords puts back, when the runs bucket has no marker saying it
// is whole (or a claim on this older than restoreStale), each run's latest
// record copy from the whole audit trail, then marks the bucket whole.
// by names the caller in its claim. It returns how many runs' records it
// put back, and whether it ran; with a claim of another caller standing it
// does nothing. A store that does not seal records does nothing.
func (s *JetStream) RestoreRecords(ctx context.Context, by string, now time.Time) (int, bool, error) {
	if !s.sealing() {
		return 0, false, nil
	}
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return 0, false, err
	}
	var last uint64
	switch body, seq, err := b.Marker(ctx, recordsMarkerKey); {
	case errors.Is(err, ErrNotFound):
		// No marker, or no bucket: a missing bucket is the caller's to
		// create (ErrNotProvisioned).
		if _, err := s.c.BucketInMemory(ctx, jetstream.RunsBucket); err != nil {
			return 0, false, err
		}
	case err != nil:
		return 0, false, err
	default:
		var m IndexMarker
		if err := json.Unmarshal(body, &m); err != nil {
			return 0, false, fmt.Errorf("runs bucket marker: %w", err)
		}
		if m.State == RecordsWhole || now.Sub(m.At) < restoreStale {
			return 0, false, nil
		}
		last = seq
	}
	mark := func(state string) error {
		body, err := json.Marshal(IndexMarker{State: state, By: by, At: now})
		if err != nil {
			return err
		}
		last, err = b.PutMarker(ctx, recordsMarkerKey, body, last)
		return err
	}
	if err := mark(RecordsRestoring); errors.Is(err, ErrConflict) {
		return 0, false, nil // another caller claimed it first
	} else if err != nil {
		return 0, false, err
	}
	// writes is the most writes of a copy put back so far, by run.
	writes := map[string]uint64{}
	restored := map[string]bool{}
	filter := s.c.Namespace().AllEvents()
	for after := uint64(0); ; {
		msgs, err := s.c.Messages(ctx, jetstream.StreamEvents, filter, after+1, eventsBatch)
		if err != nil {
			return len(restored), true, fmt.Errorf("read the record copies: %w", err)
		}
		for _, m := range msgs {
			after = m.Sequence
			a, err := s.c.Namespace().Parse(m.Subject)
			if err != nil || a.Run == subjects.NoRun {
				continue
			}
			r := s.copyIn(a.Run, m.Data)
			if r == nil || r.Writes <= writes[a.Run] {
				continue
			}
			writes[a.Run] = r.Writes
			put, err := s.putBack(ctx, r)
			if err != nil {
				return len(restored), true, err
			}
			if put {
				restored[a.Run] = true
			}
		}
		if len(msgs) < eventsBatch {
			break
		}
	}
	// Marked whole only if the marker is still this claim: a bucket lost
	// again meanwhile has no marker, and the mark fails.
	if err := mark(RecordsWhole); err != nil {
		return len(restored), true, fmt.Errorf("mark the runs bucket whole: %w", err)
	}
	return len(restored), true, nil
}
