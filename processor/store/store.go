// Package store keeps Interlock's domain records: run records, written with
// compare-and-set, the pending index of interrupts waiting for a decision,
// and each run's events. Store is the small interface the coordinator and
// the SDK's Client read and write through; JetStream implements it over the
// generic adapter in package jetstream.
//
// Update is the one compare-and-set loop: every change of a run record goes
// through it.
package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// Errors a Store returns; they are the adapter's, so errors.Is matches
// either name.
var (
	// ErrNotFound: no record (or entry) under that key.
	ErrNotFound = jetstream.ErrNotFound
	// ErrConflict: a compare-and-set lost to another writer.
	ErrConflict = jetstream.ErrConflict
	// ErrTooLarge: a run record over MaxRecord bytes.
	ErrTooLarge = jetstream.ErrTooLarge
)

// ErrForeignRecord: the runs bucket holds, under a run's key, a message
// that is not a write of the coordinator's: an answer nats-server stored
// there for another user (docs/security.md, "Answers the server sends for
// you"), with a body of that user's choosing. It is not read as the run's
// record; the error also carries code not_allowed (subjects.CodeOf).
var ErrForeignRecord = errors.New("the run record is not a write of the coordinator's")

// Trail is a store that keeps an audit trail beside its records, and can
// tell from it whether a run has had a record (JetStream.Recorded), or may
// have had one (JetStream.MayHaveRecord: the trail may have lost entries).
type Trail interface {
	Recorded(ctx context.Context, run string) (bool, error)
	MayHaveRecord(ctx context.Context, run string) (bool, error)
}

// Store is where run records, the pending index and events are kept.
type Store interface {
	// Run returns run's record and its revision, or an error matching
	// ErrNotFound with the revision a first record is written at (zero
	// when the key holds nothing).
	Run(ctx context.Context, run string) (*subjects.Run, uint64, error)
	// PutRun stores r if the stored revision of r.RunID is still rev (zero:
	// there is no record yet) and returns the new revision; otherwise an
	// error matching ErrConflict.
	PutRun(ctx context.Context, r *subjects.Run, rev uint64) (uint64, error)
	// Runs returns every run record, least recently updated first.
	Runs(ctx context.Context) ([]*subjects.Run, error)
	// RunsPage returns up to limit run records written after cursor after
	// (0: from the start), in the order they were last written, and the
	// cursor after them (after itself when there are none). A record
	// written again while a caller pages comes again on a later page, so a
	// caller that reads until a page is empty has read every record as it
	// was after its last write; memory holds one page, not every record.
	RunsPage(ctx context.Context, after uint64, limit int) ([]*subjects.Run, uint64, error)
	// PendingPage returns up to limit interrupts waiting for a decision
	// from the pending index, after cursor after (0: from the start), in
	// the order they entered the index, and the cursor of the next page (0:
	// none follows). Entries added while a caller pages come on a later
	// page, removed ones are not returned, and none is skipped; an entry
	// put again (an escalation) moves to the end with its new state. It
	// costs what it returns, not what the index holds.
	PendingPage(ctx context.Context, after uint64, limit int) ([]subjects.PendingInterrupt, uint64, error)
	// Indexed reports whether the pending index holds an entry for
	// interrupt id of run (not removed since it was put).
	Indexed(ctx context.Context, run, id string) (bool, error)
	// PendingCount is the number of interrupts waiting for a decision,
	// read without listing them. The JetStream store's count includes
	// entries removed in the last second.
	PendingCount(ctx context.Context) (int, error)
	// IndexMarker returns the pending index's marker (PutIndexMarker's),
	// with its sequence, or an error matching ErrNotFound when the index
	// has none: it was never built, or it was lost (a memory-backed index
	// after a server restart) and has to be built again from the records;
	// the sequence is then that of what the marker's key holds instead (an
	// answer the server stored there), 0 for nothing.
	IndexMarker(ctx context.Context) (IndexMarker, uint64, error)
	// PutIndexMarker writes m as the pending index's marker if the marker
	// is still at sequence last (0: there is none), and returns its
	// sequence; otherwise an error matching ErrConflict.
	PutIndexMarker(ctx context.Context, m IndexMarker, last uint64) (uint64, error)
	// IndexEpoch names the current leadership of the pending index's
	// stream when the index may come back older than what it acknowledged
	// (kept in memory with more than one replica: jetstream.MayComeBackOlder),
	// empty otherwise. An index whose marker holds another epoch may have
	// lost its last writes and is built again.
	IndexEpoch(ctx context.Context) (string, error)
	// SweepIndex removes the pending index's entries last written before
	// sequence before (a build's claim: every entry a build puts comes
	// after it) for which stale, asked then, says so, and returns how many
	// it removed. An entry written again meanwhile is kept.
	SweepIndex(ctx context.Context, before uint64, stale func(context.Context, subjects.PendingInterrupt) (bool, error)) (int, error)
	// Events returns run's events after cursor after (0: all), oldest
	// first, and the cursor of the last one returned (after when none).
	Events(ctx context.Context, run string, after uint64) ([]subjects.Event, uint64, error)
	// LastSuspension returns the stream sequence of the latest suspension
	// of run that workers published on the runs stream (whatever the
	// record says yet), or 0 when there is none. A decision that arrives
	// before the record shows its suspension waits for it by this.
	LastSuspension(ctx context.Context, run string) (uint64, error)
	// MaxRecord is the size in bytes over which PutRun refuses a record
	// with an error matching ErrTooLarge (the JetStream store's: the
	// server's max payload).
	MaxRecord() int64
	// Commit writes fx. Each put and event in it carries a message id
	// derived from what it is about, so committing the same effects again
	// after an error or a crash, within the streams' duplicate window (two
	// minutes by default), completes them and repeats nothing; removing
	// an index entry twice is harmless at any time.
	Commit(ctx context.Context, fx Effects) error
}

