// Package memstore is a Store kept in memory: for tests of code that
// reads and writes run records without a NATS server, and as the second
// implementation the conformance suite (store/storetest) holds the
// JetStream one to.
package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Store is a store.Store in memory. Records are kept encoded, as the
// JetStream store keeps them, so a caller never shares a record with it.
type Store struct {
	mu   sync.Mutex
	runs map[string]entry
	rev  uint64
	// seq orders the index's entries and the events, as a stream's
	// sequence does.
	seq      uint64
	pending  map[string]indexed
	events   map[string][]event
	seen     map[string]bool
	messages []jetstream.OutMsg
	// suspended holds, by run, the sequence of its latest suspension
	// (Suspended); maxRecord bounds a record (SetMaxRecord).
	suspended map[string]uint64
	maxRecord int64
	// marker is the index's marker and markerSeq its sequence (0: none).
	marker    store.IndexMarker
	markerSeq uint64
	// epoch is IndexEpoch's answer (SetIndexEpoch).
	epoch string
}

// DefaultMaxRecord is a new Store's MaxRecord: NATS's default max payload.
const DefaultMaxRecord = 1 << 20

type indexed struct {
	subjects.PendingInterrupt
	seq uint64
}

type event struct {
	subjects.Event
	seq uint64
}

type entry struct {
	data []byte
	rev  uint64
}

// New returns an empty store.
func New() *Store {
	return &Store{runs: map[string]entry{}, pending: map[string]indexed{},
		events: map[string][]event{}, seen: map[string]bool{}, suspended: map[string]uint64{},
		maxRecord: DefaultMaxRecord}
}

// Suspended tells the store that the runs stream holds a suspension of
// run at stream sequence seq, as a worker's publish does for the
// JetStream store; LastSuspension reports the highest.
func (s *Store) Suspended(run string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.suspended[run] = max(s.suspended[run], seq)
}

// SetMaxRecord sets the size over which PutRun refuses a record, as a
// server with a lower max payload would.
func (s *Store) SetMaxRecord(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxRecord = n
}

// LastSuspension implements store.Store from what Suspended was told.
func (s *Store) LastSuspension(_ context.Context, run string) (uint64, error) {
	if err := subjects.ValidateToken("run id", run); err != nil {
		return 0, fmt.Errorf("last suspension: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended[run], nil
}

// MaxRecord implements store.Store.
func (s *Store) MaxRecord() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRecord
}

var _ store.Store = (*Store)(nil)

// Run implements store.Store.
func (s *Store) Run(_ context.Context, run string) (*subjects.Run, uint64, error) {
	s.mu.Lock()
	e, ok := s.runs[run]
	s.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("run %s: %w", run, store.ErrNotFound)
	}
	var r subjects.Run
	if err := json.Unmarshal(e.data, &r); err != nil {
		return nil, 0, err
	}
	return &r, e.rev, nil
}

// PutRun implements store.Store. Revisions grow across the store, as a
// stream's sequence does.
func (s *Store) PutRun(_ context.Context, r *subjects.Run, rev uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(len(data)) > s.maxRecord {
		return 0, fmt.Errorf("run %s: record of %d bytes over %d: %w", r.RunID, len(data), s.maxRecord, store.ErrTooLarge)
	}
	if s.runs[r.RunID].rev != rev {
		return 0, fmt.Errorf("run %s at revision %d: %w", r.RunID, rev, store.ErrConflict)
	}
	s.rev++
	s.runs[r.RunID] = entry{data: data, rev: s.rev}
	return s.rev, nil
}

// Runs implements store.Store.
func (s *Store) Runs(ctx context.Context) ([]*subjects.Run, error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.runs))
	for id := range s.runs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	out := make([]*subjects.Run, 0, len(ids))
	for _, id := range ids {
		r, _, err := s.Run(ctx, id)
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

// RunsPage implements store.Store, in the order of the records' revisions.
func (s *Store) RunsPage(_ context.Context, after uint64, limit int) ([]*subjects.Run, uint64, error) {
	s.mu.Lock()
	all := written(s.runs, after, func(e entry) uint64 { return e.rev })
	s.mu.Unlock()
	if len(all) > limit {
		all = all[:limit]
	}
	out := make([]*subjects.Run, 0, len(all))
	for _, e := range all {
		var r subjects.Run
		if err := json.Unmarshal(e.data, &r); err != nil {
			return nil, 0, err
		}
		out = append(out, &r)
		after = e.rev
	}
	return out, after, nil
}

// PendingPage implements store.Store.
func (s *Store) PendingPage(_ context.Context, after uint64, limit int) ([]subjects.PendingInterrupt, uint64, error) {
	s.mu.Lock()
	all := written(s.pending, after, func(p indexed) uint64 { return p.seq })
	s.mu.Unlock()
	var next uint64
	if len(all) > limit {
		all, next = all[:limit], all[limit-1].seq
	}
	out := make([]subjects.PendingInterrupt, 0, len(all))
	for _, p := range all {
		out = append(out, p.PendingInterrupt)
	}
	return out, next, nil
}

// Indexed implements store.Store.
func (s *Store) Indexed(_ context.Context, run, id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[subjects.PendingKey(run, id)]
	return ok, nil
}

// PendingCount implements store.Store.
func (s *Store) PendingCount(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending), nil
}

