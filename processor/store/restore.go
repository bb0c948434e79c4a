package store

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// A runs bucket kept in memory loses its records when the server restarts
// (on a cluster, when every replica does). The audit trail keeps a sealed
// copy of each record as its change left it (Effects.Record), so a store
// with the record key (UseRecordKey) puts them back: one run when it is read
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

// A claim on putting records back is renewed every restoreRenew while the
// trail is read, and stands restoreStale before another coordinator takes
// it over (putting back is idempotent).
const (
	restoreRenew = 5 * time.Second
	restoreStale = 30 * time.Second
)

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
// carry, nil when they carry none, and the sequence of the last event it
// read. With laterWrites, also nil when the trail tells of a record write
// that copy does not hold, wherever the entry that tells it sits (a pull's
// answer can store a genuine entry again, later in the trail, headers and
// copy included): an entry naming
// more writes (jetstream.HeaderRecordWrites: a write by a coordinator that
// did not get its copy stored), or an entry that follows a record write
// (followsRecord) and names none, stored after the first copy with those
// writes (written by a coordinator of an earlier version, which wrote no
// copies). With ties, also nil when two different copies have the most
// writes: a change whose check failed (storeCopy, holds) leaves its copy
// beside the one of the change that won, and the trail does not tell
// which the bucket held.
func (s *JetStream) latestCopy(ctx context.Context, run string, laterWrites, ties bool) (*subjects.Run, uint64, error) {
	filter, err := s.c.Namespace().RunEvents(run)
	if err != nil {
		return nil, 0, err
	}
	// A new run has no events: one read of the last (from the stream's
	// leader) says so without reading the trail.
	last, err := s.c.LeaderLast(ctx, jetstream.StreamEvents, filter)
	if err != nil {
		return nil, 0, fmt.Errorf("read run %s's last event: %w", run, err)
	}
	if last == 0 {
		return nil, 0, nil
	}
	var best *subjects.Run
	// first is where the first copy with so many writes was stored; most,
	// the most writes an entry names; unnamed, the last entry after a
	// record write that names none; tied, whether another copy than best
	// has as many writes.
	first := map[uint64]uint64{}
	var most, unnamed uint64
	tied := false
	for after := uint64(0); ; {
		msgs, err := s.c.Messages(ctx, jetstream.StreamEvents, filter, after+1, eventsBatch)
		if err != nil {
			return nil, 0, fmt.Errorf("read run %s's record copies: %w", run, err)
		}
		for _, m := range msgs {
			after = m.Sequence
			if jetstream.CheckPublished(m.Header) != nil {
				continue // an answer the server stored here for another user (a copy it re-sent)
			}
			// Of copies with as many writes (two lineages, one of a write
			// lost with the bucket), the later stored.
			if r := s.copyIn(run, m.Data); r != nil {
				if _, ok := first[r.Writes]; !ok {
					first[r.Writes] = m.Sequence
				}
				switch {
				case best == nil || r.Writes > best.Writes:
					best, tied = r, false
				case r.Writes == best.Writes:
					tied = tied || !sameRecord(r, best)
					best = r
				}
			}
			switch n, named := s.namedWrites(m); {
			case named:
				most = max(most, n)
			case n > 0:
				unnamed = m.Sequence
			}
		}
		if len(msgs) < eventsBatch {
			if after < last {
				// Direct gets may be answered by a replica that lags.
				return nil, 0, fmt.Errorf("read run %s's record copies: %w: read up to %d of %d", run, errLagging, after, last)
			}
			if laterWrites && best != nil && (most > best.Writes || unnamed > first[best.Writes]) || ties && tied {
				return nil, after, nil
			}
			return best, after, nil
		}
	}
}

// sameRecord reports whether a and b are the same record.
func sameRecord(a, b *subjects.Run) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// namedWrites is the record writes m, an entry of the coordinator's, names
// (jetstream.HeaderRecordWrites; one that does not parse names more than
// any), and whether it names any; an entry that names none returns 1 when
// it follows a record write (followsRecord), else 0.
func (s *JetStream) namedWrites(m jetstream.StoredMsg) (uint64, bool) {
	if v := m.Header.Get(jetstream.HeaderRecordWrites); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return math.MaxUint64, true
		}
		return n, true
	}
	if ev, err := subjects.StoredEvent(s.c.Namespace(), m.Subject, m.Data); err == nil && followsRecord(ev) {
		return 1, false
	}
	return 0, false
}