// Effects are the writes a record change implies besides the record
// itself: entries put into and removed from the pending index, events, and
// messages to other subjects (work items, timers, notices).
type Effects struct {
	Index   []subjects.PendingInterrupt
	Unindex []PendingRef
	Events  []Event
	// Messages go to subjects outside the store; each should carry a
	// message id.
	Messages []jetstream.OutMsg
	// Record, when set, is the run record these effects follow from (as
	// written, or as read when an input is delivered again). A store that
	// seals records into the trail (JetStream with the record key) carries
	// it sealed in the first event and stores that event before anything
	// else, so that nothing the record caused is stored while the trail
	// has no copy of it, and checks the bucket still holds it; Events must
	// then not be empty.
	Record *subjects.Run
	// Rebuild says Index is a build of a lost index from the records: its
	// puts carry message ids of their own, never an earlier put's, since
	// the server may still remember the ids of the puts made before the
	// loss (an index emptied, not recreated) and drop them as duplicates.
	// Every put carries one: readers list only entries that do
	// (jetstream.CheckPublished).
	Rebuild bool
}

// pageSize is the page AllPending reads.
const pageSize = 256

// AllPending returns every interrupt waiting for a decision, oldest first
// (then by run and interrupt id), reading the pending index page by page.
func AllPending(ctx context.Context, s Store) ([]subjects.PendingInterrupt, error) {
	var out []subjects.PendingInterrupt
	for after := uint64(0); ; {
		page, next, err := s.PendingPage(ctx, after, pageSize)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == 0 {
			return latestPerInterrupt(out), nil
		}
		after = next
	}
}

// latestPerInterrupt keeps, of entries for the same interrupt (one put
// again by an escalation while the pages were read moves to the end), the
// last one read, and sorts them.
func latestPerInterrupt(p []subjects.PendingInterrupt) []subjects.PendingInterrupt {
	at := map[string]int{}
	out := p[:0]
	for _, e := range p {
		key := subjects.PendingKey(e.RunID, e.ID)
		if i, ok := at[key]; ok {
			out[i] = e
			continue
		}
		at[key] = len(out)
		out = append(out, e)
	}
	sortPending(out)
	return out
}

// sortPending orders pending interrupts oldest first, then by run and
// interrupt id.
func sortPending(p []subjects.PendingInterrupt) {
	sort.Slice(p, func(i, j int) bool {
		if !p[i].SuspendedAt.Equal(p[j].SuspendedAt) {
			return p[i].SuspendedAt.Before(p[j].SuspendedAt)
		}
		return p[i].RunID+p[i].ID < p[j].RunID+p[j].ID
	})
}

