package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// JetStream is the Store kept in JetStream: run records in the runs bucket,
// the pending index in the pending bucket, events in the events stream.
type JetStream struct {
	c *jetstream.Client

	mu      sync.Mutex
	runs    *jetstream.Bucket
	pending *jetstream.Bucket
	// recent holds the records this store read or wrote last, encoded,
	// with their revisions (see Recent); recentSize is their bytes.
	recent     map[string]remembered
	recentSize int
	// sealKey, when set (UseRecordKey), seals a copy of each record
	// written into the trail and opens them, to put records back.
	sealKey []byte
	// putsBackMissing: a record missing from the bucket is put back from
	// its copies too (RestoreRecords), not only one an answer replaced.
	putsBackMissing bool
	// written holds the revision this store wrote each record at, by run
	// and writes (writtenKey), for holds; bounded by recentRecords.
	written map[string]uint64
	// inMemory: the runs bucket keeps its records in memory, so each
	// record is sealed into the event its change writes (Commit), and a
	// record missing when it is read is put back from its copies.
	inMemory bool
	// ids, when set (SignIDs), tags the message ids of the index's puts
	// and the trail's entries.
	ids *jetstream.IDSigner
}

// SignIDs has the message ids of this store's index puts and trail
// entries carry a keyed tag (jetstream.IDSigner.Sign) after what names
// them. Another user can then not compute them: otherwise one could have
// a message holding the id of the coordinator's next write stored first
// (an answer the server sends where its request says, a pull's answer
// among them, which carries none of a direct get's headers), and the
// write would be dropped as a repeat (docs/security.md, "Answers the
// server sends for you").
func (s *JetStream) SignIDs(ids *jetstream.IDSigner) { s.ids = ids }

// msgID is id, tagged when this store signs its ids.
func (s *JetStream) msgID(id string) string {
	if s.ids == nil {
		return id
	}
	return s.ids.Sign(id)
}

type remembered struct {
	data []byte
	rev  uint64
}

// recentRecords and recentBytes bound what Recent remembers: a few
// records per input in flight, never one per run, and never more than
// recentBytes however large records grow (decisions' payloads and
// journaled steps are in them). A record larger than recentLargest is not
// remembered: Update's first attempt then guesses there is none, which
// compare-and-set refuses, and it reads the record (one round trip more
// per change of such a run).
const (
	recentRecords = 1024
	recentBytes   = 8 << 20
	recentLargest = recentBytes / 64
)

// NewJetStream returns the store kept through c.
func NewJetStream(c *jetstream.Client) *JetStream { return &JetStream{c: c} }

var (
	_ Store = (*JetStream)(nil)
	_ Trail = (*JetStream)(nil)
)

// UseRecordKey gives the store the key record copies are sealed with
// (jetstream.IDSigner.RecordKey): it seals a copy of each record it
// commits effects for (Effects.Record) into the trail, and puts a record
// back from its run's latest copy when the bucket holds, instead, an
// answer the server stored there for another user (docs/security.md,
// "Answers the server sends for you"). inMemory: the runs bucket keeps its
// records in memory, where its writes cost no fsync and a server restart
// empties it, so each copy is stored first and the bucket checked after
// (Commit). putBack: records missing from the bucket are put back too,
// all of them (RestoreRecords) and one when it is read (so the store
// never guesses a record new, nor starts from a record it remembers): a
// deployment that keeps, or kept, records in memory. Only the coordinator,
// which reads the key, calls it; call it before the store is used.
func (s *JetStream) UseRecordKey(key []byte, inMemory, putBack bool) {
	s.sealKey, s.inMemory, s.putsBackMissing = key, inMemory, putBack
}

// copies reports whether the store seals records into the trail.
func (s *JetStream) copies() bool { return s.sealKey != nil }

// restoring reports whether the store puts back records the bucket lost.
func (s *JetStream) restoring() bool { return s.sealKey != nil && s.putsBackMissing }

