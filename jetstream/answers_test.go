package jetstream_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	njetstream "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// plant has the server store body under key of the bucket bucket (a name
// given to BucketName) as a direct get's answer; op, when set, is the
// KV-Operation header its carrier was stored with.
func plant(t *testing.T, c *jetstream.Client, nc *nats.Conn, bucket, key, carrier string, body []byte, op string, bare bool) {
	t.Helper()
	h := nats.Header{}
	if op != "" {
		h.Set("KV-Operation", op)
	}
	jstest.Answer(t, nc, "INTERLOCK_RUNS", carrier, h, body, c.BucketStreamName(bucket), "$KV."+c.BucketName(bucket)+"."+key, bare)
}

// Readers of a bucket take an answer the server stored under a key for
// another user for no entry, mark over it, and write over it with
// compare-and-set; Has, for marks that fail closed, counts it.
func TestBucketAnswersAreNoEntries(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	b, err := c.Bucket(ctx(t), "answers", "test", 0)
	require.NoError(t, err)
	for i, tc := range []struct {
		name string
		op   string
		bare bool
	}{{"headers", "", false}, {"bare", "", true}, {"delete-headers", "DEL", false}} {
		key := tc.name
		carrier := "interlock.completed.a.carrier-" + key
		plant(t, c, nc, "answers", key, carrier, []byte(`{"owner":"mallory"}`), tc.op, tc.bare)

		_, rev, err := b.Entry(ctx(t), key)
		require.ErrorIs(t, err, jetstream.ErrNotFound, tc.name)
		require.ErrorIs(t, err, jetstream.ErrForeign, tc.name)
		require.NotZero(t, rev, "the answer's revision, to write over")
		_, err = b.Get(ctx(t), key)
		assert.ErrorIs(t, err, jetstream.ErrForeign)
		marked, err := b.Marked(ctx(t), key)
		require.NoError(t, err)
		assert.False(t, marked, "an answer marks nothing")
		has, err := b.Has(ctx(t), key)
		require.NoError(t, err)
		assert.True(t, has, "Has fails closed: an answer saying DEL deletes nothing (%s)", tc.name)

		if i == 0 {
			next, err := b.Update(ctx(t), key, []byte(`{"owner":"ada"}`), rev)
			require.NoError(t, err, "written over with compare-and-set")
			v, got, err := b.Entry(ctx(t), key)
			require.NoError(t, err)
			assert.Equal(t, next, got)
			assert.JSONEq(t, `{"owner":"ada"}`, string(v))
			continue
		}
		first, err := b.Mark(ctx(t), key, []byte(`1`))
		require.NoError(t, err)
		assert.True(t, first, "the mark is written over the answer")
		first, err = b.Mark(ctx(t), key, []byte(`2`))
		require.NoError(t, err)
		assert.False(t, first)
		v, err := b.Get(ctx(t), key)
		require.NoError(t, err)
		assert.Equal(t, "1", string(v))
	}

	// A create or update of nats.go's (an entry from before writes carried
	// a message id) is a client's write; a plain put is not.
	njs, err := njetstream.New(nc)
	require.NoError(t, err)
	kv, err := njs.KeyValue(ctx(t), c.BucketName("answers"))
	require.NoError(t, err)
	_, err = kv.Create(ctx(t), "legacy", []byte(`old`))
	require.NoError(t, err)
	v, err := b.Get(ctx(t), "legacy")
	require.NoError(t, err)
	assert.Equal(t, "old", string(v))
	_, err = kv.Put(ctx(t), "legacy-put", []byte(`old`))
	require.NoError(t, err)
	_, err = b.Get(ctx(t), "legacy-put")
	assert.True(t, errors.Is(err, jetstream.ErrForeign), "a plain put cannot be told from an answer asked without headers")
	require.NoError(t, b.Put(ctx(t), "legacy-put", []byte(`new`)))
	v, err = b.Get(ctx(t), "legacy-put")
	require.NoError(t, err)
	assert.Equal(t, "new", string(v), "Put writes with a message id")
}
