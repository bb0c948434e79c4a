package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// DefaultTopologyInterval is how often a running coordinator checks, by
// default, that the streams and buckets keep what was provisioned.
const DefaultTopologyInterval = time.Minute

// topologyTimeout bounds one check.
const topologyTimeout = 30 * time.Second

// topologyWatch checks that the streams and buckets keep what was
// provisioned (jetstream.TopologyCheck, the one rule) and raises the alert
// when they do not: an error log, the interlock_topology_drift gauge and a
// topology_drift audit event, once per distinct finding.
type topologyWatch struct {
	co    *Coordinator
	check *jetstream.TopologyCheck
	mu    sync.Mutex
	// reported is the finding last audited; "" while intact.
	reported string
	// pendingMissing says the last check found the pending index's bucket,
	// and only it, missing.
	pendingMissing bool
}

func newTopologyWatch(co *Coordinator) *topologyWatch {
	return &topologyWatch{co: co, check: co.client.NewTopologyCheck()}
}

// start is the check at start: a drift is raised and returned as a
// *jetstream.DriftError, a missing stream as ErrNotProvisioned.
func (w *topologyWatch) start(ctx context.Context) error {
	drifts, err := w.check.Check(ctx)
	if err != nil {
		return fmt.Errorf("check streams and buckets: %w", err)
	}
	if len(drifts) > 0 {
		derr := &jetstream.DriftError{Drifts: drifts}
		w.alert(ctx, len(drifts), derr.Error())
		return derr
	}
	w.co.metrics.drift.Set(0)
	return nil
}

// tick is one check while running.
func (w *topologyWatch) tick(ctx context.Context) {
	drifts, err := w.check.Check(ctx)
	rebuilds := w.rebuilds(err)
	switch {
	case len(drifts) > 0:
		w.alert(ctx, len(drifts), (&jetstream.DriftError{Drifts: drifts}).Error())
	case rebuilds:
		w.co.cfg.Logger.Warn("the pending index is missing (a memory-backed index lost with a server restart); "+
			"the index check creates it again and builds it from the run records", "error", err)
	case errors.Is(err, jetstream.ErrNotProvisioned):
		w.alert(ctx, 1, err.Error())
	case err != nil:
		w.co.cfg.Logger.Warn("topology check failed", "error", err)
	default:
		w.mu.Lock()
		if w.reported != "" {
			w.co.cfg.Logger.Info("streams and buckets keep what was provisioned again")
			w.reported = ""
		}
		w.mu.Unlock()
		w.co.metrics.drift.Set(0)
	}
}

// rebuilds reports whether err is a pending index about to be created
// again: its bucket, and only it, missing (a memory-backed index lost with
// a single server's restart), this coordinator provisions it again at its
// next index check (provisionIndex, every IndexInterval), and the last
// topology check did not find it missing already. A bucket that stays
// missing is an alert like any other.
func (w *topologyWatch) rebuilds(err error) bool {
	var missing *jetstream.MissingError
	rebuilt := []string{w.co.client.BucketStreamName(jetstream.PendingBucket)}
	if w.co.sealed {
		// Records in memory are lost with the index, and put back by the
		// same check.
		rebuilt = append(rebuilt, w.co.client.BucketStreamName(jetstream.RunsBucket))
	}
	only := errors.As(err, &missing) && len(missing.Streams) > 0 &&
		!slices.ContainsFunc(missing.Streams, func(s string) bool { return !slices.Contains(rebuilt, s) })
	w.mu.Lock()
	again := w.pendingMissing
	w.pendingMissing = only
	w.mu.Unlock()
	return only && !again && w.co.client.Provisioner() && w.co.cfg.IndexInterval > 0
}

// alert raises a finding of n drifted fields: logged every time it is
// found, audited once (and once across coordinators, by its message id).
func (w *topologyWatch) alert(ctx context.Context, n int, detail string) {
	w.co.metrics.drift.Set(float64(n))
	w.co.cfg.Logger.Error("streams or buckets changed since provisioned", "drifts", n, "error", detail)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reported == detail {
		return
	}
	sum := sha256.Sum256([]byte(detail))
	ev := subjects.Event{Type: subjects.EventTopologyDrift, RunID: subjects.NoRun, Detail: detail}
	if err := w.co.event(ctx, ev, "topology:"+hex.EncodeToString(sum[:12])); err != nil {
		w.co.cfg.Logger.Error("audit topology drift", "error", err)
		return
	}
	w.reported = detail
}

// run checks every interval until the returned stop; a negative interval
// never checks.
func (w *topologyWatch) run(interval time.Duration) (stop func()) {
	if interval < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				cctx, ccancel := context.WithTimeout(ctx, topologyTimeout)
				w.tick(cctx)
				ccancel()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
