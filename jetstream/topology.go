package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/subjects"
)

// Stream is one of Interlock's streams.
type Stream string

// Interlock's streams.
const (
	StreamWork      Stream = "WORK"
	StreamRuns      Stream = "RUNS"
	StreamDecisions Stream = "DECISIONS"
	StreamEvents    Stream = "EVENTS"
	StreamDLQ       Stream = "DLQ"
	StreamTimers    Stream = "TIMERS"
	// StreamAGUI keeps the AG-UI events run bodies emit, for the bridge.
	StreamAGUI Stream = "AGUI"
	// StreamObserved holds what the notifier and the gateway observe
	// until the coordinator has recorded it in the events stream, which
	// only the coordinator writes.
	StreamObserved Stream = "OBSERVED"
)

// Streams are all of Interlock's streams.
var Streams = []Stream{StreamWork, StreamRuns, StreamDecisions, StreamEvents, StreamDLQ, StreamTimers, StreamAGUI, StreamObserved}

// StreamName is the server-side name of s under the client's prefix.
func (c *Client) StreamName(s Stream) string {
	return strings.ToUpper(strings.ReplaceAll(c.cfg.Prefix, ".", "_")) + "_" + string(s)
}

func (c *Client) streamConfigs(replicas int) []jetstream.StreamConfig {
	storage := c.storage()
	base := func(s Stream, maxAge time.Duration, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       c.StreamName(s),
			Subjects:   subjects,
			Storage:    storage,
			Replicas:   replicas,
			MaxAge:     maxAge,
			Duplicates: c.cfg.DuplicateWindow,
			Discard:    jetstream.DiscardOld,
		}
	}
	ns := c.ns
	work := base(StreamWork, 0, ns.All(subjects.KindWork), ns.All(subjects.KindStart))
	work.Retention = jetstream.WorkQueuePolicy
	// Timers: schedules wait in the stream until they fire; fired timers are
	// deleted once the coordinator acks them. Never aged out.
	timers := base(StreamTimers, 0, ns.All(subjects.KindTimers))
	timers.Retention = jetstream.WorkQueuePolicy
	timers.AllowMsgSchedules = true
	// Observations wait until the coordinator has recorded them.
	observed := base(StreamObserved, c.cfg.MaxAge, ns.All(subjects.KindObserved))
	observed.Retention = jetstream.WorkQueuePolicy
	// The server allows rollups with schedules (a schedule replaces the
	// one before it); saying so keeps the topology check exact.
	timers.AllowRollup = true
	// Decisions and the audit trail: nobody deletes or purges them, not
	// even an admin; they leave only by their retention.
	decisions := base(StreamDecisions, c.cfg.MaxAge, ns.All(subjects.KindResume))
	events := base(StreamEvents, c.cfg.EventsMaxAge, ns.All(subjects.KindEvents))
	for _, sc := range []*jetstream.StreamConfig{&decisions, &events} {
		sc.DenyDelete, sc.DenyPurge = true, true
	}
	// Events, AG-UI events and dead letters are read in batches
	// (Messages), with direct gets.
	agui := base(StreamAGUI, c.cfg.MaxAge, ns.All(subjects.KindAGUI))
	dlq := base(StreamDLQ, c.cfg.MaxAge, ns.All(subjects.KindDLQ))
	// The runs stream too: a worker reads the last message on its own
	// agent's subjects of a run (has this pass reported?) with a direct get
	// naming the subject, which per-agent permissions can confine.
	runs := base(StreamRuns, c.cfg.MaxAge, ns.All(subjects.KindSuspended), ns.All(subjects.KindCompleted), ns.All(subjects.KindFailed),
		ns.All(subjects.KindReminder), ns.All(subjects.KindEscalated), ns.All(subjects.KindExpired))
	for _, sc := range []*jetstream.StreamConfig{&events, &agui, &dlq, &runs} {
		sc.AllowDirect = true
	}
	return []jetstream.StreamConfig{
		work,
		timers,
		runs,
		decisions,
		events,
		dlq,
		agui,
		observed,
	}
}

// ErrRetention means the audit trail would be deleted before the runs it
// describes.
var ErrRetention = errors.New("events retention shorter than runs retention")