// errLagging: a read of the trail ended before the last event the stream's
// leader holds (a replica answered, behind): the caller tries again.
var errLagging = errors.New("the trail's reader lags its leader")

// restoreRun reads run's record after the bucket had none, or held
// something else at revision rev (cause, matching ErrNotFound or
// ErrForeignRecord): the latest copy in its events, put back over it, or
// cause when its events carry none (a new run; see unrecorded for one
// whose key holds something else).
func (s *JetStream) restoreRun(ctx context.Context, run string, rev uint64, cause error) (*subjects.Run, uint64, error) {
	// Over an answer, the copy must be the record the answer replaced: of
	// the last write (on disk the bucket lost none), and not one of two
	// different copies of it (a change whose check failed leaves its copy).
	foreign := errors.Is(cause, ErrForeignRecord)
	best, read, err := s.latestCopy(ctx, run, foreign && !s.inMemory, foreign)
	if err != nil {
		return nil, 0, err
	}
	if best == nil && errors.Is(cause, ErrForeignRecord) {
		return s.unrecorded(ctx, run, rev, cause)
	}
	if best == nil {
		return nil, 0, cause
	}
	if _, _, err := s.putBack(ctx, best, putBackAt{overForeign: true, trail: read}); err != nil {
		return nil, 0, err
	}
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return nil, 0, err
	}
	data, rev, err := runEntry(ctx, b, run)
	if errors.Is(err, ErrForeignRecord) {
		// Another answer landed as the copy was put back (a flood of
		// them): the input waits and comes again, it is not refused.
		return nil, 0, fmt.Errorf("run %s: %w: an answer replaced the record again as it was put back (%v)", run,
			ErrContended, err)
	}
	if err != nil {
		return nil, 0, err
	}
	return decodeRun(run, data, rev)
}

// putBackAt says where putBack may store a copy.
type putBackAt struct {
	// own is the revision this caller put a copy back at before: a later
	// copy with as many writes replaces it.
	own uint64
	// overForeign: the copy may replace an answer the server stored there.
	overForeign bool
	// trail, when not 0, is the last event of the run the copy was chosen
	// from: one attempt, and an answer is replaced only while the run's
	// trail still ends there. A copy chosen before a change stored its own
	// copy, and stored after that change's check passed (under a flood of
	// answers, whose compare-and-set kept failing), would roll the run
	// back under the change's effects; the caller's input comes again.
	trail uint64
}

// putBack stores copy unless the bucket holds the record with more writes,
// or as many and not at revision at.own, or an answer the server stored
// there (unless at.overForeign); it returns the revision it stored at, and
// whether it stored. With at.trail, ErrContended when the run's trail moved
// or the write lost a compare-and-set.
func (s *JetStream) putBack(ctx context.Context, copy *subjects.Run, at putBackAt) (uint64, bool, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return 0, false, err
	}
	data, err := json.Marshal(copy)
	if err != nil {
		return 0, false, err
	}
	for range MaxAttempts {
		var rev uint64
		cur, rv, err := runEntry(ctx, b, copy.RunID)
		switch {
		case errors.Is(err, ErrNotFound):
		case errors.Is(err, ErrForeignRecord) && (!s.copies() || !at.overForeign):
			// The last copy may be older than the record the answer
			// replaced (a store that writes no copies, or a restore that
			// did not check: latestCopy), so it stays refused.
			return 0, false, nil
		case errors.Is(err, ErrForeignRecord):
			if at.trail != 0 {
				if err := s.trailStill(ctx, copy.RunID, at.trail); err != nil {
					return 0, false, err
				}
			}
			rev = rv // not a record: the copy replaces it
		case err != nil:
			return 0, false, err
		default:
			have, _, err := decodeRun(copy.RunID, cur, rv)
			if err != nil {
				return 0, false, err
			}
			if have.Writes > copy.Writes || have.Writes == copy.Writes && rv != at.own {
				return 0, false, nil
			}
			rev = rv
		}
		next, err := b.Update(ctx, copy.RunID, data, rev)
		if errors.Is(err, ErrConflict) && at.trail != 0 {
			return 0, false, fmt.Errorf("put back run %s: %w: the key changed under the write", copy.RunID, ErrContended)
		} else if errors.Is(err, ErrConflict) {
			continue
		} else if err != nil {
			return 0, false, err
		}
		return next, true, nil
	}
	return 0, false, fmt.Errorf("put back run %s: %w after %d attempts", copy.RunID, ErrContended, MaxAttempts)
}

