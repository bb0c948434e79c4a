package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// A runs bucket kept in memory (jetstream.Config.RecordsStorage) costs no
// fsync per record write: the coordinator's store carries each record,
// sealed, in the first event its change writes, and puts records back from
// those copies when the bucket loses them (store.JetStream.SealRecords).

// recordSealer is a store that can keep the records' copies in the trail.
type recordSealer interface {
	SealRecords(key []byte)
	RestoreRecords(ctx context.Context, by string, now time.Time) (int, bool, error)
}

// sealRecords makes the store seal records when the runs bucket keeps them
// in memory; it reports whether it does.
func (co *Coordinator) sealRecords(ctx context.Context) (bool, error) {
	s, ok := co.store.(recordSealer)
	if !ok || co.client == nil {
		return false, nil
	}
	mem, err := co.client.BucketInMemory(ctx, jetstream.RunsBucket)
	if err != nil || !mem {
		return false, err
	}
	s.SealRecords(co.ids.RecordKey())
	return true, nil
}

// restoreRecords puts the records back when the runs bucket has no marker
// saying it holds them all (store.JetStream.RestoreRecords), creating the
// bucket first when it is missing and this coordinator provisions. The
// index check runs it before its own, so that an index built from the
// records finds them.
func (co *Coordinator) restoreRecords(ctx context.Context, by string) error {
	s, ok := co.store.(recordSealer)
	if !ok || !co.sealed {
		return nil
	}
	start := time.Now()
	n, ran, err := s.RestoreRecords(ctx, by, co.now())
	if errors.Is(err, jetstream.ErrNotProvisioned) && co.client.Provisioner() {
		if perr := co.client.ProvisionRuns(ctx); perr != nil {
			return fmt.Errorf("provision the runs bucket: %w", perr)
		}
		n, ran, err = s.RestoreRecords(ctx, by, co.now())
	}
	if err != nil {
		return fmt.Errorf("restore the run records: %w", err)
	}
	if !ran {
		return nil
	}
	took := time.Since(start).Round(time.Millisecond)
	co.cfg.Logger.Warn("run records put back from the audit trail (a runs bucket in memory, new or emptied)",
		"records", n, "took", took)
	ev := subjects.Event{Type: subjects.EventRecordsRestored, RunID: subjects.NoRun,
		Detail: fmt.Sprintf("%d run records put back from the audit trail in %s", n, took)}
	if err := co.event(ctx, ev, "records:"+by+":"+newNonce()); err != nil {
		co.cfg.Logger.Error("audit the records' restore", "error", err)
	}
	return nil
}
