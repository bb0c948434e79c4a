package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// BucketName is the name of an Interlock KV bucket under the client's
// prefix, for example "interlock_deliveries".
func (c *Client) BucketName(name string) string {
	return strings.ReplaceAll(c.cfg.Prefix, ".", "_") + "_" + name
}

// Bucket is a small KV bucket: keys recorded once (deliveries made, links
// used) or last-value indexes (a thread's latest run).
type Bucket struct {
	c    *Client
	kv   jetstream.KeyValue
	js   jetstream.JetStream
	name string
}

// Bucket opens the bucket BucketName(name), whose entries expire after ttl
// (zero: never), for a role starting: a client that has provisioned
// creates it, or raises an existing one to ttl and the client's replicas;
// any other opens it as it is and fails with ErrNotProvisioned when it
// does not exist. Either way a request nobody answered, or refused while a
// cluster elects, is asked again (as a provisioning step is) until ctx
// ends, 6 times Config.Timeout when ctx has no deadline.
func (c *Client) Bucket(ctx context.Context, name, description string, ttl time.Duration) (*Bucket, error) {
	return c.bucket(ctx, name, description, ttl, false)
}

// bucket is Bucket, and OnceBucket when once.
func (c *Client) bucket(ctx context.Context, name, description string, ttl time.Duration, once bool) (*Bucket, error) {
	if !c.Provisioner() {
		return c.openSettled(ctx, name)
	}
	kv, err := c.provisionBucket(ctx, jetstream.KeyValueConfig{
		Bucket: c.BucketName(name), Description: description,
		History: 1, TTL: ttl, Storage: c.storage(), Replicas: c.provisionedReplicas(),
	}, once)
	if err != nil {
		return nil, fmt.Errorf("provision bucket %s: %w", c.BucketName(name), translate(err))
	}
	return &Bucket{c: c, kv: kv, js: c.js, name: c.BucketName(name)}, nil
}

// OnceBucket is Bucket for a bucket whose keys are written once: the
// server refuses another message on a key while it holds one, so no entry
// is replaced or deleted, not by an answer the server stores under its key
// for another user either, until the bucket's age drops it (or a message
// TTL, which its entries may carry: Keep). Only a client that
// provisions raises an existing bucket to it.
func (c *Client) OnceBucket(ctx context.Context, name, description string, ttl time.Duration) (*Bucket, error) {
	return c.bucket(ctx, name, description, ttl, true)
}

// openSettled is OpenBucket asked again like a provisioning step: for
// roles starting, not for requests (which fail at once rather than wait
// out an election).
func (c *Client) openSettled(ctx context.Context, name string) (*Bucket, error) {
	var b *Bucket
	err := c.converge(ctx, func(ctx context.Context) (err error) {
		b, err = c.OpenBucket(ctx, name)
		return err
	})
	return b, err
}

// OpenBucket opens an existing bucket BucketName(name), in one request; it
// fails with ErrNotProvisioned when there is none.
func (c *Client) OpenBucket(ctx context.Context, name string) (*Bucket, error) {
	kv, err := c.js.KeyValue(ctx, c.BucketName(name))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s does not exist", ErrNotProvisioned, c.BucketName(name))
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", c.BucketName(name), translate(err))
	}
	return &Bucket{c: c, kv: kv, js: c.js, name: c.BucketName(name)}, nil
}