// bucket opens the named bucket once.
func (s *JetStream) bucket(ctx context.Context, name string) (*jetstream.Bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &s.runs
	if name == jetstream.PendingBucket {
		b = &s.pending
	}
	if *b != nil {
		return *b, nil
	}
	opened, err := s.c.OpenBucket(ctx, name)
	if err != nil {
		return nil, err
	}
	*b = opened
	return opened, nil
}

// Run implements Store.
func (s *JetStream) Run(ctx context.Context, run string) (*subjects.Run, uint64, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return nil, 0, err
	}
	data, rev, err := runEntry(ctx, b, run)
	if errors.Is(err, ErrNotFound) && s.restoring() || errors.Is(err, ErrForeignRecord) && s.copies() {
		// Lost with the bucket, or replaced by an answer the server stored
		// there for another user: the latest copy the trail carries, when
		// no write came after it (latestCopy).
		return s.restoreRun(ctx, run, rev, err)
	}
	if errors.Is(err, ErrForeignRecord) && s.ids != nil {
		return s.unrecorded(ctx, run, rev, err)
	}
	if err != nil {
		return nil, 0, err
	}
	s.remember(run, data, rev)
	return decodeRun(run, data, rev)
}

// runEntry reads run's record from the runs bucket b, refusing a message
// that is not a client's write (ErrForeignRecord): every write of a record
// carries a message id (Bucket.Update), and an answer the server stored
// under the key carries the server's headers, or none.
func runEntry(ctx context.Context, b *jetstream.Bucket, run string) ([]byte, uint64, error) {
	e, err := b.Last(ctx, run)
	if err != nil {
		return nil, 0, err
	}
	if err := foreign(e); err != nil {
		return nil, e.Revision, err
	}
	return e.Value, e.Revision, nil
}

// unrecorded answers a read of run's record, whose key holds at revision
// rev a message that is not the coordinator's write (cause, matching
// ErrForeignRecord): when the run was never recorded (MayHaveRecord) it
// has no record, and the error matches ErrNotFound with rev, the revision
// its first record is written over (an answer stored there by someone who
// learned the run's id before it suspended would otherwise keep it from
// ever starting). A run that was recorded, or may have been, had a record
// that the answer replaced: cause.
func (s *JetStream) unrecorded(ctx context.Context, run string, rev uint64, cause error) (*subjects.Run, uint64, error) {
	recorded, err := s.MayHaveRecord(ctx, run)
	if err == nil && !recorded {
		recorded, err = s.claimed(ctx, run)
	}
	if err != nil {
		return nil, 0, err
	}
	if recorded {
		return nil, 0, cause
	}
	return nil, rev, fmt.Errorf("run %s: %w: its key holds no record but an answer stored at revision %d, which its first record replaces",
		run, ErrNotFound, rev)
}

// claimed reports whether the runs stream holds outcomes of run from more
// than one agent: then one of them may have had its first record written
// before its events (a coordinator that died between the two), and
// another's first record must not be written over the answer that replaced
// it. A run's own outcomes all name its agent.
func (s *JetStream) claimed(ctx context.Context, run string) (bool, error) {
	ns := s.c.Namespace()
	filter, err := ns.AllRunOutcomes(run)
	if err != nil {
		return false, err
	}
	agents := map[string]bool{}
	found, _, err := s.find(ctx, jetstream.StreamRuns, filter, func(m jetstream.StoredMsg) bool {
		switch a, err := ns.Parse(m.Subject); {
		case err != nil || a.Run != run:
		case a.Kind == subjects.KindSuspended, a.Kind == subjects.KindCompleted, a.Kind == subjects.KindFailed:
			agents[a.Agent] = true
		}
		return len(agents) > 1
	})
	if err != nil {
		return false, fmt.Errorf("read run %s's outcomes: %w", run, err)
	}
	return found, nil
}

// find reads stream's messages on filter in batches, oldest first, until
// match reports true for one of them (found), taking only clients'
// publishes (CheckPublished); it returns the sequence of the last message
// read.
func (s *JetStream) find(ctx context.Context, stream jetstream.Stream, filter string, match func(jetstream.StoredMsg) bool) (found bool, last uint64, err error) {
	for {
		msgs, err := s.c.Messages(ctx, stream, filter, last+1, eventsBatch)
		if err != nil {
			return false, last, err
		}
		for _, m := range msgs {
			last = m.Sequence
			if jetstream.CheckPublished(m.Header) == nil && match(m) {
				return true, last, nil
			}
		}
		if len(msgs) < eventsBatch {
			return false, last, nil
		}
	}
}

