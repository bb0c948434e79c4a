package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// The pending index is derived from the run records: it lists what waits so
// that a listing costs what it returns. It lives in memory by default
// (jetstream.Config.PendingStorage), where its writes cost no fsync, so a
// server restart (or, on a cluster, a restart of every replica) loses it.
// Its marker (store.IndexMarker), kept in the index itself, is lost with
// it; a coordinator that finds no marker builds the index again from the
// records, and keeps checking while it runs. On a cluster, a loss can also
// leave the index older than it was, marker and all (jetstream.MayComeBackOlder):
// such a loss comes with a new leader for the index's stream, so the
// marker holds the leadership it was built under (store.Store.IndexEpoch),
// and an index found under another is built again, its stale entries
// removed.

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
	whole, records, err := k.co.restoreRecords(ctx, k.id)
	if err != nil || !whole {
		return false, err // the index is built from the records: once they are back
	}
	m, seq, err := k.co.store.IndexMarker(ctx)
	why := "pending index has no marker (new, or lost with a server restart): building it from the run records"
	switch {
	case errors.Is(err, store.ErrNotFound):
		// seq: what the key holds instead (0: nothing), written over.
		if perr := k.co.provisionIndex(ctx); perr != nil {
			return false, perr
		}
	case err != nil:
		return false, fmt.Errorf("read the pending index's marker: %w", err)
	case m.State == store.IndexBuilt:
		epoch, err := k.co.store.IndexEpoch(ctx)
		if err != nil {
			return false, fmt.Errorf("read the pending index's leader: %w", err)
		}
		if epoch == "" || epoch == m.Epoch {
			return false, nil
		}
		why = fmt.Sprintf("pending index has a new leader (%s, built under %q): it may have come back older "+
			"than it was, so it is built again from the run records", epoch, m.Epoch)
	case m.State == store.IndexBuilding && !strings.HasPrefix(m.By, k.id+"/") && k.co.now().Sub(m.At) < indexStale:
		return false, nil // another coordinator is building it
	}
	return true, k.build(ctx, seq, records, why)
}

