package jetstream

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// KeysBucket names the bucket of the deployment's secrets: the key the
// coordinator signs its message ids with. Only admin (who provisions it)
// and the coordinator may read it.
const KeysBucket = "keys"

// msgIDKey is the key of the message-id secret in KeysBucket.
const msgIDKey = "msgid"

// ErrNoKey means the keys bucket holds no message-id key.
var ErrNoKey = errors.New("no message-id key")

// provisionKeys creates the keys bucket and, when it holds none yet, a
// random message-id key: created once, never replaced, so every
// coordinator of a deployment, before and after a restart, signs alike.
func (c *Client) provisionKeys(ctx context.Context, replicas int) error {
	kv, err := c.provisionBucket(ctx, jetstream.KeyValueConfig{
		Bucket:      c.BucketName(KeysBucket),
		Description: "Interlock's secrets: the coordinator's message-id key",
		History:     1,
		Storage:     c.storage(),
		Replicas:    replicas,
	}, true)
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", c.BucketName(KeysBucket), translate(err))
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return c.converge(ctx, func(ctx context.Context) error {
		if _, err := kv.Get(ctx, msgIDKey); err == nil {
			return nil // a provisioner that may read the key need not write it
		}
		_, err := kv.Create(ctx, msgIDKey, []byte(hex.EncodeToString(key)))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		return err
	})
}

// IDSigner makes message ids that only holders of the deployment's key can
// make: JetStream deduplicates message ids stream-wide, and any publisher
// may set any id, so an id another role could predict would let it store
// a message first and have the real one dropped as a duplicate.
type IDSigner struct{ key []byte }

// IDSigner reads the deployment's message-id key (the coordinator's). It
// fails with an error wrapping ErrNotProvisioned when the keys bucket does
// not exist, and ErrNoKey when it holds no key.
func (c *Client) IDSigner(ctx context.Context) (*IDSigner, error) {
	b, err := c.openSettled(ctx, KeysBucket)
	if err != nil {
		return nil, err
	}
	var v []byte
	err = c.converge(ctx, func(ctx context.Context) (err error) {
		v, err = b.Get(ctx, msgIDKey)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w in bucket %s: run `interlock provision`", ErrNoKey, c.BucketName(KeysBucket))
	}
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(string(v))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("%w: bucket %s holds a key that is not 16 or more hex-encoded bytes", ErrNoKey, c.BucketName(KeysBucket))
	}
	return &IDSigner{key: key}, nil
}

// NewIDSigner returns a signer with key, for tests and stores without a
// server.
func NewIDSigner(key []byte) *IDSigner { return &IDSigner{key: key} }

// RecordKey is the key run records are sealed with in the audit trail
// (a runs bucket kept in memory): 32 bytes, HMAC-SHA256 under the key of
// "interlock record seal".
func (s *IDSigner) RecordKey() []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("interlock record seal"))
	return m.Sum(nil)
}

// ExecutionKey is the execution key of an approved call: 64 hex digits
// of HMAC-SHA256 under the key of "interlock execution key" NUL run NUL
// interrupt NUL the approved call digest. It is the same on every replay
// of the run and nobody without the key can compute it.
func (s *IDSigner) ExecutionKey(run, interrupt, digest string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("interlock execution key\x00" + run + "\x00" + interrupt + "\x00" + digest))
	return hex.EncodeToString(m.Sum(nil))
}

// Sign returns id followed by a colon and 32 hex digits of HMAC-SHA256 of
// id under the key: the same for the same id, and unpredictable without
// the key.
func (s *IDSigner) Sign(id string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	return id + ":" + hex.EncodeToString(m.Sum(nil)[:16])
}
