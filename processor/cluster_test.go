package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// retry repeats op through a cluster's failover: a request may time out
// while a new stream leader is elected.
func retry(t *testing.T, what string, op func() error) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		err := op()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond) // back off between attempts during failover
	}
}

// TestClusterNodeLoss runs Interlock on a three-node cluster with R3 streams,
// with two coordinators and two workers, and kills a node while runs are
// suspending and being decided: no run is lost and no decision is applied
// twice.
func TestClusterNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	servers := jstest.Cluster(t, 3)
	urls := jstest.URLs(servers)
	cfg := jetstream.Config{Replicas: 3}
	var calls counter
	h := &harness{t: t, agents: map[string]AgentFunc{"refunds": approvalAgent(&calls)}}
	h.admin = jstest.ClientURL(t, urls, cfg)
	h.client = NewClient(h.admin)
	conn := func() *jetstream.Client { return jstest.ClientURL(t, urls, cfg) }
	for range 2 {
		co := NewCoordinator(conn(), CoordinatorConfig{AckWait: 2 * time.Second, Logger: quiet})
		require.NoError(t, co.Start(context.Background()))
		t.Cleanup(co.Stop)
		w := NewWorker(conn(), WorkerConfig{AckWait: 2 * time.Second, Logger: quiet})
		require.NoError(t, w.Register("refunds", h.agents["refunds"]))
		require.NoError(t, w.Start(context.Background()))
		t.Cleanup(func() { stopWorker(t, w) })
	}

	const runs = 30
	ids := make([]string, runs)
	for i := range runs {
		ids[i] = fmt.Sprintf("cluster-%02d", i)
		retry(t, "start", func() error {
			_, err := h.client.Start(h.ctx(), "refunds", nil, WithRunID(ids[i]))
			return err
		})
		if i == runs/2 {
			servers[0].Shutdown() // a node dies under load
		}
	}
	wait := func(run string, done func(*subjects.Run) bool) *subjects.Run {
		var rec *subjects.Run
		retry(t, "wait "+run, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			rec, err = h.client.Wait(ctx, run, done)
			return err
		})
		return rec
	}
	for _, run := range ids {
		rec := wait(run, Suspended)
		retry(t, "decide "+run, func() error {
			v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
				Status: subjects.StatusResolved, Payload: map[string]any{"amount": 1}, DecisionID: "d-" + run})
			if err == nil && v.Outcome != subjects.OutcomeAccepted && v.Outcome != subjects.OutcomeDuplicate {
				return fmt.Errorf("verdict %+v", v)
			}
			return err
		})
	}
	for _, run := range ids {
		rec := wait(run, Finished)
		require.Equal(t, subjects.RunCompleted, rec.Status, "%s: %s", run, rec.Error)
		var res map[string]any
		require.NoError(t, json.Unmarshal(rec.Result, &res))
		assert.EqualValues(t, 1, res["amount"], run)
		assert.Equal(t, 1, rec.Pass, "%s: two passes, no more", run)
		accepted := 0
		for _, e := range h.events(run, subjects.EventDecisionAccepted) {
			if e.Verdict.DecisionID == "d-"+run {
				accepted++
			}
		}
		assert.Equal(t, 1, accepted, "%s: the decision is applied once", run)
	}
}