// MayHaveRecord reports whether run may have had a record: its trail says
// so (Recorded), or the events stream may have dropped entries (an age or
// size limit, now or before), since a record outlives a trail that aged
// out.
func (s *JetStream) MayHaveRecord(ctx context.Context, run string) (bool, error) {
	if kept, err := s.c.KeptAll(ctx, jetstream.StreamEvents); err != nil || !kept {
		return true, err
	}
	return s.Recorded(ctx, run)
}

// Recorded reports whether run's trail shows it had a record: an entry of
// the coordinator's that it writes only once a run has one (followsRecord),
// read up to the last the stream's leader holds.
func (s *JetStream) Recorded(ctx context.Context, run string) (bool, error) {
	ns := s.c.Namespace()
	filter, err := ns.RunEvents(run)
	if err != nil {
		return false, err
	}
	last, err := s.c.LeaderLast(ctx, jetstream.StreamEvents, filter)
	if err != nil || last == 0 {
		return false, err
	}
	found, read, err := s.find(ctx, jetstream.StreamEvents, filter, func(m jetstream.StoredMsg) bool {
		ev, err := subjects.StoredEvent(ns, m.Subject, m.Data)
		return err == nil && followsRecord(ev)
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("read run %s's trail: %w", run, err)
	case !found && read < last:
		return false, fmt.Errorf("read run %s's trail: %w: read up to %d of %d", run, errLagging, read, last)
	}
	return found, nil
}

// followsRecord reports whether the coordinator writes ev only for a run
// that has a record: an outcome's (every run's first record is an
// outcome's), a record's sealed copy, a timer's, or a person's decision or
// vote. A refused input, a reply refused, and an operator rule's ruling on
// an ask (decided by subjects.PolicyApprover) may be filed under a run
// that has none.
func followsRecord(ev subjects.Event) bool {
	switch ev.Type {
	case subjects.EventSuspended, subjects.EventCompleted, subjects.EventFailed, subjects.EventRecorded,
		subjects.EventReminded, subjects.EventEscalated, subjects.EventExpired:
		return true
	case subjects.EventDecisionAccepted, subjects.EventVoteRecorded:
		return ev.Verdict != nil && ev.Verdict.Approver != subjects.PolicyApprover
	}
	return false
}

// foreign returns an error matching ErrForeignRecord when e is not a
// client's write, and nil when it is.
func foreign(e jetstream.Entry) error {
	if err := jetstream.CheckPublished(e.Header); err != nil {
		return fmt.Errorf("run %s: %w at revision %d: %w", e.Key, ErrForeignRecord, e.Revision, err)
	}
	return nil
}

func decodeRun(run string, data []byte, rev uint64) (*subjects.Run, uint64, error) {
	var r subjects.Run
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, 0, fmt.Errorf("run record %s is corrupt: %w", run, err)
	}
	return &r, rev, nil
}

// Recent implements Recaller: the record of run this store last read or
// wrote, without asking the server, when it still remembers it. A store
// that puts records back remembers none: a bucket emptied and filled again
// restarts its revisions, and one remembered from before could match.
func (s *JetStream) Recent(run string) (*subjects.Run, uint64, bool) {
	if s.restoring() {
		return nil, 0, false
	}
	s.mu.Lock()
	e, ok := s.recent[run]
	s.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	r, rev, err := decodeRun(run, e.data, e.rev)
	return r, rev, err == nil
}

// GuessNew implements Recaller: not when the store puts records back,
// since a record missing from the bucket may be one to put back.
func (s *JetStream) GuessNew() bool { return !s.restoring() }