// trailStill returns ErrContended unless run's trail still ends at the
// event last, as the stream's leader says.
func (s *JetStream) trailStill(ctx context.Context, run string, last uint64) error {
	filter, err := s.c.Namespace().RunEvents(run)
	if err != nil {
		return err
	}
	now, err := s.c.LeaderLast(ctx, jetstream.StreamEvents, filter)
	if err != nil {
		return fmt.Errorf("read run %s's last event: %w", run, err)
	}
	if now != last {
		return fmt.Errorf("put back run %s: %w: its trail moved from event %d to %d since its copy was chosen", run,
			ErrContended, last, now)
	}
	return nil
}

// Restored is what RestoreRecords did.
type Restored struct {
	// Ran says this call put records back (and Runs, how many runs'), or
	// found none to put back, and marked the bucket whole.
	Ran  bool
	Runs int
	// Whole says the bucket holds every record: false while another
	// caller's claim stands (what is built from the records, the pending
	// index, waits for it) or when the restore failed.
	Whole bool
	// Marker names the marker saying the bucket is whole (with Whole): its
	// sequence and its body, which holds who put the records back and
	// when. It changes whenever the bucket is lost and put back (a bucket
	// created again restarts its sequences, so the sequence alone may
	// not), so what is built from the records can tell they were lost
	// under it.
	Marker string
}