// Has reports whether key holds anything but a client's delete marker: a
// mark, or what readers cannot take for no mark, an answer the server
// stored under key (one saying KV-Operation: DEL too). For marks that
// must fail closed (a link used once).
func (m *Bucket) Has(ctx context.Context, key string) (bool, error) {
	_, err := m.Last(ctx, key)
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Marked reports whether key holds a mark that is a client's write
// (CheckWritten): an answer the server stored under key for another user
// marks nothing. For marks whose loss costs a repeat, not a second effect.
func (m *Bucket) Marked(ctx context.Context, key string) (bool, error) {
	_, _, err := m.Entry(ctx, key)
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Mark records key with value. Marking a key twice is not an error: the
// first mark stands, and first says whether this call made it. A key that
// was marked and then deleted stays marked (see create); an answer the
// server stored under key for another user is no mark, and the mark is
// written over it with compare-and-set.
func (m *Bucket) Mark(ctx context.Context, key string, value []byte) (first bool, err error) {
	_, err = m.create(ctx, key, value) // its errors translated (Client.Publish)
	for range 8 {
		if !errors.Is(err, ErrConflict) {
			break
		}
		var rev uint64
		if _, rev, err = m.Entry(ctx, key); !errors.Is(err, ErrForeign) {
			if isNotFound(err) {
				return false, nil // a client's delete marker: marked
			}
			return false, err // a client's mark (nil), or a failed read
		}
		_, err = m.Update(ctx, key, value, rev)
	}
	if err != nil {
		return false, fmt.Errorf("mark %s: %w", key, err)
	}
	return true, nil
}

// Put stores value under key, replacing what was there, with a message id
// of its own (a client's write, CheckWritten).
func (m *Bucket) Put(ctx context.Context, key string, value []byte) error {
	if _, err := m.c.Publish(ctx, "$KV."+m.name+"."+key, value, writeID(), nil); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Entry returns the value under key and its revision when it is a
// client's write (CheckWritten). Otherwise ErrNotFound, with the revision
// of the key's last message (0: none), which Update writes over: the key
// holds nothing, a delete marker, or an answer the server stored there for
// another user, whose error also matches ErrForeign.
func (m *Bucket) Entry(ctx context.Context, key string) ([]byte, uint64, error) {
	msg, err := m.c.directLast(ctx, "KV_"+m.name, "$KV."+m.name+"."+key)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	if err := CheckWritten(msg.Header); err != nil {
		return nil, msg.Sequence, fmt.Errorf("get %s: %w: %w: %w", key, ErrNotFound, ErrForeign, err)
	}
	if deleted(msg.Header) {
		return nil, msg.Sequence, fmt.Errorf("get %s: %w: deleted", key, ErrNotFound)
	}
	return msg.Data, msg.Sequence, nil
}

// Update stores value under key if the key is still at revision (0: if it
// does not exist, or its last entry is a delete marker, as a KV create
// takes it), and returns the new revision; otherwise ErrConflict. The write
// carries a message id of its own, so a reader can tell it from an answer
// the server stored under key for another user (Last, CheckPublished).
func (m *Bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	subject := "$KV." + m.name + "." + key
	for attempt := 0; ; attempt++ {
		ack, err := m.c.Publish(ctx, subject, value, writeID(),
			Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(revision, 10)}})
		if err == nil && ack.Duplicate {
			// Its random id met another's within the duplicate window: not
			// stored, so not a revision; written again under a new one.
			err = fmt.Errorf("%w: the id of the write was a repeat", ErrConflict)
		}
		if err == nil {
			return ack.Sequence, nil
		}
		if revision == 0 && attempt == 0 && errors.Is(err, ErrConflict) {
			// A client's delete marker: an answer carrying the header is none.
			if last, lerr := m.c.directLast(ctx, "KV_"+m.name, subject); lerr == nil && deleted(last.Header) &&
				CheckWritten(last.Header) == nil {
				revision = last.Sequence
				continue
			}
		}
		return 0, fmt.Errorf("update %s at revision %d: %w", key, revision, err)
	}
}

// writeID is the message id of one write of Update: 96 random bits, in 16
// characters (each costs a byte per write stored).
func writeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Last returns the entry under key with its headers as stored, or
// ErrNotFound (none, or a client's delete marker, CheckWritten). A delete
// marker that is not a client's write (an answer the server stored there,
// whose carrier's headers it keeps, KV-Operation among them) is returned
// as an entry, for the caller's CheckPublished to refuse: it deletes
// nothing.
func (m *Bucket) Last(ctx context.Context, key string) (Entry, error) {
	msg, err := m.c.directLast(ctx, "KV_"+m.name, "$KV."+m.name+"."+key)
	if err == nil && deleted(msg.Header) && CheckWritten(msg.Header) == nil {
		err = fmt.Errorf("get %s: %w: deleted", key, ErrNotFound)
	}
	if err != nil {
		return Entry{}, err
	}
	return Entry{Key: key, Value: msg.Data, Revision: msg.Sequence, Header: msg.Header}, nil
}

// deleted reports whether h are a KV delete or purge marker's.
func deleted(h Header) bool {
	op := h.Get(kvOperation)
	return op == kvDelete || op == kvPurge
}

// create stores value under key only where key was never written, for
// Mark: a KV create (nats.go's Create, as Update at revision 0 uses) also
// takes a key whose last entry is a delete marker, so whoever may write the
// bucket's subjects could delete a once-only mark (a gated MCP call's
// record, a used link) and have it made again. Only the key's expiry (the
// bucket's max age) frees it.
func (m *Bucket) create(ctx context.Context, key string, value []byte) (uint64, error) {
	// With a message id of its own, as every write of Update's: a reader
	// that must can tell the mark from an answer the server stored under
	// key (CheckPublished).
	ack, err := m.c.Publish(ctx, "$KV."+m.name+"."+key, value, writeID(),
		Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}})
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// written is the error of a write of key, translated (see Client.written).
func (m *Bucket) written(key string, err error) error {
	if err == nil {
		return nil
	}
	return m.c.written("$KV."+m.name+"."+key, err)
}