// Provision creates Interlock's streams and KV buckets, or brings existing
// ones up to the client's Config without ever lowering what is there:
// replicas, retention and the duplicate window are raised, never reduced,
// and whatever else an operator set is kept. The decisions and events
// streams deny message deletes and purges (the server allows that to be
// set, never unset). What is missing is created with the Config's replicas
// or, when Interlock's existing streams have more, with as many as they
// have. It is idempotent, and safe to run from any number of processes at
// once: a provisioner that loses a race to create something, or finds a
// cluster still forming or electing, reads again and converges, until ctx
// ends (6 times Config.Timeout when ctx has no deadline).
//
// Only the roles that provision call it: `interlock provision` and `serve`
// (the admin and coordinator users). A client that has provisioned also
// creates the consumers and buckets it uses; any other client binds to the
// ones that exist and fails with ErrNotProvisioned when one is missing, so
// agents, notifiers and gateways need no rights to change streams.
func (c *Client) Provision(ctx context.Context) error {
	if c.cfg.EventsMaxAge != 0 && (c.cfg.MaxAge == 0 || c.cfg.EventsMaxAge < c.cfg.MaxAge) {
		return fmt.Errorf("%w: events kept %s, runs kept %s: audit events must outlive the runs",
			ErrRetention, c.cfg.EventsMaxAge, orForever(c.cfg.MaxAge))
	}
	replicas, err := c.existingReplicas(ctx)
	if err != nil {
		return fmt.Errorf("provision: %w", translate(err))
	}
	replicas = max(replicas, c.cfg.Replicas)
	if err := c.checkRecordsReplicas(ctx, replicas); err != nil {
		return err
	}
	for _, sc := range c.streamConfigs(replicas) {
		if err := c.provisionStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, translate(err))
		}
	}
	for _, b := range c.coreBuckets(replicas) {
		if _, err := c.provisionBucket(ctx, b, false); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Bucket, translate(err))
		}
	}
	if err := c.provisionKeys(ctx, replicas); err != nil {
		return err
	}
	c.mu.Lock()
	c.provisioner = true
	c.replicas = replicas
	c.mu.Unlock()
	return nil
}

// ProvisionPending creates the pending index's bucket when it is missing
// (a memory-backed index on a single server is gone after the server
// restarts), with the replicas of the streams that exist; like Provision,
// only for a client that provisions.
func (c *Client) ProvisionPending(ctx context.Context) error {
	return c.provisionMissing(ctx, PendingBucket)
}

// ProvisionRuns creates the runs bucket when it is missing (a bucket kept
// in memory on a single server is gone after the server restarts, and the
// coordinator puts its records back from the audit trail) with storage,
// as it was, and the replicas of the streams that exist; like Provision,
// only for a client that provisions.
func (c *Client) ProvisionRuns(ctx context.Context, storage Storage) error {
	return c.provisionMissing(ctx, RunsBucket, storageType(storage))
}

// MayComeBackOlder reports whether a stream can come back older than what
// it acknowledged, not empty, when most of its replicas restart at once: one
// kept in memory with more than one replica, whose Raft log does not
// survive a restart, so the replica left may be one that had not yet
// stored the last writes. Such a loss always comes with a new leader
// (Bucket.Epoch).
func MayComeBackOlder(inMemory bool, replicas int) bool { return inMemory && replicas > 1 }

// RecordsReplicasRefused is the one rule for where run records may be kept
// in memory: a runs bucket that may come back older (MayComeBackOlder) is
// refused (ErrReplicatedMemoryRecords).
func RecordsReplicasRefused(inMemory bool, replicas int) bool {
	return MayComeBackOlder(inMemory, replicas)
}