// remember keeps run's record at rev for Recent; when full it forgets
// arbitrary ones until it fits.
func (s *JetStream) remember(run string, data []byte, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(run)
	if len(data) > recentLargest {
		return
	}
	if s.recent == nil {
		s.recent = make(map[string]remembered, recentRecords)
	}
	for k := range s.recent {
		if len(s.recent) < recentRecords && s.recentSize+len(data) <= recentBytes {
			break
		}
		s.forgetLocked(k)
	}
	s.recent[run] = remembered{data: data, rev: rev}
	s.recentSize += len(data)
}

func (s *JetStream) forget(run string) {
	s.mu.Lock()
	s.forgetLocked(run)
	s.mu.Unlock()
}

func (s *JetStream) forgetLocked(run string) {
	if e, ok := s.recent[run]; ok {
		s.recentSize -= len(e.data)
		delete(s.recent, run)
	}
}

// PutRun implements Store.
func (s *JetStream) PutRun(ctx context.Context, r *subjects.Run, rev uint64) (uint64, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return 0, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	if s.copies() && int64(len(data)) > s.MaxRecord() {
		// Its sealed copy would not fit the event that must carry it.
		return 0, fmt.Errorf("run record %s: %w: %d bytes, over the %d a record whose copy rides in an event may have",
			r.RunID, ErrTooLarge, len(data), s.MaxRecord())
	}
	next, err := b.Update(ctx, r.RunID, data, rev)
	if err != nil {
		s.forget(r.RunID)
		return 0, err
	}
	s.remember(r.RunID, data, next)
	if s.copies() {
		s.mu.Lock()
		if s.written == nil || len(s.written) >= recentRecords {
			s.written = make(map[string]uint64)
		}
		s.written[writtenKey(r)] = next
		s.mu.Unlock()
	}
	return next, nil
}

// Runs implements Store. It reads the whole runs bucket: an operator's
// tool, not a hot path.
func (s *JetStream) Runs(ctx context.Context) ([]*subjects.Run, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return nil, err
	}
	keys, err := b.Keys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*subjects.Run, 0, len(keys))
	for _, key := range keys {
		data, rev, err := runEntry(ctx, b, key)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrForeignRecord) {
			continue // deleted since listed, or not a record
		}
		if err != nil {
			return nil, err
		}
		r, _, err := decodeRun(key, data, rev)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *subjects.Run) int {
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	return out, nil
}

// RunsPage implements Store with batched direct gets on the runs bucket
// (Bucket.Page).
func (s *JetStream) RunsPage(ctx context.Context, after uint64, limit int) ([]*subjects.Run, uint64, error) {
	b, err := s.bucket(ctx, jetstream.RunsBucket)
	if err != nil {
		return nil, 0, err
	}
	entries, _, err := b.Page(ctx, after, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*subjects.Run, 0, len(entries))
	for _, e := range entries {
		after = e.Revision
		if foreign(e) != nil {
			continue // not a record: an answer the server stored there
		}
		r, _, err := decodeRun(e.Key, e.Value, e.Revision)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, r)
	}
	return out, after, nil
}

// PendingPage implements Store with batched direct gets on the pending
// index (Bucket.Page).
func (s *JetStream) PendingPage(ctx context.Context, after uint64, limit int) ([]subjects.PendingInterrupt, uint64, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return nil, 0, err
	}
	entries, next, err := b.Page(ctx, after, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]subjects.PendingInterrupt, 0, len(entries))
	for _, e := range entries {
		if jetstream.CheckPublished(e.Header) != nil {
			continue // not the coordinator's put: an answer the server stored there (SweepIndex removes it)
		}
		var p subjects.PendingInterrupt
		if err := json.Unmarshal(e.Value, &p); err != nil {
			return nil, 0, fmt.Errorf("pending index entry %s: %w", e.Key, err)
		}
		out = append(out, p)
	}
	return out, next, nil
}

// Indexed implements Store with one get of the entry's key.
func (s *JetStream) Indexed(ctx context.Context, run, id string) (bool, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return false, err
	}
	// Whatever the key holds but a delete: an answer the server stored
	// there is removed with the entry it replaced.
	return b.Has(ctx, subjects.PendingKey(run, id))
}