// Delete removes key; a key that is not there is not an error.
func (m *Bucket) Delete(ctx context.Context, key string) error {
	if err := m.written(key, m.kv.Delete(ctx, key)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// DeleteAt removes key if its last message is still at sequence revision,
// otherwise ErrConflict: a delete that must not remove a newer write. Its
// marker expires after a second, as KVDeleteMsg's.
func (m *Bucket) DeleteAt(ctx context.Context, key string, revision uint64) error {
	_, err := m.c.Publish(ctx, "$KV."+m.name+"."+key, nil, "", Header{kvOperation: {kvDelete}, markerTTLHeader: {"1s"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(revision, 10)}})
	if err != nil {
		return fmt.Errorf("delete %s at revision %d: %w", key, revision, err)
	}
	return nil
}

// Epoch names the current leadership of the bucket's stream, its leader
// and when it was elected, when the stream may come back older than what
// it acknowledged (MayComeBackOlder): a bucket read under one epoch and
// found under another may have lost its last writes. It is empty for any
// other bucket, and while the stream has no leader.
func (m *Bucket) Epoch(ctx context.Context) (string, error) {
	st, err := m.js.Stream(ctx, "KV_"+m.name)
	if err != nil {
		return "", fmt.Errorf("bucket %s: %w", m.name, translate(err))
	}
	info := st.CachedInfo()
	cl := info.Cluster
	if !MayComeBackOlder(info.Config.Storage == jetstream.MemoryStorage, info.Config.Replicas) ||
		cl == nil || cl.Leader == "" || cl.LeaderSince == nil {
		return "", nil
	}
	return cl.Leader + "@" + cl.LeaderSince.UTC().Format(time.RFC3339Nano), nil
}

// Marker returns the body and sequence of the delete marker that is key's
// last message (PutMarker's), or ErrNotFound when key has no message, its
// last one is a value or not a client's publish (an answer the server
// stored there, CheckPublished), with that message's sequence, which the
// next marker is written over, or when the bucket no longer exists (a
// bucket in memory after a server restart). One direct get (the bucket's stream
// allows them), where it asked for the stream's info first, a round trip
// more on every read; only when nobody answers the direct get does it ask
// the stream, which tells a missing bucket from one without a leader yet.
func (m *Bucket) Marker(ctx context.Context, key string) ([]byte, uint64, error) {
	subject := "$KV." + m.name + "." + key
	msg, err := m.c.directLast(ctx, "KV_"+m.name, subject)
	if errors.Is(err, ErrNotProvisioned) {
		var st jetstream.Stream
		if st, err = m.js.Stream(ctx, "KV_"+m.name); err == nil {
			var raw *jetstream.RawStreamMsg
			if raw, err = st.GetLastMsgForSubject(ctx, subject); err == nil {
				msg = StoredMsg{Sequence: raw.Sequence, Header: Header(raw.Header), Data: raw.Data}
			}
		}
		err = translate(err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("marker %s: %w", key, err)
	}
	if msg.Header.Get(kvOperation) != kvDelete {
		return nil, msg.Sequence, fmt.Errorf("marker %s: %w: the key holds a value", key, ErrNotFound)
	}
	if err := CheckPublished(msg.Header); err != nil {
		// An answer the server stored there for another user, headers of
		// its choosing included: no marker, and the next is written over it.
		return nil, msg.Sequence, fmt.Errorf("marker %s: %w: %w", key, ErrNotFound, err)
	}
	return msg.Data, msg.Sequence, nil
}

// PutMarker writes under key a delete marker carrying body, with no
// time-to-live, if key's last message is still at sequence last (0: key
// has none), and returns its sequence; otherwise ErrConflict. Readers of
// the bucket skip it as they skip every deleted key.
func (m *Bucket) PutMarker(ctx context.Context, key string, body []byte, last uint64) (uint64, error) {
	subject := "$KV." + m.name + "." + key
	ack, err := m.c.Publish(ctx, subject, body, writeID(), Header{kvOperation: {kvDelete},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(last, 10)}})
	if err != nil {
		return 0, fmt.Errorf("marker %s after %d: %w", key, last, err)
	}
	return ack.Sequence, nil
}

// Keep returns the value kept for good under key in a OnceBucket (see
// Kept), first writing value there when the key holds none. What the key
// holds that is not kept for good (an answer the server stored there for
// another user, an entry from before) is purged first, which needs the
// right to purge the bucket's stream (admin's): a provisioning step. A
// write that loses to another message on the key (answers sent there as
// fast as they come) is tried again, with backoff, until ctx ends (6 times
// Config.Timeout when it has no deadline).
func (m *Bucket) Keep(ctx context.Context, key string, value []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 6*m.c.cfg.Timeout)
		defer cancel()
	}
	var kept []byte
	err := retry(ctx, m.c.cfg.Timeout, func(err error) bool { return errors.Is(err, ErrConflict) },
		func(ctx context.Context) (err error) {
			kept, err = m.keep(ctx, key, value)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("keep %s: %w", key, err)
	}
	return kept, nil
}

// keep is one attempt of Keep: ErrConflict when another message took the
// key between the purge and the write.
func (m *Bucket) keep(ctx context.Context, key string, value []byte) ([]byte, error) {
	kept, err := m.Kept(ctx, key)
	if !isNotFound(err) {
		return kept, err
	}
	subject := "$KV." + m.name + "." + key
	if _, rev, _ := m.Entry(ctx, key); rev > 0 {
		st, err := m.js.Stream(ctx, "KV_"+m.name)
		if err == nil {
			err = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
		}
		if err = translate(err); err != nil && !isNotFound(err) {
			return nil, fmt.Errorf("purge what it holds: %w", err)
		}
	}
	_, err = m.c.Publish(ctx, subject, value, writeID(), Header{markerTTLHeader: {"never"},
		jetstream.ExpectedLastSubjSeqHeader: {"0"}})
	if err != nil {
		return nil, err
	}
	return value, nil
}

// Kept returns the value under key when it was kept for good (Keep's: a
// client's publish, with a message id, that never expires), or
// ErrNotFound.
func (m *Bucket) Kept(ctx context.Context, key string) ([]byte, error) {
	e, err := m.Last(ctx, key)
	if err != nil {
		return nil, err
	}
	if CheckPublished(e.Header) != nil || e.Header.Get(markerTTLHeader) != "never" || deleted(e.Header) {
		return nil, fmt.Errorf("get %s: %w: not kept for good", key, ErrNotFound)
	}
	return e.Value, nil
}

// Get returns the value under key, or ErrNotFound, as Entry does.
func (m *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	v, _, err := m.Entry(ctx, key)
	return v, err
}

// Keys returns every key the bucket holds an entry or a delete marker
// under. It lists them from the bucket's stream state rather than with a
// consumer or a batched read, so a user that may only read keys one by one
// (no right to create consumers) can call it.
func (m *Bucket) Keys(ctx context.Context) ([]string, error) {
	st, err := m.js.Stream(ctx, "KV_"+m.name)
	if err != nil {
		return nil, translate(err)
	}
	prefix := "$KV." + m.name + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, translate(err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subject, prefix))
	}
	return keys, nil
}

