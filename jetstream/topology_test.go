package jetstream_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestTopologyCheck: a freshly provisioned deployment has no drift; raising
// a limit is not drift; lowering one, adding republish or sources, or
// changing subjects is, reported by field with what was wanted and what is
// found; a limit raised and then lowered again drifts from the raised one;
// a missing stream is ErrNotProvisioned.
func TestTopologyCheck(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv)
	js := rawJetStream(t, srv.URL())
	update := func(name string, change func(*njs.StreamConfig)) {
		t.Helper()
		st, err := js.Stream(ctx(t), name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		change(&cfg)
		_, err = js.UpdateStream(ctx(t), cfg)
		require.NoError(t, err)
	}
	check := c.NewTopologyCheck()
	drifts, err := check.Check(ctx(t))
	require.NoError(t, err)
	require.Empty(t, drifts, "as provisioned")

	events := c.StreamName(jetstream.StreamEvents)
	decisions := c.StreamName(jetstream.StreamDecisions)
	runs := "KV_" + c.BucketName(jetstream.RunsBucket)
	update(events, func(cfg *njs.StreamConfig) { cfg.Duplicates = time.Hour })
	drifts, err = check.Check(ctx(t))
	require.NoError(t, err)
	require.Empty(t, drifts, "a raised limit is not drift")

	update(decisions, func(cfg *njs.StreamConfig) { cfg.MaxMsgs = 1 })
	update(runs, func(cfg *njs.StreamConfig) { cfg.MaxBytes = 1 << 20 })
	update(c.StreamName(jetstream.StreamDLQ), func(cfg *njs.StreamConfig) {
		cfg.RePublish = &njs.RePublish{Source: ">", Destination: "elsewhere.>"}
	})
	update(c.StreamName(jetstream.StreamAGUI), func(cfg *njs.StreamConfig) { cfg.Subjects = append(cfg.Subjects, "stolen.>") })
	drifts, err = check.Check(ctx(t))
	require.NoError(t, err)
	assert.Contains(t, drifts, jetstream.Drift{Stream: decisions, Field: "max_msgs", Want: "unlimited", Found: "1"})
	assert.Contains(t, drifts, jetstream.Drift{Stream: runs, Field: "max_bytes", Want: "unlimited", Found: "1048576"})
	assert.Contains(t, drifts, jetstream.Drift{Stream: c.StreamName(jetstream.StreamDLQ), Field: "republish", Want: "none",
		Found: `{"src":">","dest":"elsewhere.>"}`})
	fields := map[string]string{}
	for _, d := range drifts {
		fields[d.Stream+" "+d.Field] = d.String()
	}
	assert.Contains(t, fields, c.StreamName(jetstream.StreamAGUI)+" subjects")
	assert.Len(t, drifts, 4, "%v", drifts)

	// Events had a one-hour duplicate window at the last check that found
	// it intact: lowering it to 30 minutes drifts from that, though it is
	// more than Provision's 10 minutes, which is all a fresh check (a
	// coordinator starting) holds it to.
	update(events, func(cfg *njs.StreamConfig) { cfg.Duplicates = 30 * time.Minute; cfg.MaxMsgs = 10 })
	drifts, err = check.Check(ctx(t))
	require.NoError(t, err)
	assert.Contains(t, drifts, jetstream.Drift{Stream: events, Field: "duplicate_window", Want: "1h0m0s", Found: "30m0s"})
	assert.Contains(t, drifts, jetstream.Drift{Stream: events, Field: "max_msgs", Want: "unlimited", Found: "10"})
	drifts, err = c.NewTopologyCheck().Check(ctx(t))
	require.NoError(t, err)
	assert.Contains(t, drifts, jetstream.Drift{Stream: events, Field: "max_msgs", Want: "unlimited", Found: "10"})
	assert.NotContains(t, drifts, jetstream.Drift{Stream: events, Field: "duplicate_window", Want: "1h0m0s", Found: "30m0s"})

	require.NoError(t, js.DeleteStream(ctx(t), c.StreamName(jetstream.StreamTimers)))
	_, err = c.NewTopologyCheck().Check(ctx(t))
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned)
	assert.Contains(t, err.Error(), c.StreamName(jetstream.StreamTimers))

	de := &jetstream.DriftError{Drifts: drifts}
	assert.ErrorIs(t, de, jetstream.ErrDrift)
	assert.Contains(t, de.Error(), events+": max_msgs is 10, want unlimited")
}