// checkRecordsReplicas refuses, before anything is written, to provision
// with replicas a runs bucket that keeps its records in memory: the one
// that exists, or else the one this client would create
// (ErrReplicatedMemoryRecords).
func (c *Client) checkRecordsReplicas(ctx context.Context, replicas int) error {
	if !RecordsReplicasRefused(true, replicas) {
		return nil // no storage is refused with these replicas: no need to look
	}
	name := c.BucketStreamName(RunsBucket)
	var have *jetstream.StreamConfig
	err := c.converge(ctx, func(ctx context.Context) error {
		st, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err == nil {
			cfg := st.CachedInfo().Config
			have = &cfg
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("provision: %w", translate(err))
	case have == nil && RecordsReplicasRefused(c.recordsStorage() == jetstream.MemoryStorage, replicas):
		return fmt.Errorf("provision: %w: asked for %d replicas (records in memory: one replica; on a cluster, keep them on disk)",
			ErrReplicatedMemoryRecords, replicas)
	case have != nil && RecordsReplicasRefused(have.Storage == jetstream.MemoryStorage, replicas):
		return fmt.Errorf("provision: %w: %s keeps its records in memory, and %d replicas are asked for; to replicate it, "+
			"delete the stream %s and provision with records on disk (the coordinator puts the records back from the audit trail)",
			ErrReplicatedMemoryRecords, name, replicas, name)
	}
	return nil
}

// provisionMissing creates the core bucket name (RunsBucket, PendingBucket)
// when it is missing, with the replicas of the streams that exist, and
// storage when one is given.
func (c *Client) provisionMissing(ctx context.Context, name string, storage ...jetstream.StorageType) error {
	replicas, err := c.existingReplicas(ctx)
	if err != nil {
		return fmt.Errorf("provision: %w", translate(err))
	}
	for _, b := range c.coreBuckets(max(replicas, c.cfg.Replicas)) {
		if b.Bucket != c.BucketName(name) {
			continue
		}
		if len(storage) > 0 {
			b.Storage = storage[0]
		}
		if _, err := c.provisionBucket(ctx, b, false); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Bucket, translate(err))
		}
	}
	return nil
}

// BucketInMemory reports whether the core bucket name (RunsBucket,
// PendingBucket) keeps its entries in memory. A runs bucket in memory
// with more than one replica fails with ErrReplicatedMemoryRecords.
func (c *Client) BucketInMemory(ctx context.Context, name string) (bool, error) {
	var mem bool
	var replicas int
	err := c.converge(ctx, func(ctx context.Context) error {
		st, err := c.js.Stream(ctx, c.BucketStreamName(name))
		if err == nil {
			mem = st.CachedInfo().Config.Storage == jetstream.MemoryStorage
			replicas = st.CachedInfo().Config.Replicas
		}
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, fmt.Errorf("%w: bucket %s", ErrNotProvisioned, c.BucketName(name))
	}
	if err == nil && name == RunsBucket && RecordsReplicasRefused(mem, replicas) {
		return true, fmt.Errorf("%w: bucket %s has %d replicas; delete its stream %s and provision with records on disk "+
			"(the coordinator puts the records back from the audit trail)", ErrReplicatedMemoryRecords, c.BucketName(name),
			replicas, c.BucketStreamName(name))
	}
	return mem, translate(err)
}

// existingReplicas is the most replicas any of Interlock's streams has
// (0 when none exists), so that a client configured with fewer (the
// default, one) creates what is missing with as many as the rest.
func (c *Client) existingReplicas(ctx context.Context) (int, error) {
	most := 0
	for _, sc := range c.streamConfigs(0) {
		err := c.converge(ctx, func(ctx context.Context) error {
			st, err := c.js.Stream(ctx, sc.Name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err == nil {
				most = max(most, st.CachedInfo().Config.Replicas)
			}
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	return most, nil
}

// provisionedReplicas is what the client creates streams and buckets with.
func (c *Client) provisionedReplicas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.replicas, c.cfg.Replicas)
}

// Provisioner reports whether this client has provisioned, and so creates
// the consumers and buckets it uses instead of binding to existing ones.
func (c *Client) Provisioner() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.provisioner
}

func (c *Client) storage() jetstream.StorageType { return storageType(c.cfg.Storage) }

// pendingStorage is where a new pending index keeps its entries
// (Config.PendingStorage).
func (c *Client) pendingStorage() jetstream.StorageType {
	return c.derivedStorage(c.cfg.PendingStorage)
}

// recordsStorage is where a new runs bucket keeps the run records
// (Config.RecordsStorage).
func (c *Client) recordsStorage() jetstream.StorageType {
	if c.cfg.RecordsStorage == AutoStorage {
		return jetstream.FileStorage // memory only where asked for: see ErrReplicatedMemoryRecords
	}
	return storageType(c.cfg.RecordsStorage)
}

// derivedStorage is the storage type of s, AutoStorage picked by the
// deployment.
func (c *Client) derivedStorage(s Storage) jetstream.StorageType {
	if s == AutoStorage {
		if c.nc.ConnectedClusterName() != "" {
			return jetstream.MemoryStorage
		}
		return jetstream.FileStorage
	}
	return storageType(s)
}

func storageType(s Storage) jetstream.StorageType {
	if s == MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// provisionStream creates want, or raises an existing stream to it.
func (c *Client) provisionStream(ctx context.Context, want jetstream.StreamConfig) error {
	return c.ensureStream(ctx, want.Name, func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, want)
		return err
	}, func(have jetstream.StreamConfig) jetstream.StreamConfig { return raiseStream(have, want) })
}

// ensureStream creates stream name with create when it does not exist, or
// updates it to raise(its config) when that differs; converging with other
// provisioners (an "already in use" from create reads it again).
func (c *Client) ensureStream(ctx context.Context, name string, create func(context.Context) error,
	raise func(jetstream.StreamConfig) jetstream.StreamConfig) error {
	return c.converge(ctx, func(ctx context.Context) error {
		st, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return create(ctx)
		}
		if err != nil {
			return err
		}
		have := st.CachedInfo().Config
		next := raise(have)
		if reflect.DeepEqual(next, have) {
			return nil
		}
		_, err = c.js.UpdateStream(ctx, next)
		return err
	})
}