// RestoreRecords puts back, when the runs bucket has no marker saying it
// is whole (or a claim on this of by's, or one older than restoreStale),
// each run's latest record copy from the whole audit trail, calls announce
// (nil: none) with what it did, and, when that succeeds, marks the bucket
// whole. by names the caller in its claim. A store without the record key
// does nothing and reports the bucket whole.
func (s *JetStream) RestoreRecords(ctx context.Context, by string, now time.Time, announce func(Restored) error) (Restored, error) {
	if !s.restoring() {
		return Restored{Whole: true}, nil
	}
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return Restored{}, err
	}
	var last uint64
	switch body, seq, err := b.Marker(ctx, recordsMarkerKey); {
	case errors.Is(err, ErrNotFound):
		// No marker (seq: what the key holds instead, written over), or no
		// bucket: a missing bucket is the caller's to create
		// (ErrNotProvisioned).
		if _, err := s.c.BucketInMemory(ctx, jetstream.RunsBucket); err != nil {
			return Restored{}, err
		}
		last = seq
	case err != nil:
		return Restored{}, err
	default:
		var m IndexMarker
		if err := json.Unmarshal(body, &m); err != nil {
			return Restored{}, fmt.Errorf("runs bucket marker: %w", err)
		}
		switch {
		case m.State == RecordsWhole:
			return Restored{Whole: true, Marker: markerName(seq, body)}, nil
		case m.By != by && now.Sub(m.At) < restoreStale:
			return Restored{}, nil // another caller is putting them back
		}
		last = seq
	}
	var marked []byte
	mark := func(state string, at time.Time) error {
		body, err := json.Marshal(IndexMarker{State: state, By: by, At: at})
		if err != nil {
			return err
		}
		last, err = b.PutMarker(ctx, recordsMarkerKey, body, last)
		marked = body
		return err
	}
	if err := mark(RecordsRestoring, now); errors.Is(err, ErrConflict) {
		return Restored{}, nil // another caller claimed it first
	} else if err != nil {
		return Restored{}, err
	}
	filter := s.c.Namespace().AllEvents()
	final, err := s.c.LeaderLast(ctx, jetstream.StreamEvents, filter)
	if err != nil {
		return Restored{}, fmt.Errorf("read the trail's last event: %w", err)
	}
	// put is the copy put back last, by run: its writes and the revision
	// it was stored at.
	type putAt struct{ writes, rev uint64 }
	put := map[string]putAt{}
	start := time.Now()
	renewed := start
	var after uint64
	for {
		msgs, err := s.c.Messages(ctx, jetstream.StreamEvents, filter, after+1, eventsBatch)
		if err != nil {
			return Restored{Runs: len(put)}, fmt.Errorf("read the record copies: %w", err)
		}
		// Of a batch, each run's latest copy only (of as many writes, the
		// later stored): a run's copies are mostly a few events apart.
		latest := map[string]*subjects.Run{}
		var order []string
		for _, m := range msgs {
			after = m.Sequence
			a, err := s.c.Namespace().Parse(m.Subject)
			if err != nil || a.Run == subjects.NoRun || jetstream.CheckPublished(m.Header) != nil {
				continue
			}
			r := s.copyIn(a.Run, m.Data)
			if r == nil || r.Writes < put[a.Run].writes {
				continue
			}
			if prev, ok := latest[a.Run]; !ok {
				order = append(order, a.Run)
			} else if r.Writes < prev.Writes {
				continue
			}
			latest[a.Run] = r
		}
		for _, run := range order {
			r := latest[run]
			// Over an answer only in memory, where every write's copy is
			// stored before its effects; on disk, an input that meets it
			// puts back a copy no later write outdates (Run).
			rev, stored, err := s.putBack(ctx, r, putBackAt{own: put[run].rev, overForeign: s.inMemory})
			if err != nil {
				return Restored{Runs: len(put)}, err
			}
			if stored {
				put[run] = putAt{r.Writes, rev}
			}
		}
		if time.Since(renewed) > restoreRenew {
			// Renewed, so another caller does not take a long restore
			// over; a claim taken over or lost ends this one.
			if err := mark(RecordsRestoring, now.Add(time.Since(start))); err != nil {
				return Restored{Runs: len(put)}, fmt.Errorf("renew the claim on putting records back: %w", err)
			}
			renewed = time.Now()
		}
		if len(msgs) < eventsBatch {
			break
		}
	}
	if after < final {
		// Direct gets may be answered by a replica that lags.
		return Restored{Runs: len(put)}, fmt.Errorf("read the record copies: %w: read up to %d of %d", errLagging, after, final)
	}
	if announce != nil {
		if err := announce(Restored{Ran: true, Runs: len(put)}); err != nil {
			return Restored{Runs: len(put)}, fmt.Errorf("announce the records put back: %w", err)
		}
	}
	// Marked whole only if the marker is still this claim: a bucket lost
	// again meanwhile has no marker, and the mark fails.
	if err := mark(RecordsWhole, now); err != nil {
		return Restored{Runs: len(put)}, fmt.Errorf("mark the runs bucket whole: %w", err)
	}
	return Restored{Ran: true, Runs: len(put), Whole: true, Marker: markerName(last, marked)}, nil
}

// markerName is Restored.Marker for the marker stored at seq with body.
func markerName(seq uint64, body []byte) string {
	return strconv.FormatUint(seq, 10) + " " + string(body)
}

// SealedBefore reports whether the deployment ever kept its records in
// memory: its trail holds a records_restored event, which a coordinator
// keeping records in memory writes when it first starts. A runs bucket on disk of
// such a deployment may have lost records kept in memory before (and
// been created again on disk), so they are put back from the trail too.
func (s *JetStream) SealedBefore(ctx context.Context) (bool, error) {
	subject, err := s.c.Namespace().Events(subjects.NoRun, subjects.EventRecordsRestored)
	if err != nil {
		return false, err
	}
	// The coordinator's own entry: an answer the server stored there for
	// another user says nothing (it would turn a deployment that never
	// kept records in memory into one that puts records back).
	found, _, err := s.find(ctx, jetstream.StreamEvents, subject, func(jetstream.StoredMsg) bool { return true })
	return found, err
}

