package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/subjects"
)

// TestClusterEveryRole runs every role on three separate nats-server
// processes with R3 streams: a coordinator that provisions (as `serve
// --replicas 3`), and a worker, a notifier (real webhook) and a gateway
// (real HTTP) that bind with the default config (one replica), as the
// shipped compose and Kubernetes files run them. One node is SIGKILLed and
// restarted, then another killed for good, while runs are decided through
// the gateway and the SDK: every run completes with its decision applied
// once, every suspension is notified, and every stream and bucket still
// has three replicas.
func TestClusterEveryRole(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test")
	}
	nodes := jstest.DurableProcessCluster(t, 3)
	urls := jstest.NodeURLs(nodes)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return c
	}
	bind := func() *jetstream.Client { // a role that does not provision, default config
		c, err := jetstream.Dial(ctx(), jetstream.DialConfig{URL: urls}, jetstream.Config{})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}

	var mu sync.Mutex
	notified := map[string]int{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		notified[r.Header.Get(notifier.HeaderIdempotencyKey)]++
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	ncfg, err := notifier.ParseConfig("cluster.yaml", []byte(fmt.Sprintf(`
gateway_url: https://interlock.example.test
nats_url: nats://127.0.0.1:4222
sinks:
  ops: {type: webhook, url: %s}
routes:
  - name: all
    match: agent == "refunds"
    sinks: [ops]
retry:
  attempts: 5
  backoff: [100ms]
`, hook.URL)))
	require.NoError(t, err)
	dir, err := approvers.Parse("test", []byte(fmt.Sprintf("identities:\n  ada: {tokens: [%q]}\n", approvers.Digest("ada-token"))))
	require.NoError(t, err)

	// Provisioning: the admin (as `interlock provision --replicas 3`).
	admin := jstest.ClientURL(t, urls, jetstream.Config{Replicas: 3})
	require.NoError(t, gateway.Provision(ctx(), admin))
	prov := processor.NewWorker(admin, processor.WorkerConfig{})
	require.NoError(t, prov.Register("refunds", nil))
	require.NoError(t, prov.Provision(ctx()))
	pn, err := notifier.New(admin, ncfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, pn.Provision(ctx()))

	co := coordinator.New(jstest.ClientURL(t, urls, jetstream.Config{Replicas: 3}),
		coordinator.Config{AckWait: 2 * time.Second, Logger: quiet, Groups: dir.Groups})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	w := processor.NewWorker(bind(), processor.WorkerConfig{AckWait: 2 * time.Second, Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, input json.RawMessage) (any, error) {
		d, err := processor.Interrupt(ctx, processor.Request{Message: "refund?", Approvers: []string{"ada"}})
		if err != nil {
			return nil, err
		}
		return map[string]any{"payload": d.Payload, "by": d.Approver}, nil
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	n, err := notifier.New(bind(), ncfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	gw, err := gateway.New(context.Background(), bind(), gateway.Config{Directory: dir, Logger: quiet, Timeout: 30 * time.Second})
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(gw)
	hs.Config = gw.Server()
	hs.Start()
	t.Cleanup(hs.Close)
	client := processor.NewClient(admin)

	const runs = 12
	ids := make([]string, runs)
	pending := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("roles-%02d", i)
		_, err := client.Start(ctx(), "refunds", nil, processor.WithRunID(ids[i]))
		require.NoError(t, err)
	}
	for i, run := range ids {
		rec, err := client.Wait(ctx(), run, processor.Suspended)
		require.NoError(t, err)
		pending[i] = rec.Pending()[0].ID
	}
	viaGateway := func(i int) {
		body := []byte(fmt.Sprintf(`{"status":"resolved","payload":{"n":%d},"decisionId":"d-%s"}`, i, ids[i]))
		req, err := http.NewRequest("POST", hs.URL+"/v1/runs/"+ids[i]+"/interrupts/"+pending[i]+"/decision", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer ada-token")
		resp, err := (&http.Client{Timeout: 45 * time.Second}).Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "run %d: %s", i, raw)
	}
	viaSDK := func(i int) {
		_, err := client.Decide(ctx(), processor.DecisionRequest{RunID: ids[i], InterruptID: pending[i],
			Status: subjects.StatusResolved, Payload: map[string]any{"n": i}, Approver: "ada", DecisionID: "d-" + ids[i]})
		require.NoError(t, err, "run %d", i)
	}
	for i := range 3 {
		viaGateway(i)
	}
	nodes[0].Kill() // a node crashes under load ...
	for i := 3; i < 6; i++ {
		viaSDK(i)
	}
	nodes[0].Start() // ... and comes back
	jstest.WaitHealthy(t, 60*time.Second, nodes[0])
	nodes[1].Kill() // another dies for good
	for i := 6; i < runs; i++ {
		if i%2 == 0 {
			viaGateway(i)
		} else {
			viaSDK(i)
		}
	}

	for i, run := range ids {
		rec, err := client.Wait(ctx(), run, processor.Finished)
		require.NoError(t, err)
		require.Equal(t, subjects.RunCompleted, rec.Status, "%s: %s", run, rec.Error)
		var res struct {
			Payload struct{ N int }
			By      string
		}
		require.NoError(t, json.Unmarshal(rec.Result, &res))
		assert.Equal(t, i, res.Payload.N, run)
		assert.Equal(t, "ada", res.By, run)
		assert.Equal(t, 1, rec.Pass, "%s: two passes, no more", run)
		// The replay can finish before the decision's event is stored: a
		// commit cut short by the node loss is finished when the coordinator
		// handles the decision's redelivery.
		var (
			readMu   sync.Mutex
			accepted int
			lastErr  error
		)
		if !assert.Eventually(t, func() bool {
			evs, err := client.Events(ctx(), run)
			n := 0
			for _, e := range evs {
				if e.Type == subjects.EventDecisionAccepted {
					n++
				}
			}
			readMu.Lock()
			defer readMu.Unlock()
			accepted, lastErr = n, err
			return err == nil && n > 0
		}, 30*time.Second, 50*time.Millisecond, "%s: the decision's event", run) {
			readMu.Lock()
			t.Fatalf("%s: no decision_accepted event read; the last read found %d, error %v", run, accepted, lastErr)
		}
		readMu.Lock()
		n := accepted
		readMu.Unlock()
		assert.Equal(t, 1, n, "%s: the decision is applied once", run)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, run := range ids {
			if notified["ops."+run+".0"] == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every suspension notified")

	nc, err := nats.Connect(jstest.NodeURLs(nodes))
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	// The meta leader may be re-elected after the second kill: read until
	// the cluster answers.
	// Each attempt has a few seconds: a request lost in the election is
	// asked again, not waited for (with the minute ctx() gives, one lost
	// request outlasted Eventually: failed in CI under load).
	replicas := map[string]int{}
	var lastErr lastError
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names := js.StreamNames(c)
		for name := range names.Name() {
			st, err := js.Stream(c, name)
			if err != nil {
				lastErr.Store(fmt.Sprintf("%s: %v", name, err))
				return false
			}
			replicas[name] = st.CachedInfo().Config.Replicas
		}
		if err := names.Err(); err != nil {
			lastErr.Store(err.Error())
			return false
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "the cluster lists its streams (last error: %v)", &lastErr)
	assert.GreaterOrEqual(t, len(replicas), 12, "streams and buckets checked")
	for name, n := range replicas {
		assert.Equal(t, 3, n, name)
	}
}

// lastError is the last error a waiting condition saw, for its failure
// message.
type lastError struct{ atomic.Value }

func (l *lastError) String() string {
	v, _ := l.Load().(string)
	return v
}