// PendingCount implements Store from the pending bucket's stream state:
// removals leave markers that expire after a second (KVDeleteMsg), and the
// index's own marker (IndexMarker) is not counted.
func (s *JetStream) PendingCount(ctx context.Context) (int, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return 0, err
	}
	n, err := b.Count(ctx)
	if err != nil {
		return 0, err
	}
	if _, _, merr := s.IndexMarker(ctx); merr == nil && n > 0 {
		n--
	}
	return int(n), nil
}

// indexMarkerKey is the key of the pending index's marker: not an entry's
// key (<run>.<24 hex digits>), and a delete marker, which every reader of
// the index skips.
const indexMarkerKey = subjects.NoRun + ".index"

// IndexMarker implements Store: the delete marker under indexMarkerKey.
func (s *JetStream) IndexMarker(ctx context.Context) (IndexMarker, uint64, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return IndexMarker{}, 0, err
	}
	body, seq, err := b.Marker(ctx, indexMarkerKey)
	if err != nil {
		return IndexMarker{}, seq, err
	}
	var m IndexMarker
	if err := json.Unmarshal(body, &m); err != nil {
		return IndexMarker{}, 0, fmt.Errorf("pending index marker: %w", err)
	}
	return m, seq, nil
}

// PutIndexMarker implements Store.
func (s *JetStream) PutIndexMarker(ctx context.Context, m IndexMarker, last uint64) (uint64, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	return b.PutMarker(ctx, indexMarkerKey, body, last)
}

// IndexEpoch implements Store with the index's stream info (Bucket.Epoch).
func (s *JetStream) IndexEpoch(ctx context.Context) (string, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return "", err
	}
	return b.Epoch(ctx)
}

// SweepIndex implements Store: the index's keys in the order they were
// last written (Bucket.Page), until one written at or after before, each
// stale one removed with compare-and-set on its revision.
func (s *JetStream) SweepIndex(ctx context.Context, before uint64, stale func(context.Context, subjects.PendingInterrupt) (bool, error)) (int, error) {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err != nil {
		return 0, err
	}
	removed := 0
	for after := uint64(0); ; {
		entries, next, err := b.Page(ctx, after, 256)
		if err != nil {
			return removed, err
		}
		for _, e := range entries {
			if e.Revision >= before {
				return removed, nil
			}
			// Not the coordinator's put (an answer the server stored there
			// for another user) is stale whatever it says.
			gone := jetstream.CheckPublished(e.Header) != nil
			if !gone {
				var p subjects.PendingInterrupt
				if err := json.Unmarshal(e.Value, &p); err != nil {
					return removed, fmt.Errorf("pending index entry %s: %w", e.Key, err)
				}
				if gone, err = stale(ctx, p); err != nil {
					return removed, fmt.Errorf("pending index entry %s: %w", e.Key, err)
				}
			}
			if !gone {
				continue
			}
			switch err := b.DeleteAt(ctx, e.Key, e.Revision); {
			case errors.Is(err, ErrConflict):
				// written again since the page was read: not stale
			case err != nil:
				return removed, err
			default:
				removed++
			}
		}
		if next == 0 {
			return removed, nil
		}
		after = next
	}
}

// LastSuspension implements Store with one direct get of the last message
// on run's suspension subjects in the runs stream.
func (s *JetStream) LastSuspension(ctx context.Context, run string) (uint64, error) {
	filter, err := s.c.Namespace().RunSuspensions(run)
	if err != nil {
		return 0, fmt.Errorf("last suspension: %w", err)
	}
	last, err := s.c.LastMsg(ctx, jetstream.StreamRuns, filter)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil || jetstream.CheckPublished(last.Header) == nil {
		return last.Sequence, err
	}
	// An answer the server stored on the run's suspension subject for
	// another user (its outcome consumer refuses it) is no suspension: the
	// last of the run's that an agent published.
	var seq uint64
	_, _, err = s.find(ctx, jetstream.StreamRuns, filter, func(m jetstream.StoredMsg) bool {
		seq = m.Sequence
		return false
	})
	return seq, err
}

