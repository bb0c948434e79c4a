package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// The pending index is derived from the run records: it lists what waits so
// that a listing costs what it returns. It lives in memory by default
// (jetstream.Config.PendingStorage), where its writes cost no fsync, so a
// server restart (or, on a cluster, a restart of every replica) loses it.
// Its marker (store.IndexMarker), kept in the index itself, is lost with
// it; a coordinator that finds no marker builds the index again from the
// records, and keeps checking while it runs.

// DefaultIndexInterval is how often a running coordinator checks, by
// default, that the pending index is whole.
const DefaultIndexInterval = 2 * time.Second

// Claims on a build: a coordinator building the index renews its claim
// every indexRenew, so another coordinator takes the build over only from
// one silent for indexStale (it stopped or lost its connection). Renewing
// is also how a build finds that the index was lost again under it.
const (
	indexRenew = 5 * time.Second
	indexStale = 30 * time.Second
)

// errIndexLost is a build's error when the index lost its marker (lost
// again) or another coordinator took the build over while it ran.
var errIndexLost = errors.New("the pending index changed under its build")

// indexKeeper builds the pending index when it is found without its
// marker; one build at a time per coordinator.
type indexKeeper struct {
	co *Coordinator
	mu sync.Mutex
	// id names this coordinator in its claims.
	id string
}

// check builds the index if it has no marker, or a stale claim of
// another build. It returns whether it built the index.
func (k *indexKeeper) check(ctx context.Context) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, seq, err := k.co.store.IndexMarker(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		seq = 0
		if perr := k.co.provisionIndex(ctx); perr != nil {
			return false, perr
		}
	case err != nil:
		return false, fmt.Errorf("read the pending index's marker: %w", err)
	case m.State == store.IndexBuilt:
		return false, nil
	case m.State == store.IndexBuilding && m.By != k.id && k.co.now().Sub(m.At) < indexStale:
		return false, nil // another coordinator is building it
	}
	return true, k.build(ctx, seq)
}

// build claims the build (the marker still at seq), puts the entries of
// every run waiting, and marks the index built, all with compare-and-set
// on the marker: if the index is lost meanwhile, or another coordinator
// takes the build over, the marker is not at the sequence this build last
// wrote, and the build stops without marking the index built.
func (k *indexKeeper) build(ctx context.Context, seq uint64) error {
	co := k.co
	start := time.Now()
	claim := func(state string) error {
		next, err := co.store.PutIndexMarker(ctx, store.IndexMarker{State: state, By: k.id, At: co.now()}, seq)
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: %w", errIndexLost, err)
		}
		if err != nil {
			return fmt.Errorf("pending index marker: %w", err)
		}
		seq = next
		return nil
	}
	if err := claim(store.IndexBuilding); err != nil {
		return err
	}
	co.cfg.Logger.Warn("pending index has no marker (new, or lost with a server restart): building it from the run records")
	renewed, runs, entries := time.Now(), 0, 0
	for after := uint64(0); ; {
		page, next, err := co.store.RunsPage(ctx, after, indexPage)
		if err != nil {
			return fmt.Errorf("build the pending index: %w", err)
		}
		for _, rec := range page {
			n, err := co.indexRun(ctx, rec)
			if err != nil {
				return fmt.Errorf("build the pending index: %w", err)
			}
			entries += n
		}
		runs += len(page)
		if time.Since(renewed) > indexRenew {
			if err := claim(store.IndexBuilding); err != nil {
				return err
			}
			renewed = time.Now()
		}
		if next == 0 {
			break
		}
		after = next
	}
	if err := claim(store.IndexBuilt); err != nil {
		return err
	}
	co.metrics.indexBuilds.Inc()
	co.cfg.Logger.Warn("pending index built from the run records", "runs", runs, "entries", entries,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// indexPage is how many records a build reads at once.
const indexPage = 256

// indexRun puts the entries of rec's waiting interrupts into the index and
// returns how many.
func (co *Coordinator) indexRun(ctx context.Context, rec *subjects.Run) (int, error) {
	put := pendingEntries(rec)
	if len(put) == 0 {
		return 0, nil
	}
	if err := co.store.Commit(ctx, store.Effects{Index: put}); err != nil {
		return 0, err
	}
	ids := make([]string, len(put))
	for i, p := range put {
		ids[i] = p.ID
	}
	// A decision accepted since the record was read removed its entry
	// before this put: remove what the record now shows decided.
	return len(put), co.unindexDecided(ctx, rec.RunID, ids)
}

// provisionIndex creates the pending index's bucket when it is missing
// (a memory-backed bucket on a single server that restarted) and this
// coordinator provisions; otherwise the index stays unwritable until
// `interlock provision` runs, and the check says so.
func (co *Coordinator) provisionIndex(ctx context.Context) error {
	if co.client == nil || !co.client.Provisioner() {
		return nil
	}
	if err := co.client.ProvisionPending(ctx); err != nil {
		return fmt.Errorf("provision the pending index: %w", err)
	}
	return nil
}

// newKeeperID names a coordinator in its claims on a build: its host and
// process, and random bytes for coordinators of one process.
func newKeeperID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// run checks every interval (immediately first) until the returned stop;
// a negative interval never checks.
func (k *indexKeeper) run(interval time.Duration) (stop func()) {
	if interval < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := k.check(ctx); err != nil && ctx.Err() == nil {
					k.co.cfg.Logger.Warn("pending index check", "error", err)
				}
				t.Reset(interval)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
