package processor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// TestPendingIndexInMemory: the pending index is derived from the run
// records, so it is kept in memory by default (issue 25: its entry, its
// removal's marker and the marker's expiry cost three fsyncs per cycle on
// disk), and file storage stays available.
func TestPendingIndexInMemory(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	storage := func(c *jetstream.Client, bucket string) string {
		st, err := js.Stream(context.Background(), "KV_"+c.BucketName(bucket))
		require.NoError(t, err)
		return st.CachedInfo().Config.Storage.String()
	}
	inMemory := jstest.Client(t, srv)
	assert.Equal(t, "Memory", storage(inMemory, jetstream.PendingBucket))
	assert.Equal(t, "File", storage(inMemory, jetstream.RunsBucket), "the records stay on disk")
	onDisk := jstest.Client(t, srv, jetstream.Config{Prefix: "disk", PendingStorage: jetstream.FileStorage})
	assert.Equal(t, "File", storage(onDisk, jetstream.PendingBucket))
}

// TestPendingIndexRebuiltAfterNATSRestart: the NATS server restarts under
// a running coordinator and loses the memory-backed index; the coordinator
// provisions it again and builds it from the records, so everything that
// waits is listed again, and decided it leaves the list. Each build is in
// the audit trail (on the no-run token), the one at the start and the one
// after the loss: an index lost, or its bucket deleted by an operator,
// leaves a trace there, not only in the coordinator's log.
func TestPendingIndexRebuiltAfterNATSRestart(t *testing.T) {
	t.Parallel()
	cfg := embedded.Config{DataDir: t.TempDir()}
	var calls counter
	h := &harness{t: t, srv: jstest.Server(t, cfg), agents: map[string]AgentFunc{"refunds": approvalAgent(&calls)}}
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	h.startCoordinator(nil)
	h.startWorker(nil)
	runs := h.suspendedRuns("refunds", 10)
	listed := h.waitListed
	listed(len(runs))

	builds := h.waitEvents(subjects.NoRun, subjects.EventPendingIndexBuilt, 1)
	assert.True(t, strings.HasPrefix(builds[0].Detail, "0 runs read, 0 waiting interrupts put,"),
		"the first build found nothing waiting: %s", builds[0].Detail)

	h.srv = jstest.Restart(t, h.srv, cfg)
	listed(len(runs))
	builds = h.waitEvents(subjects.NoRun, subjects.EventPendingIndexBuilt, 2)
	want := fmt.Sprintf("%d runs read, %d waiting interrupts put,", len(runs), len(runs))
	assert.True(t, strings.HasPrefix(builds[1].Detail, want), "%s, want %s", builds[1].Detail, want)
	h.approveAll(runs)
	listed(0)
}

// TestPendingIndexAutoStorage: "auto" keeps the index in memory on a
// cluster, where a memory-backed stream's configuration outlives a restart
// of every server (its entries do not: the coordinator builds them again).
func TestPendingIndexAutoStorage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	servers := jstest.Cluster(t, 3)
	c := jstest.ClientURL(t, jstest.URLs(servers), jetstream.Config{Replicas: 3, PendingStorage: jetstream.AutoStorage})
	nc, err := nats.Connect(jstest.URLs(servers))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), "KV_"+c.BucketName(jetstream.PendingBucket))
	require.NoError(t, err)
	assert.Equal(t, "Memory", st.CachedInfo().Config.Storage.String())
	assert.Equal(t, 3, st.CachedInfo().Config.Replicas)
}

// TestPendingIndexMissingDoesNotStallRuns: the memory-backed bucket is
// gone (a single server restarted) and this coordinator may not create it
// (per-role permissions: admin provisions). Runs go on suspending, with
// their events and timers; the index's writes are dropped; once admin
// provisions again the coordinator builds the index whole.
func TestPendingIndexMissingDoesNotStallRuns(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&counter{})})
	bound, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URL: h.srv.URL()}, jetstream.Config{})
	require.NoError(t, err)
	t.Cleanup(bound.Close)
	require.False(t, bound.Provisioner())
	require.NoError(t, coordinator.Provision(context.Background(), h.admin, coordinator.Config{AckWait: testAckWait}))
	reg := prometheus.NewRegistry()
	co := coordinator.New(bound, coordinator.Config{AckWait: testAckWait, Logger: quiet, IndexInterval: 50 * time.Millisecond,
		TopologyInterval: 50 * time.Millisecond, Registry: reg})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	h.startWorker(nil)
	first := h.start("refunds", nil)
	h.suspendedAtPass(first, 0)

	nc, err := nats.Connect(h.srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(context.Background(), "KV_"+h.admin.BucketName(jetstream.PendingBucket)))

	second := h.start("refunds", nil)
	h.waitEvents(second, subjects.EventSuspended, 1)
	// Only admin can create it again: that is an alert.
	require.Eventually(t, func() bool { return gaugeValue(t, reg, "interlock_topology_drift") == 1 }, waitLimit,
		10*time.Millisecond, "the drift metric while the bucket is missing")

	require.NoError(t, h.admin.Provision(context.Background()))
	require.Eventually(t, func() bool {
		p, err := h.client.Pending(h.ctx())
		return err == nil && len(p) == 2
	}, waitLimit, 20*time.Millisecond, "both runs listed once the bucket is back")
}