// MaxRecord implements Store: the server's max payload; for a store that
// seals records into the trail, subjects.RecordLimit of it, so that a
// record's copy fits the event that carries it.
func (s *JetStream) MaxRecord() int64 {
	if !s.copies() {
		return s.c.MaxPayload()
	}
	return subjects.RecordLimit(s.c.MaxPayload())
}

// eventsBatch is how many events one request reads.
const eventsBatch = 1024

// Events implements Store: one batched direct get per eventsBatch events
// (Client.Messages).
func (s *JetStream) Events(ctx context.Context, run string, after uint64) ([]subjects.Event, uint64, error) {
	filter, err := s.c.Namespace().RunEvents(run)
	if err != nil {
		return nil, after, err
	}
	var out []subjects.Event
	start := after
	for {
		msgs, err := s.c.Messages(ctx, jetstream.StreamEvents, filter, after+1, eventsBatch)
		if err != nil {
			return nil, start, err
		}
		for _, m := range msgs {
			after = m.Sequence
			if jetstream.CheckPublished(m.Header) != nil {
				continue // an answer the server stored here for another user, not the coordinator's entry
			}
			// Type and run from where the entry was stored, not its body.
			if ev, err := subjects.StoredEvent(s.c.Namespace(), m.Subject, m.Data); err == nil {
				out = append(out, ev)
			}
		}
		if len(msgs) < eventsBatch {
			return out, after, nil
		}
	}
}

// AgentWork is the work waiting for one agent: first passes and replays no
// worker has finished yet.
type AgentWork struct {
	Agent string `json:"agent"`
	// Waiting counts work items in the work queue for the agent.
	Waiting uint64 `json:"waiting"`
	// Served says whether a worker is consuming the agent's work now: it
	// is pulling, or holds items it has not acked. Work waiting unserved
	// is stuck until a worker for the agent starts; its runs stay in
	// resuming.
	Served bool `json:"served"`
}

