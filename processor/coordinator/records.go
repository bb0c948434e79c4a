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

// A runs bucket kept in memory (jetstream.Config.RecordsStorage) costs no
// fsync per record write: the coordinator's store carries each record,
// sealed, in the first event its change writes, and puts records back from
// those copies when the bucket loses them (store.JetStream.UseRecordKey).

// recordSealer is a store that can keep the records' copies in the trail.
type recordSealer interface {
	UseRecordKey(key []byte, inMemory bool)
	SealedBefore(ctx context.Context) (bool, error)
	RestoreRecords(ctx context.Context, by string, now time.Time) (store.Restored, error)
}

// sealRecords gives the store the record key, to seal records with when
// the runs bucket keeps them in memory, and sets co.restores: whether this
// coordinator puts back records the bucket lost. It does when it seals,
// and when the bucket is on disk in a deployment that kept records in
// memory before (lost with a restart, the bucket created again on disk
// by `interlock provision`); a deployment that never did reads nothing
// more and writes no marker.
func (co *Coordinator) sealRecords(ctx context.Context) error {
	s, ok := co.store.(recordSealer)
	if !ok || co.client == nil {
		return nil
	}
	mem, err := co.client.BucketInMemory(ctx, jetstream.RunsBucket)
	if err != nil {
		return err
	}
	s.UseRecordKey(co.ids.RecordKey(), mem)
	co.sealed, co.restores = mem, mem
	if !mem {
		co.restores, err = s.SealedBefore(ctx)
	}
	return err
}

// restoreRecords puts the records back when the runs bucket has no marker
// saying it holds them all (store.JetStream.RestoreRecords), creating the
// bucket first when it is missing and this coordinator provisions, and
// reports whether the bucket is whole. The index check runs it before its
// own, and builds the index from the records only once they are whole.
func (co *Coordinator) restoreRecords(ctx context.Context, by string) (bool, error) {
	s, ok := co.store.(recordSealer)
	if !ok || !co.restores {
		return true, nil
	}
	start := time.Now()
	r, err := s.RestoreRecords(ctx, by, co.now())
	if errors.Is(err, jetstream.ErrNotProvisioned) && co.client.Provisioner() {
		storage := jetstream.FileStorage
		if co.sealed {
			storage = jetstream.MemoryStorage
		}
		if perr := co.client.ProvisionRuns(ctx, storage); perr != nil {
			return false, fmt.Errorf("provision the runs bucket: %w", perr)
		}
		r, err = s.RestoreRecords(ctx, by, co.now())
	}
	if err != nil {
		return false, fmt.Errorf("restore the run records: %w", err)
	}
	if !r.Ran {
		return r.Whole, nil
	}
	n := r.Runs
	took := time.Since(start).Round(time.Millisecond)
	co.cfg.Logger.Warn("run records put back from the audit trail (a runs bucket in memory, new or emptied)",
		"records", n, "took", took)
	ev := subjects.Event{Type: subjects.EventRecordsRestored, RunID: subjects.NoRun,
		Detail: fmt.Sprintf("%d run records put back from the audit trail in %s", n, took)}
	if err := co.event(ctx, ev, "records:"+by+":"+newNonce()); err != nil {
		co.cfg.Logger.Error("audit the records' restore", "error", err)
	}
	return true, nil
}