// IndexMarker says whether the pending index is whole. It is kept in the
// index itself, so an index that is lost loses its marker with it.
type IndexMarker struct {
	// State is IndexBuilding while a coordinator (By) writes the entries
	// of every run waiting, IndexBuilt once it has.
	State string    `json:"state"`
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at"`
	// Epoch is the IndexEpoch the build started under.
	Epoch string `json:"epoch,omitempty"`
}

// The states of an IndexMarker.
const (
	IndexBuilding = "building"
	IndexBuilt    = "built"
)

// PendingRef names an entry of the pending index.
type PendingRef struct{ RunID, InterruptID string }

// Event is an event to append to its run's events.
type Event struct {
	subjects.Event
	// Dedup says what the event is about (an input's sequence, a pass, a
	// timer): the same event about the same thing is stored once.
	Dedup string
	// TraceParent, when valid, is continued on the event.
	TraceParent string
}

// Run is the run whose events ev is filed under: its run id, or
// subjects.NoRun when that is not a valid token (input too broken to name
// a run).
func (ev Event) Run() string {
	if subjects.ValidateToken("run id", ev.RunID) != nil {
		return subjects.NoRun
	}
	return ev.RunID
}

// MsgID is the message id that makes ev stored once: its run, what it is
// about and its type.
func (ev Event) MsgID() string { return ev.Run() + ":" + ev.Dedup + ":" + string(ev.Type) }

// MaxAttempts bounds the compare-and-set attempts of one Update.
const MaxAttempts = 20

// ErrContended is Update's error when every attempt lost to another writer.
var ErrContended = errors.New("compare-and-set kept losing")

// Recaller is a Store that remembers the records it read or wrote last, so
// that Update can try a change without reading the record first.
type Recaller interface {
	// Recent returns run's record and revision as this store last read or
	// wrote it, if it remembers them; another writer may have changed it
	// since.
	Recent(run string) (*subjects.Run, uint64, bool)
	// GuessNew reports whether a run Recent does not remember may be
	// guessed to have no record yet (compare-and-set then refuses the
	// guess if it has one): not where records can be lost and put back.
	GuessNew() bool
}

// Update changes run's record with compare-and-set: it reads the record
// (nil when there is none), asks change for the next one, and stores it if
// nobody wrote in between, reading and asking again when somebody did.
// change must be a pure function of the record it is given; it returns nil
// to write nothing. Update returns the record stored, or nil when change
// wrote nothing (or failed).
//
// Each record written counts its writes (Run.Writes).
//
// When s is a Recaller, the first attempt starts without a read: from the
// record it remembers, or else from none (a run's first record is written
// without a read) where the store allows that guess. A write from that guess stands only if the record is
// still at that revision, or still absent (compare-and-set), and a change
// that writes nothing from it (a refusal, a duplicate) is asked again with
// the record read, so nothing is ever decided on a guess.
func Update(ctx context.Context, s Store, run string, change func(rec *subjects.Run) (*subjects.Run, error)) (*subjects.Run, error) {
	recaller, _ := s.(Recaller)
	for attempt := range MaxAttempts {
		var rec *subjects.Run
		var rev uint64
		recalled := false
		if recaller != nil && attempt == 0 {
			if rec, rev, recalled = recaller.Recent(run); !recalled && recaller.GuessNew() {
				rec, rev, recalled = nil, 0, true
			}
		}
		if !recalled {
			var err error
			rec, rev, err = s.Run(ctx, run)
			if errors.Is(err, ErrNotFound) {
				// No record; rev is what the first one is written over
				// (zero: nothing).
				rec = nil
			} else if err != nil {
				return nil, err
			}
		}
		next, err := change(rec)
		if recalled && (err != nil || next == nil) {
			continue // decide that only on the record as stored
		}
		if err != nil || next == nil {
			return nil, err
		}
		next.Writes = 1
		if rec != nil {
			next.Writes = rec.Writes + 1
		}
		if _, err := s.PutRun(ctx, next, rev); errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		return next, nil
	}
	return nil, fmt.Errorf("run %s: %w after %d attempts", run, ErrContended, MaxAttempts)
}