// provisionAttempt bounds one attempt of a provisioning step, so that a
// request lost while a cluster forms is asked again instead of waited for.
const provisionAttempt = 3 * time.Second

// converge runs step until it succeeds or fails for good. Another
// provisioner creating the same thing at the same moment ("already in
// use"), a cluster still forming or electing (ErrUnavailable) and an
// attempt that timed out are retried, each attempt reading the server's
// state afresh, until ctx ends (6 times the client's Timeout when it has no
// deadline).
func (c *Client) converge(ctx context.Context, step func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 6*c.cfg.Timeout)
		defer cancel()
	}
	return retry(ctx, min(provisionAttempt, c.cfg.Timeout), racing, step)
}

// raiseStream is have with want's subjects and features, and the larger of
// each limit Interlock sets. Everything else of have is kept.
func raiseStream(have, want jetstream.StreamConfig) jetstream.StreamConfig {
	next := have
	next.Subjects = want.Subjects
	next.Replicas = max(have.Replicas, want.Replicas)
	next.MaxAge = longer(have.MaxAge, want.MaxAge)
	next.Duplicates = max(have.Duplicates, want.Duplicates)
	next.DenyDelete = have.DenyDelete || want.DenyDelete
	next.DenyPurge = have.DenyPurge || want.DenyPurge
	next.AllowMsgSchedules = have.AllowMsgSchedules || want.AllowMsgSchedules
	next.AllowDirect = have.AllowDirect || want.AllowDirect
	return next
}

