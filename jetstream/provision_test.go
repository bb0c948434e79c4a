package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestProvisionNeverLowers: a second provisioning with smaller limits keeps
// the larger ones; the audit streams deny purges and deletes; a client that
// has not provisioned binds to consumers and buckets as they are, and says
// "run interlock provision" when they are missing.
func TestProvisionNeverLowers(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	wide := jstest.Client(t, srv, jetstream.Config{MaxAge: 48 * time.Hour, DuplicateWindow: 20 * time.Minute})
	narrow := jstest.Client(t, srv, jetstream.Config{MaxAge: time.Hour, DuplicateWindow: time.Minute})
	require.True(t, narrow.Provisioner())

	js := rawJetStream(t, srv.URL())
	config := func(name string) njs.StreamConfig {
		st, err := js.Stream(ctx(t), name)
		require.NoError(t, err)
		return st.CachedInfo().Config
	}
	runs := config(wide.StreamName(jetstream.StreamRuns))
	assert.Equal(t, 48*time.Hour, runs.MaxAge, "retention kept")
	assert.Equal(t, 20*time.Minute, runs.Duplicates, "duplicate window kept")
	for _, s := range []jetstream.Stream{jetstream.StreamDecisions, jetstream.StreamEvents} {
		c := config(wide.StreamName(s))
		assert.True(t, c.DenyPurge && c.DenyDelete, s)
	}
	assert.False(t, config(wide.StreamName(jetstream.StreamRuns)).DenyPurge)

	// A role that does not provision.
	role, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	require.NoError(t, err)
	defer role.Close()
	require.False(t, role.Provisioner())
	cc := jetstream.ConsumeConfig{Stream: jetstream.StreamWork, Durable: "worker_x",
		FilterSubjects: []string{"interlock.work.x"}, AckWait: 30 * time.Second}
	noop := func(context.Context, *jetstream.Delivery) error { return nil }
	_, err = role.Consume(ctx(t), cc, noop)
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned)
	assert.Contains(t, err.Error(), "interlock provision")
	require.ErrorIs(t, role.CreateConsumer(ctx(t), cc), jetstream.ErrNotProvisioned)

	require.NoError(t, wide.CreateConsumer(ctx(t), cc))
	mine := cc
	mine.AckWait = 2 * time.Second
	k, err := role.Consume(ctx(t), mine, noop)
	require.NoError(t, err)
	k.Stop(context.Background())
	cons, err := js.Consumer(ctx(t), wide.StreamName(jetstream.StreamWork), "worker_x")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, cons.CachedInfo().Config.AckWait, "the binding role changed nothing")
	other := cc
	other.FilterSubjects = []string{"interlock.work.y"}
	_, err = role.Consume(ctx(t), other, noop)
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned, "a consumer reading other subjects is not this one")

	_, err = role.Bucket(ctx(t), "deliveries", "", time.Hour)
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned)
	_, err = wide.Bucket(ctx(t), "deliveries", "", time.Hour)
	require.NoError(t, err)
	_, err = role.Bucket(ctx(t), "deliveries", "", time.Minute)
	require.NoError(t, err)
	_, err = narrow.Bucket(ctx(t), "deliveries", "", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, config("KV_"+wide.BucketName("deliveries")).MaxAge, "bucket TTL kept")

	// An operator's history and size limit on a bucket survive a
	// provisioning that raises its TTL.
	kvc := config("KV_" + wide.BucketName("deliveries"))
	kvc.MaxMsgsPerSubject, kvc.MaxBytes = 5, 1<<20
	_, err = js.UpdateStream(ctx(t), kvc)
	require.NoError(t, err)
	_, err = wide.Bucket(ctx(t), "deliveries", "", 2*time.Hour)
	require.NoError(t, err)
	kvc = config("KV_" + wide.BucketName("deliveries"))
	assert.Equal(t, 2*time.Hour, kvc.MaxAge, "TTL raised")
	assert.Equal(t, int64(5), kvc.MaxMsgsPerSubject, "history kept")
	assert.Equal(t, int64(1<<20), kvc.MaxBytes, "size limit kept")
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                            "nats://127.0.0.1:4222",
		"nats://coordinator:s3cret@n1:4222":                "nats://coordinator:xxxxx@n1:4222",
		"nats://a:p1@n1:4222,nats://a:p2@n2:4222":          "nats://a:xxxxx@n1:4222,nats://a:xxxxx@n2:4222",
		"nats://tok3n@n1:4222":                             "nats://xxxxx@n1:4222",
		"nats://a:%zz@n1:4222":                             "(unparsable URL)",
		"tls://admin:pw@[::1]:4222, nats://127.0.0.1:4223": "tls://admin:xxxxx@[::1]:4222, nats://127.0.0.1:4223",
	} {
		assert.Equal(t, want, jetstream.Redact(in), in)
	}
}