// WorkBacklog lists, by agent name, the agents with work waiting.
func WorkBacklog(ctx context.Context, c *jetstream.Client) ([]AgentWork, error) {
	// First passes wait on <prefix>.start.<agent>, replays on
	// <prefix>.work.<agent>: both are the agent's work.
	counts := map[string]uint64{}
	for _, filter := range c.Namespace().Backlog() {
		bySubject, err := c.SubjectCounts(ctx, jetstream.StreamWork, filter)
		if err != nil {
			return nil, err
		}
		for subject, n := range bySubject {
			if a, err := c.Namespace().Parse(subject); err == nil {
				counts[a.Agent] += n
			}
		}
	}
	var out []AgentWork
	for agent, n := range counts {
		if n == 0 {
			continue
		}
		st, err := c.ConsumerState(ctx, jetstream.StreamWork, subjects.WorkerDurable(agent))
		if err != nil && !errors.Is(err, jetstream.ErrNotFound) {
			return nil, err
		}
		out = append(out, AgentWork{Agent: agent, Waiting: n, Served: err == nil && (st.Waiting > 0 || st.AckPending > 0)})
	}
	slices.SortFunc(out, func(a, b AgentWork) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}

// Commit implements Store: every write of fx is one message, published
// together; each carries a message id (index puts and events) or is
// idempotent (index deletes).
func (s *JetStream) Commit(ctx context.Context, fx Effects) error {
	var writes uint64 // of the record the effects follow; 0: none
	if fx.Record != nil {
		writes = fx.Record.Writes
	}
	if s.copies() && fx.Record != nil {
		if len(fx.Events) == 0 {
			return fmt.Errorf("run %s: a record change committed without an event to carry its copy", fx.Record.RunID)
		}
		stored, err := s.storeCopy(ctx, fx.Record, fx.Events[0])
		if err != nil {
			return err
		}
		if stored {
			fx.Events = fx.Events[1:]
		}
		fx.Record = nil
	}
	msgs := make([]jetstream.OutMsg, 0, len(fx.Index)+len(fx.Unindex)+len(fx.Events)+len(fx.Messages))
	for _, p := range fx.Index {
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		id := s.msgID(IndexMsgID(p))
		if fx.Rebuild {
			id += ":rebuilt:" + uuid.NewString()
		}
		msgs = append(msgs, s.c.KVPutMsg(jetstream.PendingBucket, subjects.PendingKey(p.RunID, p.ID), data, id))
	}
	for _, r := range fx.Unindex {
		msgs = append(msgs, s.c.KVDeleteMsg(jetstream.PendingBucket, subjects.PendingKey(r.RunID, r.InterruptID)))
	}
	indexed := len(msgs)
	for _, ev := range fx.Events {
		m, err := s.eventMsg(ev, writes)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, fx.Messages...)
	if len(msgs) == 0 {
		return nil
	}
	err := s.c.PublishAll(ctx, msgs...)
	if err == nil || indexed == 0 || !s.indexMissing(ctx) {
		return err
	}
	// The index's bucket is gone (memory-backed, on a server that
	// restarted): a coordinator builds the whole index again from the
	// records once it is back (IndexMarker), so its writes are dropped
	// here rather than retried with the input until then.
	if len(msgs) > indexed {
		return s.c.PublishAll(ctx, msgs[indexed:]...)
	}
	return nil
}

// indexMissing reports whether the pending index's bucket does not exist.
func (s *JetStream) indexMissing(ctx context.Context) bool {
	b, err := s.bucket(ctx, jetstream.PendingBucket)
	if err == nil {
		_, err = b.Count(ctx)
	}
	return errors.Is(err, ErrNotFound) || errors.Is(err, jetstream.ErrNotProvisioned)
}

// IndexMsgID is the message id of p's put into the pending index: one per
// interrupt and record write (a suspension, an escalation, a vote, a
// withdrawal), so the put of one repeated after a crash is stored once. The
// store tags it (SignIDs).
func IndexMsgID(p subjects.PendingInterrupt) string {
	// The record write that put it (its time): a withdrawal leaves an entry
	// with no votes, as at its first put, and must not share that put's id.
	id := "pending:" + subjects.PendingKey(p.RunID, p.ID) + ":" + strconv.Itoa(p.Escalations) + ":" +
		strconv.FormatInt(p.SuspendedAt.UnixNano(), 36)
	if len(p.Votes) > 0 {
		// Put again with each vote (decision policies): the votes so far,
		// by identity and stream sequence, tell the puts apart.
		h := sha256.New()
		for _, v := range p.Votes {
			h.Write([]byte(v.Approver + "\x00" + strconv.FormatUint(v.Seq, 10) + "\x00"))
		}
		id += ":v" + hex.EncodeToString(h.Sum(nil)[:8])
	}
	return id
}

// EventMsg is the message of ev on its run's events subject (the no-run
// subject when its run id is not a valid token), deduplicated by its run,
// ev.Dedup and its type.
func EventMsg(ns subjects.Namespace, ev Event) (jetstream.OutMsg, error) {
	run := ev.Run()
	subject, err := ns.Events(run, ev.Type)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	data, err := json.Marshal(ev.Event)
	if err != nil {
		return jetstream.OutMsg{}, err
	}
	m := jetstream.OutMsg{Subject: subject, Data: data, MsgID: ev.MsgID()}
	if trace.Valid(ev.TraceParent) {
		m.Header = jetstream.Header{trace.Header: {trace.Child(ev.TraceParent)}}
	}
	return m, nil
}

// eventMsg is ev's message as this store publishes it: its id tagged
// (SignIDs), and, when it seals copies, with the writes of the record it
// follows (jetstream.HeaderRecordWrites; 0 for none), which latestCopy
// reads.
func (s *JetStream) eventMsg(ev Event, writes uint64) (jetstream.OutMsg, error) {
	m, err := EventMsg(s.c.Namespace(), ev)
	if err != nil {
		return m, err
	}
	m.MsgID = s.msgID(m.MsgID)
	if s.copies() {
		if m.Header == nil {
			m.Header = jetstream.Header{}
		}
		m.Header[jetstream.HeaderRecordWrites] = []string{strconv.FormatUint(writes, 10)}
	}
	return m, nil
}
