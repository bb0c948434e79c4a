package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// The coordinator's store carries each record it writes, sealed, in the
// first event its change writes (store.JetStream.UseRecordKey), and puts a
// record back from those copies when an answer the server stored for
// another user replaced it. A runs bucket kept in memory
// (jetstream.Config.RecordsStorage) costs no fsync per record write: there
// the copies are also what records the bucket loses are put back from.

// recordSealer is a store that can keep the records' copies in the trail.
type recordSealer interface {
	UseRecordKey(key []byte, inMemory, putBack bool)
	SealedBefore(ctx context.Context) (bool, error)
	RestoreRecords(ctx context.Context, by string, now time.Time, announce func(store.Restored) error) (store.Restored, error)
}

// sealRecords decides whether this coordinator puts back records the runs
// bucket lost (co.restores) and keeps its records' copies with the rules
// of a bucket in memory (co.sealed), and gives the store the record key:
// every coordinator seals copies. It keeps the memory rules when the bucket
// keeps its records in memory; it puts lost records back then, and when
// the bucket is on disk in a deployment that kept records in memory before
// (lost with a restart, the bucket created again on disk by `interlock
// provision`). A deployment that never did reads one event at start and
// nothing more, and writes no marker.
func (co *Coordinator) sealRecords(ctx context.Context) error {
	s, ok := co.store.(recordSealer)
	if !ok || co.client == nil {
		return nil
	}
	mem, err := co.client.BucketInMemory(ctx, jetstream.RunsBucket)
	if err != nil {
		return err
	}
	co.sealed, co.restores = mem, mem
	if !mem {
		if co.restores, err = s.SealedBefore(ctx); err != nil {
			return err
		}
	}
	s.UseRecordKey(co.ids.RecordKey(), mem, co.restores)
	return nil
}

// restoreRecords puts the records back when the runs bucket has no marker
// saying it holds them all (store.JetStream.RestoreRecords), creating the
// bucket first when it is missing and this coordinator provisions, and
// reports whether the bucket is whole, and the marker that says so
// (store.Restored.Marker; "" when this coordinator puts no records back). The index check
// runs it before its own, and builds the index from the records only once
// they are whole, and only if they were not lost again under the build.
func (co *Coordinator) restoreRecords(ctx context.Context, by string) (bool, string, error) {
	s, ok := co.store.(recordSealer)
	if !ok || !co.restores {
		return true, "", nil
	}
	start := time.Now()
	// Audited before the bucket is marked whole, and required: the event
	// is also how a coordinator finds, after the bucket was created again
	// on disk, that this deployment kept records in memory (SealedBefore).
	announce := func(r store.Restored) error {
		took := time.Since(start).Round(time.Millisecond)
		co.cfg.Logger.Warn("run records put back from the audit trail (a runs bucket that keeps, or kept, them in memory: new or emptied)",
			"records", r.Runs, "took", took)
		ev := subjects.Event{Type: subjects.EventRecordsRestored, RunID: subjects.NoRun,
			Detail: fmt.Sprintf("%d run records put back from the audit trail in %s", r.Runs, took)}
		return co.event(ctx, ev, "records:"+by+":"+newNonce())
	}
	r, err := s.RestoreRecords(ctx, by, co.now(), announce)
	if errors.Is(err, jetstream.ErrNotProvisioned) && co.client.Provisioner() {
		storage := jetstream.FileStorage
		if co.sealed {
			storage = jetstream.MemoryStorage
		}
		if perr := co.client.ProvisionRuns(ctx, storage); perr != nil {
			return false, "", fmt.Errorf("provision the runs bucket: %w", perr)
		}
		r, err = s.RestoreRecords(ctx, by, co.now(), announce)
	}
	if err != nil {
		return false, "", fmt.Errorf("restore the run records: %w", err)
	}
	return r.Whole, r.Marker, nil
}