// Events implements store.Store.
func (s *Store) Events(_ context.Context, run string, after uint64) ([]subjects.Event, uint64, error) {
	if err := subjects.ValidateToken("run id", run); err != nil {
		return nil, after, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []subjects.Event
	for _, ev := range s.events[run] {
		if ev.seq > after {
			out, after = append(out, ev.Event), ev.seq
		}
	}
	return out, after, nil
}

// Commit implements store.Store, with the JetStream store's message ids:
// an index put, an event or a message already committed is not repeated.
// Its duplicate window never closes.
func (s *Store) Commit(_ context.Context, fx store.Effects) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range fx.Index {
		// The same put again (its message id seen) stores nothing, even
		// after the entry was removed, as in the JetStream store.
		if id := store.IndexMsgID(p); fx.Rebuild || !s.seen[id] {
			s.seen[id] = true
			s.seq++
			s.pending[subjects.PendingKey(p.RunID, p.ID)] = indexed{PendingInterrupt: p, seq: s.seq}
		}
	}
	for _, r := range fx.Unindex {
		delete(s.pending, subjects.PendingKey(r.RunID, r.InterruptID))
	}
	for _, ev := range fx.Events {
		if id := ev.MsgID(); !s.seen[id] {
			s.seen[id] = true
			s.seq++
			s.events[ev.Run()] = append(s.events[ev.Run()], event{Event: ev.Event, seq: s.seq})
		}
	}
	for _, m := range fx.Messages {
		if m.MsgID != "" && s.seen[m.MsgID] {
			continue
		}
		s.seen[m.MsgID] = true
		s.messages = append(s.messages, m)
	}
	return nil
}

// Messages returns the messages committed for subjects outside the store,
// in order.
func (s *Store) Messages() []jetstream.OutMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages)
}

// IndexMarker implements store.Store.
func (s *Store) IndexMarker(context.Context) (store.IndexMarker, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.markerSeq == 0 {
		return store.IndexMarker{}, 0, fmt.Errorf("index marker: %w", store.ErrNotFound)
	}
	return s.marker, s.markerSeq, nil
}

// PutIndexMarker implements store.Store.
func (s *Store) PutIndexMarker(_ context.Context, m store.IndexMarker, last uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last != s.markerSeq {
		return 0, fmt.Errorf("index marker at %d, not %d: %w", s.markerSeq, last, store.ErrConflict)
	}
	s.seq++
	s.marker, s.markerSeq = m, s.seq
	return s.seq, nil
}

// IndexEpoch implements store.Store: a store in one process has no
// replicas to lose writes with, unless a test set an epoch (SetIndexEpoch).
func (s *Store) IndexEpoch(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, nil
}

// SetIndexEpoch sets what IndexEpoch returns, as a new leader of a
// replicated index's stream would change it.
func (s *Store) SetIndexEpoch(epoch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch = epoch
}

// SweepIndex implements store.Store; stale is asked without the store's
// lock held (it may read the store).
func (s *Store) SweepIndex(ctx context.Context, before uint64, stale func(context.Context, subjects.PendingInterrupt) (bool, error)) (int, error) {
	s.mu.Lock()
	old := map[string]indexed{}
	for k, p := range s.pending {
		if p.seq < before {
			old[k] = p
		}
	}
	s.mu.Unlock()
	removed := 0
	for k, p := range old {
		gone, err := stale(ctx, p.PendingInterrupt)
		if err != nil {
			return removed, err
		}
		if !gone {
			continue
		}
		s.mu.Lock()
		if now, ok := s.pending[k]; ok && now.seq == p.seq {
			delete(s.pending, k)
			removed++
		}
		s.mu.Unlock()
	}
	return removed, nil
}

// LoseIndex empties the pending index, its marker and the message ids of
// its puts, as a server restart does to a memory-backed index.
func (s *Store) LoseIndex() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = map[string]indexed{}
	for id := range s.seen {
		if strings.HasPrefix(id, "pending:") {
			delete(s.seen, id)
		}
	}
	s.marker, s.markerSeq = store.IndexMarker{}, 0
}

// ReplaceIndexMarker puts m as the index's marker at the sequence the
// marker has now: what another coordinator's claim looks like when the
// index was lost and its stream, recreated, reached that sequence again.
func (s *Store) ReplaceIndexMarker(m store.IndexMarker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker = m
}

// written is what m holds written after sequence after (seq of each), in
// the order written.
func written[T any](m map[string]T, after uint64, seq func(T) uint64) []T {
	var out []T
	for _, v := range m {
		if seq(v) > after {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return out
}