// Entry is a key's value, with the sequence that wrote it.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	// Header is the entry's headers as stored, for CheckPublished.
	Header Header
}

// Page returns up to limit keys with their values, in the order they were
// last written, after revision after (0: from the first), skipping deleted
// keys; next is the cursor of the following page, 0 when none follows. It
// reads with batched direct gets (Client.Batch): one request for limit
// entries, and one more for each run of deleted keys it steps over.
func (m *Bucket) Page(ctx context.Context, after uint64, limit int) (entries []Entry, next uint64, err error) {
	prefix := "$KV." + m.name + "."
	from := after + 1
	for len(entries) < limit {
		// ">" rather than the bucket's prefix: the stream holds nothing
		// else, and the server counts what is left of a full-wildcard read
		// from its state when the read starts at the stream's beginning.
		msgs, more, err := m.c.Batch(ctx, "KV_"+m.name, ">", from, limit-len(entries))
		if err != nil {
			return nil, 0, err
		}
		for _, msg := range msgs {
			from = msg.Sequence + 1
			// The stream can hold messages on other subjects: a pull's
			// answer sent to a key's subject is stored under its work
			// item's (docs/security.md, "Answers the server sends for you").
			if deleted(msg.Header) || !strings.HasPrefix(msg.Subject, prefix) {
				continue
			}
			entries = append(entries, Entry{Key: strings.TrimPrefix(msg.Subject, prefix), Value: msg.Data, Revision: msg.Sequence,
				Header: msg.Header})
		}
		if !more {
			return entries, 0, nil
		}
	}
	return entries, from - 1, nil
}