// TestTopologyRunsStorage: the runs bucket may keep its records on disk or
// in memory, whatever a checking client's own configuration says; but a
// coordinator seals records by what it found when it started, so a bucket
// whose storage changes under a running check (deleted and created again
// the other way) is drift.
func TestTopologyRunsStorage(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	jstest.Client(t, srv, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	c := jstest.Client(t, srv)
	check := c.NewTopologyCheck()
	drifts, err := check.Check(ctx(t))
	require.NoError(t, err)
	require.Empty(t, drifts, "a runs bucket in memory checked by a client configured for file")

	js := rawJetStream(t, srv.URL())
	runs := c.BucketStreamName(jetstream.RunsBucket)
	st, err := js.Stream(ctx(t), runs)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.NoError(t, js.DeleteStream(ctx(t), runs))
	cfg.Storage = njs.FileStorage
	_, err = js.CreateStream(ctx(t), cfg)
	require.NoError(t, err)
	drifts, err = check.Check(ctx(t))
	require.NoError(t, err)
	assert.Contains(t, drifts, jetstream.Drift{Stream: runs, Field: "storage", Want: "memory", Found: "file"})
}

// TestRecordsInMemoryRefusedWithReplicas: a runs bucket keeps its records
// in memory only with one replica. With three, a majority restarting at
// once can bring the bucket back from a replica that lacked the last
// writes, older but not empty, which putting records back from the trail
// cannot see; so provisioning refuses it, raising a bucket in memory to
// three replicas is refused (and leaves it at one), a coordinator refuses
// one made by hand (BucketInMemory), and "auto" keeps records on disk.
func TestRecordsInMemoryRefusedWithReplicas(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	urls := jstest.URLs(jstest.Cluster(t, 3))
	dial := func(cfg jetstream.Config) *jetstream.Client {
		c, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: urls}, cfg)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	js := rawJetStream(t, urls)
	runsStream := func(c *jetstream.Client) njs.StreamConfig {
		st, err := js.Stream(ctx(t), c.BucketStreamName(jetstream.RunsBucket))
		require.NoError(t, err)
		return st.CachedInfo().Config
	}

	streams := func() []string {
		names := js.StreamNames(ctx(t))
		var out []string
		for n := range names.Name() {
			out = append(out, n)
		}
		require.NoError(t, names.Err())
		return out
	}
	err := dial(jetstream.Config{Replicas: 3, RecordsStorage: jetstream.MemoryStorage}).Provision(ctx(t))
	require.ErrorIs(t, err, jetstream.ErrReplicatedMemoryRecords)
	assert.Empty(t, streams(), "a refused provision wrote nothing (later ones would take its replicas)")

	auto := dial(jetstream.Config{Replicas: 3, RecordsStorage: jetstream.AutoStorage})
	require.NoError(t, auto.Provision(ctx(t)))
	cfg := runsStream(auto)
	assert.Equal(t, njs.FileStorage, cfg.Storage, "auto keeps records on disk")
	assert.Equal(t, 3, cfg.Replicas)

	one := dial(jetstream.Config{Prefix: "one", Replicas: 1, RecordsStorage: jetstream.MemoryStorage})
	require.NoError(t, one.Provision(ctx(t)), "one replica in memory, on a cluster")
	mem, err := one.BucketInMemory(ctx(t), jetstream.RunsBucket)
	require.NoError(t, err)
	assert.True(t, mem)
	err = dial(jetstream.Config{Prefix: "one", Replicas: 3}).Provision(ctx(t))
	require.ErrorIs(t, err, jetstream.ErrReplicatedMemoryRecords)
	assert.ErrorContains(t, err, "delete the stream KV_one_runs")
	cfg = runsStream(one)
	assert.Equal(t, njs.MemoryStorage, cfg.Storage)
	assert.Equal(t, 1, cfg.Replicas, "raised to three replicas in memory")
	st, err := js.Stream(ctx(t), one.StreamName(jetstream.StreamEvents))
	require.NoError(t, err)
	assert.Equal(t, 1, st.CachedInfo().Config.Replicas, "the streams raised by a refused provision")
	require.NoError(t, one.Provision(ctx(t)), "provisioning as before still works")
	require.NoError(t, one.ProvisionRuns(ctx(t), jetstream.MemoryStorage))

	// Raised by hand while a coordinator runs: its running topology check
	// raises the alert (the start check refuses: BucketInMemory, below).
	check := one.NewTopologyCheck()
	drifts, err := check.Check(ctx(t))
	require.NoError(t, err)
	require.Empty(t, drifts)
	raised := runsStream(one)
	raised.Replicas = 3
	_, err = js.UpdateStream(ctx(t), raised)
	require.NoError(t, err)
	drifts, err = check.Check(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, []jetstream.Drift{{Stream: "KV_one_runs", Field: "num_replicas", Want: "1 (run records in memory)", Found: "3"}}, drifts)

	hand := dial(jetstream.Config{Prefix: "hand", Replicas: 3})
	require.NoError(t, hand.Provision(ctx(t)))
	cfg = runsStream(hand)
	require.NoError(t, js.DeleteStream(ctx(t), cfg.Name))
	cfg.Storage = njs.MemoryStorage
	_, err = js.CreateStream(ctx(t), cfg)
	require.NoError(t, err)
	_, err = hand.BucketInMemory(ctx(t), jetstream.RunsBucket)
	require.ErrorIs(t, err, jetstream.ErrReplicatedMemoryRecords)
}

// TestBucketEpoch: a bucket that may come back older than what it
// acknowledged (in memory, replicated) names its stream's leadership, and
// a new leader changes it; a bucket on disk, or with one replica, has none
// (a leader change loses nothing there).
func TestBucketEpoch(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	urls := jstest.URLs(jstest.Cluster(t, 3))
	bucket := func(cfg jetstream.Config) *jetstream.Bucket {
		t.Helper()
		b, err := jstest.ClientURL(t, urls, cfg).OpenBucket(ctx(t), jetstream.PendingBucket)
		require.NoError(t, err)
		return b
	}
	epoch := func(b *jetstream.Bucket) string {
		t.Helper()
		var e string
		var err error
		require.Eventually(t, func() bool { e, err = b.Epoch(ctx(t)); return err == nil }, 30*time.Second, 50*time.Millisecond)
		return e
	}
	assert.Empty(t, epoch(bucket(jetstream.Config{Prefix: "disk", Replicas: 3, PendingStorage: jetstream.FileStorage})), "on disk")
	assert.Empty(t, epoch(bucket(jetstream.Config{Prefix: "single", Replicas: 1})), "in memory, one replica")
	replicated := bucket(jetstream.Config{Replicas: 3})
	first := epoch(replicated)
	require.NotEmpty(t, first, "in memory, three replicas")

	nc, err := nats.Connect(urls)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_interlock_pending", nil, 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(m.Data), `"success":true`)
	require.Eventually(t, func() bool {
		e, err := replicated.Epoch(ctx(t))
		return err == nil && e != "" && e != first
	}, 30*time.Second, 100*time.Millisecond, "a new leader, a new epoch")
}