// longer is the longer of two retention ages, zero meaning forever.
func longer(a, b time.Duration) time.Duration {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

// provisionBucket creates the bucket, or raises an existing one's replicas
// and TTL to cfg's; it never lowers them and keeps whatever else an
// operator set (history, size limits). The pending index's bucket also
// allows message TTLs, so that its delete markers expire (KVDeleteMsg) and
// its count can be read from the stream's state; that is raised on an
// existing bucket, never taken away, and every raise of it carries it, so
// provisioners running at once never undo each other's. No bucket allows
// rollups (nats.go creates buckets with them, for KeyValue.Purge, which
// Interlock does not use): with them, whoever may put one key could erase
// every key with a "Nats-Rollup: all" header. A bucket made once (the
// keys bucket, OnceBucket's) refuses a second write of a key
// (discard_new_per_subject) and allows message TTLs: the server sends a
// JetStream API answer to whatever subject its request names, with its own
// rights, so a user allowed one read could otherwise replace a key with
// bytes of its choosing (docs/security.md, "Answers the server sends for
// you").
func (c *Client) provisionBucket(ctx context.Context, cfg jetstream.KeyValueConfig, once bool) (jetstream.KeyValue, error) {
	pending := cfg.Bucket == c.BucketName(PendingBucket)
	msgTTL := pending || once
	records := cfg.Bucket == c.BucketName(RunsBucket)
	if records && RecordsReplicasRefused(cfg.Storage == jetstream.MemoryStorage, cfg.Replicas) {
		return nil, fmt.Errorf("%w: asked for %d replicas", ErrReplicatedMemoryRecords, cfg.Replicas)
	}
	refused := false
	raise := func(have jetstream.StreamConfig) jetstream.StreamConfig {
		next := have
		next.Replicas = max(have.Replicas, cfg.Replicas)
		if records && RecordsReplicasRefused(have.Storage == jetstream.MemoryStorage, next.Replicas) {
			refused, next.Replicas = true, have.Replicas
		}
		next.MaxAge = longer(have.MaxAge, cfg.TTL)
		next.AllowMsgTTL = have.AllowMsgTTL || msgTTL
		next.AllowRollup = false
		next.DiscardNewPerSubject = have.DiscardNewPerSubject || once
		if pending && !have.AllowMsgTTL {
			// Its delete markers so far never expire: clearOldMarkers
			// removes them.
			next.Metadata = maps.Clone(have.Metadata)
			if next.Metadata == nil {
				next.Metadata = map[string]string{}
			}
			next.Metadata[oldMarkers] = "1"
		}
		return next
	}
	create := func(ctx context.Context) error {
		_, err := c.js.CreateKeyValue(ctx, cfg)
		return err
	}
	err := c.ensureStream(ctx, "KV_"+cfg.Bucket, create, raise)
	if err == nil {
		// A bucket just created lacks what KeyValueConfig cannot say.
		err = c.ensureStream(ctx, "KV_"+cfg.Bucket, create, raise)
	}
	if err != nil {
		return nil, err
	}
	if refused {
		return nil, fmt.Errorf("%w: %s keeps its records in memory with %d replicas asked for",
			ErrReplicatedMemoryRecords, cfg.Bucket, cfg.Replicas)
	}
	var kv jetstream.KeyValue
	err = c.converge(ctx, func(ctx context.Context) error {
		kv, err = c.js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			// ensureStream has just seen or made it: in a cluster, the
			// server that answered has not applied its creation yet.
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	})
	if err == nil && pending {
		c.clearOldMarkers(ctx, kv, "KV_"+cfg.Bucket)
	}
	return kv, err
}

// oldMarkers is the pending bucket's stream metadata key that says it may
// still hold delete markers from before message TTLs were allowed.
const oldMarkers = "interlock_old_markers"

// clearOldMarkers removes the delete markers a pending bucket provisioned
// by an older Interlock holds: written before message TTLs were allowed,
// they never expire, and the count and the listing would include them. It
// needs the right to purge (admin's; the coordinator's shipped permissions
// deny it): without it the markers stay, marked, until `interlock
// provision` runs as admin, and nothing fails.
func (c *Client) clearOldMarkers(ctx context.Context, kv jetstream.KeyValue, stream string) {
	var st jetstream.Stream
	err := c.converge(ctx, func(ctx context.Context) (err error) {
		st, err = c.js.Stream(ctx, stream)
		return err
	})
	if err != nil || st.CachedInfo().Config.Metadata[oldMarkers] == "" {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if kv.PurgeDeletes(pctx, jetstream.DeleteMarkersOlderThan(-1)) != nil {
		return
	}
	next := st.CachedInfo().Config
	next.Metadata = maps.Clone(next.Metadata)
	delete(next.Metadata, oldMarkers)
	_, _ = c.js.UpdateStream(pctx, next)
}

// RequirePendingTTL fails with ErrNotProvisioned when the pending index's
// bucket does not allow message TTLs (it was provisioned by an older
// Interlock): a coordinator would then fail every removal from the index.
func (c *Client) RequirePendingTTL(ctx context.Context) error {
	name := "KV_" + c.BucketName(PendingBucket)
	var st jetstream.Stream
	err := c.converge(ctx, func(ctx context.Context) (err error) {
		st, err = c.js.Stream(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: bucket %s does not exist", ErrNotProvisioned, c.BucketName(PendingBucket))
	}
	if err != nil {
		return fmt.Errorf("read bucket %s: %w", c.BucketName(PendingBucket), translate(err))
	}
	if !st.CachedInfo().Config.AllowMsgTTL {
		return fmt.Errorf("%w: bucket %s does not allow message TTLs (provisioned by an older Interlock)",
			ErrNotProvisioned, c.BucketName(PendingBucket))
	}
	return nil
}

// PendingBucket names the index of interrupts waiting for a decision; the
// coordinator keeps it in step with the run records.
const PendingBucket = "pending"

// RunsBucket names the bucket of run records, one per run, written only by
// coordinators with compare-and-set.
const RunsBucket = "runs"

// OpenAIAgentsBucket names the bucket where the TypeScript SDK's OpenAI
// Agents adapter keeps a run's RunState while it waits on approvals, under
// keys <agent>.<run>.<stop> that only the agent's own NATS user may put and
// read (see `interlock auth`). Nothing in Go reads it; `interlock provision`
// creates it so that agents, which may not create buckets, can use it.
const OpenAIAgentsBucket = "openai_agents"

func orForever(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return d.String()
}

// ErrDrift means a stream or bucket no longer keeps what Interlock
// provisioned: a limit was lowered, or its subjects, republish, sources,
// mirror or protections changed, any of which can move, drop or erase
// messages. A *DriftError says exactly what.
var ErrDrift = errors.New("stream configuration drifted from what was provisioned")

// Drift is one field of one stream (a bucket's stream is KV_<bucket>) that
// no longer keeps what was provisioned.
type Drift struct {
	// Stream is the server-side stream name.
	Stream string `json:"stream"`
	// Field is the stream configuration's field, as the NATS API names it
	// (max_msgs, republish, deny_purge, ...).
	Field string `json:"field"`
	// Want is what was provisioned (or the least it may be); Found is what
	// the stream has now.
	Want  string `json:"want"`
	Found string `json:"found"`
}

// String says the drift as "<stream>: <field> is <found>, want <want>".
func (d Drift) String() string {
	return fmt.Sprintf("%s: %s is %s, want %s", d.Stream, d.Field, d.Found, d.Want)
}

// DriftError lists every drift one check found; it matches ErrDrift.
type DriftError struct{ Drifts []Drift }

// Error lists every drift and how to restore what was provisioned.
func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drifts))
	for i, d := range e.Drifts {
		parts[i] = d.String()
	}
	return fmt.Sprintf("%s: %s (only admin changes a stream's configuration; restore it with `interlock provision` "+
		"as admin, or raise the limit back)", ErrDrift, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrDrift) true.
func (e *DriftError) Is(target error) bool { return target == ErrDrift }

// MissingError names the streams and buckets (by stream name) one check
// found missing; it matches ErrNotProvisioned.
type MissingError struct{ Streams []string }

// Error names what is missing, as "<names> missing".
func (e *MissingError) Error() string {
	return fmt.Sprintf("%s: %s missing", ErrNotProvisioned, strings.Join(e.Streams, ", "))
}

// Unwrap returns ErrNotProvisioned.
func (e *MissingError) Unwrap() error { return ErrNotProvisioned }

// BucketStreamName is the name of the stream that keeps bucket (RunsBucket,
// PendingBucket) under c's prefix.
func (c *Client) BucketStreamName(bucket string) string { return "KV_" + c.BucketName(bucket) }

// coreBuckets are the buckets Provision creates, with replicas; the pending
// index's also allows message TTLs (see provisionBucket).
func (c *Client) coreBuckets(replicas int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: c.BucketName(RunsBucket), Description: "Interlock run records", History: 1, Storage: c.recordsStorage(), Replicas: replicas},
		{Bucket: c.BucketName(PendingBucket), Description: "Interlock interrupts waiting for a decision", History: 1,
			Storage: c.pendingStorage(), Replicas: replicas},
	}
}