// Count is the number of messages the bucket's stream holds, read from its
// state (one request, whatever the bucket holds): the keys, plus the
// markers of deleted keys still kept. Markers written by KVDeleteMsg expire
// after a second.
func (m *Bucket) Count(ctx context.Context) (uint64, error) {
	st, err := m.js.Stream(ctx, "KV_"+m.name)
	if err != nil {
		return 0, translate(err)
	}
	return st.CachedInfo().State.Msgs, nil
}

// The KV operation header and its values for deletes.
const (
	kvOperation = "KV-Operation"
	kvDelete    = "DEL"
	kvPurge     = "PURGE"
)

// KVPutMsg is the message that stores value under key in bucket (a name
// given to BucketName), for PublishAll.
func (c *Client) KVPutMsg(bucket, key string, value []byte, msgID string) OutMsg {
	return OutMsg{Subject: "$KV." + c.BucketName(bucket) + "." + key, Data: value, MsgID: msgID}
}

// KVDeleteMsg is the message that deletes key from bucket, for PublishAll.
// Its marker expires after a second (the bucket's stream must allow message
// TTLs, see Provision), so the bucket's stream then holds only the keys
// that are there and Bucket.Count counts them.
func (c *Client) KVDeleteMsg(bucket, key string) OutMsg {
	return OutMsg{Subject: "$KV." + c.BucketName(bucket) + "." + key,
		Header: Header{kvOperation: {kvDelete}, markerTTLHeader: {"1s"}}}
}

// markerTTLHeader is JetStream's per-message TTL (nats-server 2.11+).
const markerTTLHeader = "Nats-TTL"
