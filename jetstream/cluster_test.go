package jetstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

var shippedCluster = []string{"../deploy/nats/cluster/n1.conf", "../deploy/nats/cluster/n2.conf", "../deploy/nats/cluster/n3.conf"}

// TestConcurrentProvisionFreshCluster starts the shipped three-node configs
// as three separate nats-server processes and, the moment they are up,
// several provisioners at once (goroutines, each with its own connection,
// as separate `interlock serve --replicas 3` and `interlock provision`
// would be), half of them with the default config as the SDK's wiring has
// it: every one succeeds on its first try, and everything ends at three
// replicas, including a bucket a default-config client creates later.
func TestConcurrentProvisionFreshCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	jstest.SetPasswords(t)
	nodes := jstest.ProcessCluster(t, 3, shippedCluster...)
	urls := jstest.As("admin", jstest.NodeURLs(nodes))

	const provisioners = 4
	var wg sync.WaitGroup
	errs := make([]error, provisioners)
	clients := make([]*jetstream.Client, provisioners)
	start := make(chan struct{})
	for i := range provisioners {
		cfg := jetstream.Config{Replicas: 3}
		if i%2 == 1 {
			cfg = jetstream.Config{} // the README's wiring: one replica by default
		}
		c, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: urls, Name: "provisioner"}, cfg)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if errs[i] = c.Provision(pctx); errs[i] == nil { // then its consumers, as a coordinator does
				errs[i] = c.CreateConsumer(pctx, jetstream.ConsumeConfig{Stream: jetstream.StreamDecisions,
					Durable: "coordinator", FilterSubjects: []string{"interlock.resume.>"}, AckWait: 30 * time.Second})
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "provisioner %d", i)
	}
	t.Logf("%d concurrent provisioners done in %s", provisioners, time.Since(began).Round(time.Millisecond))

	late, err := jetstream.Dial(ctx(t), jetstream.DialConfig{URL: urls}, jetstream.Config{})
	require.NoError(t, err)
	t.Cleanup(late.Close)
	require.NoError(t, late.Provision(ctx(t)))
	_, err = late.Bucket(ctx(t), "added-later", "", 0)
	require.NoError(t, err)

	nc, err := nats.Connect(urls)
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	c := clients[0]
	names := []string{"KV_" + c.BucketName(jetstream.RunsBucket), "KV_" + c.BucketName(jetstream.PendingBucket), "KV_" + c.BucketName("added-later")}
	for _, s := range []jetstream.Stream{jetstream.StreamWork, jetstream.StreamRuns, jetstream.StreamDecisions,
		jetstream.StreamEvents, jetstream.StreamDLQ, jetstream.StreamTimers, jetstream.StreamAGUI} {
		names = append(names, c.StreamName(s))
	}
	for _, name := range names {
		st, err := js.Stream(ctx(t), name)
		require.NoError(t, err, name)
		assert.Equal(t, 3, st.CachedInfo().Config.Replicas, name)
	}
}

// TestFiredTimerOnClusterPassesCheckFired: on three nodes with the
// timers stream at three replicas, a timer the server's scheduler fires is
// stored with Nats-Scheduler and no header of an answer, read back through
// both reads, so the coordinator's CheckFired takes it.
func TestFiredTimerOnClusterPassesCheckFired(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	nodes := jstest.Cluster(t, 3)
	c := jstest.ClientURL(t, jstest.URLs(nodes), jetstream.Config{Replicas: 3})
	ns := c.Namespace()
	at, err := ns.TimerSchedule("run-1", "e-1")
	require.NoError(t, err)
	due, err := ns.TimerDue("run-1")
	require.NoError(t, err)
	require.NoError(t, c.PublishAll(ctx(t), jetstream.ScheduleMsg(at, due, time.Now().Add(time.Second), []byte(`{"t":1}`), "run-1:e-1")))
	var m jetstream.StoredMsg
	require.Eventually(t, func() bool {
		m, err = c.LastMsg(ctx(t), jetstream.StreamTimers, due)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, jetstream.CheckFired(m.Header))
	msgs, err := c.Messages(ctx(t), jetstream.StreamTimers, due, 0, 1)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.NoError(t, jetstream.CheckFired(msgs[0].Header))
}