// bucketStream is the stream configuration nats.go creates for a bucket
// cfg describes, as provisionBucket leaves it: no rollups, message TTLs
// allowed on the pending index's.
func (c *Client) bucketStream(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	return jetstream.StreamConfig{
		Name: "KV_" + cfg.Bucket, Subjects: []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(cfg.History, 1)), MaxMsgs: -1, MaxBytes: -1, MaxMsgSize: -1, MaxAge: cfg.TTL,
		Storage: cfg.Storage, Replicas: cfg.Replicas, DenyDelete: true, Duplicates: dup,
		AllowDirect: true, Discard: jetstream.DiscardNew, AllowMsgTTL: cfg.Bucket == c.BucketName(PendingBucket),
	}
}

// provisioned is what every one of Interlock's streams and core buckets
// keeps once provisioned with the client's Config: streamConfigs and
// coreBuckets, the one description Provision also creates from.
func (c *Client) provisioned() []jetstream.StreamConfig {
	want := c.streamConfigs(c.cfg.Replicas)
	for _, b := range c.coreBuckets(c.cfg.Replicas) {
		want = append(want, c.bucketStream(b))
	}
	return want
}

// TopologyCheck compares Interlock's streams and core buckets (run records,
// pending index) with what was provisioned, for a process that may not
// change them (the coordinator) to refuse to start or raise an alert. Safe
// for concurrent use.
type TopologyCheck struct {
	c  *Client
	mu sync.Mutex
	// seen is each stream's configuration at the last check that found it
	// intact: a limit raised since is then the one it must keep.
	seen map[string]jetstream.StreamConfig
}