// TestPendingIndexLostIsNoDrift: a memory-backed index lost with a server
// restart is not drift when this coordinator creates it again. Its
// topology check, running before the index check noticed, raised the alert
// (an error log, the drift metric, a topology_drift event in the audit
// trail) for a bucket about to come back. It says what it found at
// warning level instead; found missing again at the next check (not
// created again after all), it is an alert. A coordinator that may not
// create the bucket alerts at once (TestPendingIndexMissingDoesNotStallRuns).
func TestPendingIndexLostIsNoDrift(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	logs := &syncbuf.Buffer{}
	reg := prometheus.NewRegistry()
	// The index check runs at start and then only after an hour, so the
	// topology checks (every 50 ms) find the bucket missing.
	co := coordinator.New(h.conn(), coordinator.Config{AckWait: testAckWait, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), TopologyInterval: 50 * time.Millisecond, IndexInterval: time.Hour})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	require.Eventually(t, func() bool { return gaugeValue(t, reg, "interlock_pending_index_builds_total") == 1 },
		waitLimit, 10*time.Millisecond, "the index check at start built the (new) index")

	nc, err := nats.Connect(h.srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(context.Background(), h.admin.BucketStreamName(jetstream.PendingBucket)))
	const alarm = "streams or buckets changed since provisioned"
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), alarm) }, waitLimit, 10*time.Millisecond,
		"the alert, once the bucket stayed missing")
	first := logs.String()
	first = first[:strings.Index(first, alarm)]
	assert.Equal(t, 1, strings.Count(first, "the pending index is missing"), "the first check found it missing and warned")
	require.Eventually(t, func() bool { return gaugeValue(t, reg, "interlock_topology_drift") == 1 }, waitLimit, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		audited, err := h.admin.Messages(context.Background(), jetstream.StreamEvents, "interlock.events._.topology_drift", 0, 10)
		require.NoError(t, err)
		return len(audited) == 1
	}, waitLimit, 10*time.Millisecond, "the topology_drift event, once the bucket stayed missing")
}

// TestPendingIndexRebuiltAfterLeaderChange: a pending index in memory on a
// cluster can come back older than it was, not empty and with its marker,
// when most of its replicas restart at once and the one left had not yet
// stored the last writes (memory Raft logs do not survive a restart). It
// then lists an interrupt decided since and misses one suspended since,
// and nothing would ever repair it. Such a loss always comes with a new
// leader for the index's stream: the coordinator builds the index again
// whenever that leader changed since its marker was written, and the
// build removes the entries no waiting interrupt backs. The test leaves the
// index as such a loss would (an entry removed, a removed one put back as
// admin) and has the stream elect a new leader.
func TestPendingIndexRebuiltAfterLeaderChange(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	servers := jstest.Cluster(t, 3)
	h := clusterHarness(t, jstest.URLs(servers), 1)
	var runs []string
	for range 3 {
		var run string
		retry(t, "start", func() error {
			var err error
			run, err = h.client.Start(h.ctx(), "refunds", nil)
			return err
		})
		runs = append(runs, run)
	}
	ids := map[string]string{}
	for _, r := range runs {
		ids[r] = h.suspendedAtPass(r, 0).Pending()[0].ID
	}
	listed := func(want ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			p, err := h.client.Pending(h.ctx())
			if err != nil {
				return false
			}
			var got []string
			for _, e := range p {
				got = append(got, e.RunID)
			}
			return assert.ElementsMatch(new(testing.T), want, got)
		}, waitLimit, 20*time.Millisecond, "listed: %v", want)
	}
	listed(runs...)
	h.waitEvents(subjects.NoRun, subjects.EventPendingIndexBuilt, 1)

	nc, err := nats.Connect(jstest.URLs(servers))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(h.ctx(), h.admin.BucketName(jetstream.PendingBucket))
	require.NoError(t, err)
	decided := runs[1]
	old, err := kv.Get(h.ctx(), subjects.PendingKey(decided, ids[decided]))
	require.NoError(t, err)
	h.decide(decided, ids[decided], subjects.StatusResolved, map[string]any{"amount": 2})
	listed(runs[0], runs[2])

	// What the replica left would hold: the decided interrupt's entry (its
	// removal lost) and no entry for the first run (its put lost).
	// As the coordinator's puts, with a message id (the listing skips
	// what has none: not the coordinator's).
	_, err = js.PublishMsg(h.ctx(), &nats.Msg{Subject: "$KV." + h.admin.BucketName(jetstream.PendingBucket) + "." +
		subjects.PendingKey(decided, ids[decided]), Data: old.Value(), Header: nats.Header{nats.MsgIdHdr: {"replica-left"}}})
	require.NoError(t, err)
	require.NoError(t, kv.Delete(h.ctx(), subjects.PendingKey(runs[0], ids[runs[0]])))
	listed(decided, runs[2])

	stream := "KV_" + h.admin.BucketName(jetstream.PendingBucket)
	before, err := js.Stream(h.ctx(), stream)
	require.NoError(t, err)
	leader := before.CachedInfo().Cluster.Leader
	retry(t, "step down", func() error {
		m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second)
		if err == nil && !strings.Contains(string(m.Data), `"success":true`) {
			err = fmt.Errorf("step down: %s", m.Data)
		}
		return err
	})
	require.Eventually(t, func() bool {
		st, err := js.Stream(context.Background(), stream)
		return err == nil && st.CachedInfo().Cluster.Leader != "" && st.CachedInfo().Cluster.Leader != leader
	}, waitLimit, 50*time.Millisecond, "a new leader for the index")

	listed(runs[0], runs[2])
	builds := h.waitEvents(subjects.NoRun, subjects.EventPendingIndexBuilt, 2)
	assert.Contains(t, builds[1].Detail, "1 stale entries removed", "the build says what it removed: %s", builds[1].Detail)
}