// errRecordMoved: the runs bucket no longer holds the record a commit
// follows from (it was emptied, and put back older, while the change was
// under way); the input is delivered again and applied to what is there.
var errRecordMoved = errors.New("the run record changed under its commit")

// storeCopy stores rec sealed before anything else its change caused,
// in first, the change's first event, and then checks that the bucket
// still holds rec; it reports whether it stored first. The copy goes in a
// recorded event of its own, identified by what it holds, when first was
// stored before (an input delivered again; deduplicated by its id), so
// its copy may be of another write, and when first with the copy would
// be over the max payload (a failure's long detail): first then goes with
// the rest.
func (s *JetStream) storeCopy(ctx context.Context, rec *subjects.Run, first Event) (bool, error) {
	sealed, err := SealRecord(s.sealKey, rec)
	if err != nil {
		return false, fmt.Errorf("seal run record %s: %w", rec.RunID, err)
	}
	carrier := first
	carrier.Record = sealed
	m, err := s.eventMsg(carrier, rec.Writes)
	if err != nil {
		return false, err
	}
	stored := int64(len(m.Data)) <= s.c.MaxPayload()-copyHeaderRoom
	duplicate := false
	if stored {
		if duplicate, err = s.c.PublishOnce(ctx, m); err != nil {
			return false, err
		}
	}
	if !stored || duplicate {
		ev := Event{Event: subjects.Event{Version: subjects.Version, Type: subjects.EventRecorded, RunID: rec.RunID,
			Agent: rec.Agent, Pass: rec.Pass, At: rec.UpdatedAt, Record: sealed}, Dedup: "rec" + recordTag(s.sealKey, rec)}
		if m, err = EventMsg(s.c.Namespace(), ev); err != nil {
			return false, err
		}
		m.Header = jetstream.Header{jetstream.HeaderRecordWrites: {strconv.FormatUint(rec.Writes, 10)}}
		if _, err := s.c.Publish(ctx, m.Subject, m.Data, m.MsgID, m.Header); err != nil {
			return false, err
		}
	}
	return stored, s.holds(ctx, rec)
}

// copyHeaderRoom is what a message's headers (its id, trace context) may
// take of the max payload beside its body.
const copyHeaderRoom = 1 << 10

// holds checks that the runs bucket holds rec as written (its writes and
// the time of its last write), or a later write of it: more writes, stored
// after the revision this store wrote rec at (when it still remembers
// that). Otherwise the bucket lost rec (emptied, and an older copy put
// back): an error matching errRecordMoved.
func (s *JetStream) holds(ctx context.Context, rec *subjects.Run) error {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return err
	}
	data, rev, err := runEntry(ctx, b, rec.RunID)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrForeignRecord) {
		return fmt.Errorf("run %s: %w: the bucket has no record (%v)", rec.RunID, errRecordMoved, err)
	}
	if err != nil {
		return err
	}
	have, _, err := decodeRun(rec.RunID, data, rev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	wrote, ok := s.written[writtenKey(rec)]
	delete(s.written, writtenKey(rec))
	s.mu.Unlock()
	if have.Writes == rec.Writes && have.UpdatedAt.Equal(rec.UpdatedAt) {
		return nil
	}
	if ok && have.Writes > rec.Writes && rev > wrote {
		return nil // written again since, by another input of the run
	}
	return fmt.Errorf("run %s: %w: write %d of %s, the bucket holds write %d of %s", rec.RunID, errRecordMoved,
		rec.Writes, rec.UpdatedAt.Format(time.RFC3339Nano), have.Writes, have.UpdatedAt.Format(time.RFC3339Nano))
}

// writtenKey names one write of a run's record: its run, writes and time.
func writtenKey(r *subjects.Run) string {
	return r.RunID + "\x00" + strconv.FormatUint(r.Writes, 10) + "\x00" + strconv.FormatInt(r.UpdatedAt.UnixNano(), 10)
}

// recordTag names a record's state in a message id without telling it:
// 16 hex digits of HMAC-SHA256 under key of its JSON.
func recordTag(key []byte, rec *subjects.Run) string {
	data, _ := json.Marshal(rec) // a record that was just sealed marshals
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil)[:8])
}