// build claims the build (the marker still at seq), puts the entries of
// every run waiting, and marks the index built, all with compare-and-set
// on the marker: if the index is lost meanwhile, or another coordinator
// takes the build over, the marker is not at the sequence this build last
// wrote, and the build stops without marking the index built; so does a
// build under which the run records were lost and put back (their marker
// no longer at records). Before it marks the index built, it removes the
// entries written before its claim that it did not put again and whose
// record, read then, shows their interrupt closed (staleEntry: an index
// that came back older). why says what the log says.
func (k *indexKeeper) build(ctx context.Context, seq uint64, records, why string) error {
	co := k.co
	start := time.Now()
	epoch, err := co.store.IndexEpoch(ctx)
	if err != nil {
		return fmt.Errorf("read the pending index's leader: %w", err)
	}
	// by names this build: a stream recreated under it restarts its
	// sequences, and another build's claim could land on the very sequence
	// this one last wrote; before marking the index built, the marker is
	// read back and must still be this build's.
	by := k.id + "/" + newNonce()
	claim := func(state string) error {
		if state == store.IndexBuilt {
			m, at, err := co.store.IndexMarker(ctx)
			if err != nil || at != seq || m.By != by {
				return fmt.Errorf("%w: the marker is no longer this build's claim (%v)", errIndexLost, err)
			}
		}
		next, err := co.store.PutIndexMarker(ctx, store.IndexMarker{State: state, By: by, At: co.now(), Epoch: epoch}, seq)
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
	claimed := seq
	co.cfg.Logger.Warn(why)
	renewed, runs, entries := time.Now(), 0, 0
	// Until a page is empty: a record written again after its page was
	// read comes again on a later one, so the entry put last for each run
	// is from its record as last written (a put from an older read would
	// otherwise stand over a newer escalation's or vote's).
	for after := uint64(0); ; {
		page, last, err := co.store.RunsPage(ctx, after, indexPage)
		if err != nil {
			return fmt.Errorf("build the pending index: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, rec := range page {
			n, err := co.indexRun(ctx, rec)
			if err != nil {
				return fmt.Errorf("build the pending index: run %s: %w", rec.RunID, err)
			}
			entries += n
		}
		runs += len(page)
		after = last
		if co.crash("index-after-page") {
			return errAbandoned
		}
		if time.Since(renewed) > indexRenew {
			if err := claim(store.IndexBuilding); err != nil {
				return err
			}
			renewed = time.Now()
		}
	}
	// Records lost under the build (a runs bucket in memory whose server
	// restarted) may have ended its pages early: built again once back.
	if whole, now, err := co.restoreRecords(ctx, k.id); err != nil || !whole || now != records {
		return fmt.Errorf("%w: the run records were lost under the build (%v)", errIndexLost, err)
	}
	stale, err := co.store.SweepIndex(ctx, claimed, co.staleEntry)
	if err != nil {
		return fmt.Errorf("build the pending index: remove stale entries: %w", err)
	}
	if err := claim(store.IndexBuilt); err != nil {
		return err
	}
	co.metrics.indexBuilds.Inc()
	took := time.Since(start).Round(time.Millisecond)
	co.cfg.Logger.Warn("pending index built from the run records", "runs", runs, "entries", entries, "stale", stale, "took", took)
	// In the audit trail too: a build after the first says the index was
	// lost, with a server restart, a new leader of an index kept in memory
	// on a cluster, or by an operator deleting its bucket.
	ev := subjects.Event{Type: subjects.EventPendingIndexBuilt, RunID: subjects.NoRun,
		Detail: fmt.Sprintf("%d runs read, %d waiting interrupts put, %d stale entries removed, in %s", runs, entries, stale, took)}
	if err := co.event(ctx, ev, "index:"+by); err != nil {
		co.cfg.Logger.Error("audit the pending index's build", "error", err)
	}
	return nil
}

// staleEntry reports whether p's run record, read now, shows p's interrupt
// closed: decided, or the run past its pass or finished. Only that: a read
// may come from a replica a moment behind (records are read by direct
// get), whose older record lacks an interrupt that waits. An entry whose
// record is missing is kept too: it cannot be told from a record not put
// back yet.
func (co *Coordinator) staleEntry(ctx context.Context, p subjects.PendingInterrupt) (bool, error) {
	rec, err := co.load(ctx, p.RunID)
	if errors.Is(err, store.ErrForeignRecord) {
		return false, nil // kept, as for a record not put back yet
	}
	if err != nil || rec == nil {
		return false, err
	}
	if rec.Status.Terminal() || rec.Pass > p.Pass {
		return true, nil
	}
	i := rules.Find(rec, p.ID)
	return i >= 0 && rec.Interrupts[i].Decision != nil, nil
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
	if err := co.store.Commit(ctx, store.Effects{Index: put, Rebuild: true}); err != nil {
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
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), newNonce())
}

// newNonce is 8 random hex digits.
func newNonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// indexBackoff bounds the wait after a failed check: each failure in a
// row doubles the interval up to it.
const indexBackoff = time.Minute

// run checks at once and then every interval until the returned stop; a
// negative interval checks only at once. A check that fails (a record
// that cannot be read, a full memory store) is tried again after twice
// the last wait, up to indexBackoff, rather than every interval.
func (k *indexKeeper) run(interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		wait := interval
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, err := k.check(ctx)
				switch {
				case err != nil && ctx.Err() == nil:
					k.co.cfg.Logger.Warn("pending index check", "error", err, "again in", wait)
				case err == nil:
					wait = interval
				}
				if interval < 0 {
					return
				}
				t.Reset(wait)
				if err != nil {
					wait = min(2*wait, max(indexBackoff, interval))
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