// NewTopologyCheck returns a check of c's streams and core buckets against
// what Provision makes of c's Config.
func (c *Client) NewTopologyCheck() *TopologyCheck {
	return &TopologyCheck{c: c, seen: map[string]jetstream.StreamConfig{}}
}

// Check reads every stream's configuration and returns what no longer keeps
// what was provisioned, or at least what it had at the last check that
// found it intact. Raising a limit (more retention) is not drift; lowering
// one, and any change of subjects, retention, discard policy, republish,
// sources, mirror, subject transform, deny_delete, deny_purge, rollup,
// message TTLs or schedules, sealing or acks is. It fails with a
// *MissingError, matching ErrNotProvisioned, when a stream or bucket does
// not exist.
func (t *TopologyCheck) Check(ctx context.Context) ([]Drift, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var drifts []Drift
	var missing []string
	for _, want := range t.c.provisioned() {
		var have jetstream.StreamConfig
		err := t.c.converge(ctx, func(ctx context.Context) error {
			st, err := t.c.js.Stream(ctx, want.Name)
			if err == nil {
				have = st.CachedInfo().Config
			}
			return err
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, want.Name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("check stream %s: %w", want.Name, translate(err))
		}
		base, seen := t.seen[want.Name]
		if seen {
			want = base
		}
		if want.Name == t.c.BucketStreamName(RunsBucket) && !seen {
			// Either storage keeps the records, chosen when the bucket was
			// created (Config.RecordsStorage); a coordinator seals records
			// by what it found at start, so a change after that is drift.
			want.Storage = have.Storage
		}
		if want.Name == t.c.BucketStreamName(PendingBucket) {
			// Either storage keeps the index, which coordinators rebuild
			// from the run records: memory (the default since issue 25),
			// or file (configured, or created by an older Interlock).
			want.Storage = have.Storage
		}
		found := StreamDrift(want, have)
		if want.Name == t.c.BucketStreamName(RunsBucket) && RecordsReplicasRefused(have.Storage == jetstream.MemoryStorage, have.Replicas) {
			// Raised by hand while coordinators run: records in memory
			// on replicas may come back older (ErrReplicatedMemoryRecords).
			found = append(found, Drift{Stream: want.Name, Field: "num_replicas", Want: "1 (run records in memory)",
				Found: show(have.Replicas)})
		}
		if len(found) == 0 {
			t.seen[want.Name] = have
		}
		drifts = append(drifts, found...)
	}
	if len(missing) > 0 {
		return drifts, &MissingError{Streams: missing}
	}
	return drifts, nil
}

// StreamDrift is what have no longer keeps of want: the one rule of what
// may change in a provisioned stream. Limits (max_msgs, max_bytes,
// max_msgs_per_subject, max_msg_size, max_age, duplicate_window,
// num_replicas) may be raised, never lowered; protections and features
// Interlock sets (deny_delete, deny_purge, allow_direct,
// allow_msg_schedules) may not be taken away; subjects, retention,
// discard, storage, persistence, republish, sources, mirror, subject
// transform, rollup, message TTLs, sealing and no_ack must stay as wanted.
func StreamDrift(want, have jetstream.StreamConfig) []Drift {
	var out []Drift
	add := func(field string, w, f any) {
		out = append(out, Drift{Stream: want.Name, Field: field, Want: show(w), Found: show(f)})
	}
	if !slices.Equal(slices.Sorted(slices.Values(want.Subjects)), slices.Sorted(slices.Values(have.Subjects))) {
		add("subjects", want.Subjects, have.Subjects)
	}
	same := func(field string, w, f any) {
		if !reflect.DeepEqual(w, f) {
			add(field, w, f)
		}
	}
	same("retention", want.Retention, have.Retention)
	same("discard", want.Discard, have.Discard)
	same("discard_new_per_subject", want.DiscardNewPerSubject, have.DiscardNewPerSubject)
	same("storage", want.Storage, have.Storage)
	same("persist_mode", want.PersistMode, have.PersistMode)
	same("republish", want.RePublish, have.RePublish)
	same("mirror", want.Mirror, have.Mirror)
	if len(want.Sources) > 0 || len(have.Sources) > 0 {
		same("sources", want.Sources, have.Sources)
	}
	same("subject_transform", want.SubjectTransform, have.SubjectTransform)
	same("allow_rollup_hdrs", want.AllowRollup, have.AllowRollup)
	same("allow_msg_ttl", want.AllowMsgTTL, have.AllowMsgTTL)
	same("sealed", want.Sealed, have.Sealed)
	same("no_ack", want.NoAck, have.NoAck)
	if lower(have.MaxMsgs, want.MaxMsgs) {
		add("max_msgs", limit(want.MaxMsgs), limit(have.MaxMsgs))
	}
	if lower(have.MaxBytes, want.MaxBytes) {
		add("max_bytes", limit(want.MaxBytes), limit(have.MaxBytes))
	}
	if lower(have.MaxMsgsPerSubject, want.MaxMsgsPerSubject) {
		add("max_msgs_per_subject", limit(want.MaxMsgsPerSubject), limit(have.MaxMsgsPerSubject))
	}
	if lower(int64(have.MaxMsgSize), int64(want.MaxMsgSize)) {
		add("max_msg_size", limit(int64(want.MaxMsgSize)), limit(int64(have.MaxMsgSize)))
	}
	if longer(have.MaxAge, want.MaxAge) != have.MaxAge {
		add("max_age", orForever(want.MaxAge), orForever(have.MaxAge))
	}
	if have.Duplicates < want.Duplicates {
		add("duplicate_window", want.Duplicates, have.Duplicates)
	}
	if have.Replicas < want.Replicas {
		add("num_replicas", want.Replicas, have.Replicas)
	}
	kept := func(field string, w, f bool) {
		if w && !f {
			add(field, w, f)
		}
	}
	kept("deny_delete", want.DenyDelete, have.DenyDelete)
	kept("deny_purge", want.DenyPurge, have.DenyPurge)
	kept("allow_direct", want.AllowDirect, have.AllowDirect)
	// Schedules in a stream that did not have them let a publisher have
	// the server publish onto another of its subjects.
	same("allow_msg_schedules", want.AllowMsgSchedules, have.AllowMsgSchedules)
	return out
}

// lower reports whether limit have is below want, zero or less meaning
// unlimited.
func lower(have, want int64) bool {
	switch {
	case have <= 0:
		return false
	case want <= 0:
		return true
	}
	return have < want
}

// limit is a count or size limit for a drift report.
func limit(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// show is a field's value for a drift report: a string as it is, nil and
// empty values as "none", anything else as JSON.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case time.Duration:
		return x.String()
	case nil:
		return "none"
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return "none"
		}
	case reflect.Slice:
		if rv.Len() == 0 {
			return "none"
		}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.Trim(strings.TrimSpace(b.String()), `"`)
}