// TestProvisionRaisesReadFeatures: a deployment made before the pending
// index's markers expired and events were read in batches gets message
// TTLs on the pending bucket and direct gets on the streams read in
// batches, and keeps everything else.
func TestProvisionRaisesReadFeatures(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	js := rawJetStream(t, srv.URL())
	_, err := js.CreateKeyValue(ctx(t), njs.KeyValueConfig{Bucket: "interlock_pending", History: 3})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx(t), njs.StreamConfig{Name: "INTERLOCK_EVENTS", Subjects: []string{"interlock.events.>"}})
	require.NoError(t, err)

	c := jstest.Client(t, srv)
	for _, name := range []string{c.StreamName(jetstream.StreamEvents), c.StreamName(jetstream.StreamAGUI), c.StreamName(jetstream.StreamDLQ)} {
		st, err := js.Stream(ctx(t), name)
		require.NoError(t, err)
		assert.True(t, st.CachedInfo().Config.AllowDirect, name)
	}
	st, err := js.Stream(ctx(t), "KV_interlock_pending")
	require.NoError(t, err)
	assert.True(t, st.CachedInfo().Config.AllowMsgTTL, "removals' markers may expire")
	assert.Equal(t, int64(3), st.CachedInfo().Config.MaxMsgsPerSubject, "the operator's history kept")
}

// A pending bucket provisioned by an older Interlock holds delete markers
// that never expire: provisioning removes them once it allows message TTLs,
// so the bucket's count is what waits. Until then a coordinator refuses to
// start, rather than fail every removal from the index.
func TestProvisionClearsOldDeleteMarkers(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	js := rawJetStream(t, srv.URL())
	kv, err := js.CreateKeyValue(ctx(t), njs.KeyValueConfig{Bucket: "interlock_pending"})
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err = kv.Put(ctx(t), k, []byte("{}"))
		require.NoError(t, err)
	}
	require.NoError(t, kv.Delete(ctx(t), "a"))
	require.NoError(t, kv.Delete(ctx(t), "b"))

	old, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	require.NoError(t, err)
	defer old.Close()
	assert.ErrorIs(t, old.RequirePendingTTL(ctx(t)), jetstream.ErrNotProvisioned)

	c := jstest.Client(t, srv) // provisions
	require.NoError(t, c.RequirePendingTTL(ctx(t)))
	st, err := js.Stream(ctx(t), "KV_interlock_pending")
	require.NoError(t, err)
	info, err := st.Info(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "only the entry that waits is left")
	assert.NotContains(t, info.Config.Metadata, "interlock_old_markers", "cleared once, not at every start")
}

// rawJetStream is a plain nats.go JetStream handle on url, as an operator's
// tool or an older Interlock would use, closed when the test ends.
func rawJetStream(t *testing.T, url string) njs.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	require.NoError(t, err)
	return js
}

// Dial refuses a named user with an empty password before connecting
// (nats-server would admit it when its configuration reads the password
// from an empty variable); a URL's user name alone is a token, not a user.
func TestDialRefusesEmptyPassword(t *testing.T) {
	t.Parallel()
	for _, dc := range []jetstream.DialConfig{
		{URL: "nats://127.0.0.1:1", User: "auditor"},
		{URL: "nats://auditor:@127.0.0.1:1"},
		{URL: "nats://ada:pw@127.0.0.1:1, nats://auditor:@127.0.0.1:2"},
	} {
		_, err := jetstream.Dial(ctx(t), dc, jetstream.Config{})
		require.ErrorIs(t, err, jetstream.ErrEmptyPassword, "%+v", dc)
		assert.NotContains(t, err.Error(), "pw", "no password in the error")
	}
	_, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: "nats://token@127.0.0.1:1"}, jetstream.Config{})
	assert.NotErrorIs(t, err, jetstream.ErrEmptyPassword)
}
