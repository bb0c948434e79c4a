package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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

// coreBuckets are the buckets Provision creates, with replicas; the pending
// index's also allows message TTLs (see provisionBucket).
func (c *Client) coreBuckets(replicas int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: c.BucketName(RunsBucket), Description: "Interlock run records", History: 1, Storage: c.storage(), Replicas: replicas},
		{Bucket: c.BucketName(PendingBucket), Description: "Interlock interrupts waiting for a decision", History: 1,
			Storage: c.storage(), Replicas: replicas},
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
// message TTLs or schedules, sealing or acks is. It fails with
// ErrNotProvisioned when a stream or bucket does not exist.
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
		if base, ok := t.seen[want.Name]; ok {
			want = base
		}
		found := StreamDrift(want, have)
		if len(found) == 0 {
			t.seen[want.Name] = have
		}
		drifts = append(drifts, found...)
	}
	if len(missing) > 0 {
		return drifts, fmt.Errorf("%w: %s missing", ErrNotProvisioned, strings.Join(missing, ", "))
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
