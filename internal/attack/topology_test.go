package attack_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// TestAttackCoordinatorLowersLimits is issue 23 finding 1: with the
// coordinator's credentials (what `serve` runs as), read a stream's
// configuration, set max_msgs to 1 and send STREAM.UPDATE: the audit trail
// and the decisions shrink to one message each, deny_purge and deny_delete
// notwithstanding. The same lowering of the run records' and the pending
// index's buckets erases records. Only admin changes a stream's or a
// bucket's configuration: the coordinator holds no STREAM.UPDATE.
func TestAttackCoordinatorLowersLimits(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	d.suspend(d.client("agent"), "run-2", "ada")
	// Two decisions in the decisions stream, for an interrupt that does
	// not exist: refused, they leave both runs pending.
	ada := d.attacker("ada")
	for _, run := range []string{"run-1", "run-2"} {
		data, err := json.Marshal(subjects.Decision{Version: 1, InterruptID: "no-such-interrupt", Status: subjects.StatusResolved})
		require.NoError(t, err)
		_, err = ada.js.Publish("interlock.resume."+run+".ada", data)
		require.NoError(t, err)
	}
	admin := d.attacker("admin")
	streams := []string{"INTERLOCK_EVENTS", "INTERLOCK_DECISIONS", "KV_interlock_runs", "KV_interlock_pending"}
	before := map[string]uint64{}
	for _, stream := range streams {
		require.Eventually(t, func() bool {
			info, err := admin.js.StreamInfo(stream)
			require.NoError(t, err)
			before[stream] = info.State.Msgs
			return info.State.Msgs >= 2
		}, 10*time.Second, 10*time.Millisecond, "%s holds two messages", stream)
	}

	a := d.attacker("coordinator")
	for _, stream := range streams {
		info, err := a.js.StreamInfo(stream)
		require.NoError(t, err, "the coordinator reads %s's configuration", stream)
		lowered := info.Config
		lowered.MaxMsgs = 1
		_, err = a.js.UpdateStream(&lowered)
		require.Error(t, err, "the coordinator may not lower %s's limits", stream)
		a.refused(t, "$JS.API.STREAM.UPDATE."+stream)

		after, err := admin.js.StreamInfo(stream)
		require.NoError(t, err)
		assert.Equal(t, int64(-1), after.Config.MaxMsgs, "%s's limit is unchanged", stream)
		assert.GreaterOrEqual(t, after.State.Msgs, before[stream], "%s lost no message", stream)
	}
}

// TestAdminLoweringALimitRaisesTheAlert: admin may still change a stream,
// and lowering a limit is erasing: a running coordinator raises the alert
// (an error log, the interlock_topology_drift metric, a topology_drift
// audit event naming the field, what was provisioned and what it found),
// and a coordinator starting refuses, saying the same. Restoring the limit
// clears the metric.
func TestAdminLoweringALimitRaisesTheAlert(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	logs := &syncbuf.Buffer{}
	reg := prometheus.NewRegistry()
	cfg := coordinator.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), AckWait: 2 * time.Second,
		Registry: reg, TopologyInterval: 50 * time.Millisecond}
	co := coordinator.New(d.client("coordinator"), cfg)
	require.NoError(t, co.Start(d.ctx))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	drift := func() float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "interlock_topology_drift" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	require.Zero(t, drift())

	admin := d.attacker("admin")
	setMaxMsgs := func(n int64) {
		info, err := admin.js.StreamInfo("INTERLOCK_DECISIONS")
		require.NoError(t, err)
		cfg := info.Config
		cfg.MaxMsgs = n
		_, err = admin.js.UpdateStream(&cfg)
		require.NoError(t, err, "admin may")
	}
	setMaxMsgs(1000)
	const want = "INTERLOCK_DECISIONS: max_msgs is 1000, want unlimited"
	require.Eventually(t, func() bool { return drift() == 1 }, 10*time.Second, 10*time.Millisecond, "the metric")
	var audited []jetstream.StoredMsg
	require.Eventually(t, func() bool {
		var err error
		audited, err = d.client("auditor").Messages(d.ctx, jetstream.StreamEvents, "interlock.events._.topology_drift", 0, 10)
		require.NoError(t, err)
		return len(audited) > 0
	}, 10*time.Second, 10*time.Millisecond, "the audit event")
	var ev subjects.Event
	require.NoError(t, json.Unmarshal(audited[0].Data, &ev))
	assert.Equal(t, subjects.EventTopologyDrift, ev.Type)
	assert.Contains(t, ev.Detail, want)
	assert.Contains(t, logs.String(), "streams or buckets changed since provisioned")
	assert.Contains(t, logs.String(), want)

	err := coordinator.New(d.client("coordinator"), coordinator.Config{Logger: quiet}).Start(d.ctx)
	require.ErrorIs(t, err, jetstream.ErrDrift, "a coordinator starting refuses")
	assert.Contains(t, err.Error(), want)

	setMaxMsgs(-1)
	require.Eventually(t, func() bool { return drift() == 0 }, 10*time.Second, 10*time.Millisecond, "restored")
	again := coordinator.New(d.client("coordinator"), coordinator.Config{Logger: quiet})
	require.NoError(t, again.Start(d.ctx), "intact again: a coordinator starts")
	_ = again.Stop(context.Background())
}

// TestAttackCoordinatorRollsUpRunRecords: the coordinator may put run
// records, and nats.go creates buckets allowing rollups, so one put with
// "Nats-Rollup: all" erased every other run's record. Provisioning turns
// rollups off on every bucket (and the topology check holds them off).
func TestAttackCoordinatorRollsUpRunRecords(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	d.suspend(d.client("agent"), "run-2", "ada")
	admin := d.attacker("admin")
	before, err := admin.js.StreamInfo("KV_interlock_runs")
	require.NoError(t, err)
	require.EqualValues(t, 2, before.State.Msgs, "two records; no marker in a bucket on disk that never was in memory")

	a := d.attacker("coordinator")
	m := nats.NewMsg("$KV.interlock_runs.run-3")
	m.Header.Set("Nats-Rollup", "all")
	m.Data = []byte("{}")
	_, err = a.js.PublishMsg(m)
	require.Error(t, err, "no rollups in a bucket")
	after, err := admin.js.StreamInfo("KV_interlock_runs")
	require.NoError(t, err)
	assert.EqualValues(t, 2, after.State.Msgs, "every run record is still there")
	for _, run := range []string{"run-1", "run-2"} {
		_, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
		require.NoError(t, err, run)
	}
}

// TestShippedCoordinatorReads: the coordinator's exact JetStream API
// subjects still cover what serve reads beside its consumers: the work
// backlog (metrics, /readyz), stream sizes and counts, the pending count,
// the last outcome of a pass and a run's events.
func TestShippedCoordinatorReads(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	w := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, w.Register("refunds", nil))
	require.NoError(t, w.Provision(d.ctx))
	_, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", map[string]any{"order": "A-1"})
	require.NoError(t, err)
	d.suspend(d.client("agent"), "run-1", "ada")

	c := d.client("coordinator")
	work, err := processor.NewClient(c).WorkBacklog(d.ctx)
	require.NoError(t, err)
	assert.Equal(t, []store.AgentWork{{Agent: "refunds", Waiting: 1}}, work)
	_, err = c.StoredBytes(d.ctx)
	require.NoError(t, err)
	_, err = c.MsgCount(d.ctx, jetstream.StreamRuns)
	require.NoError(t, err, "/readyz")
	n, err := store.NewJetStream(c).PendingCount(d.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = c.LastMsg(d.ctx, jetstream.StreamRuns, "interlock.suspended.>")
	require.NoError(t, err)
	evs, err := c.Messages(d.ctx, jetstream.StreamEvents, "interlock.events.run-1.>", 0, 10)
	require.NoError(t, err)
	assert.NotEmpty(t, evs)
}

// TestAttackCoordinatorCreatesAndDeletes: with the JetStream API the
// coordinator also deleted a worker's consumer (its agent's work then
// waits for ever) and created a stream capturing ada's inbox (her
// verdicts, kept for it to read). It holds neither right now.
func TestAttackCoordinatorCreatesAndDeletes(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	w := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, w.Register("refunds", nil))
	require.NoError(t, w.Provision(d.ctx))

	a := d.attacker("coordinator")
	require.Error(t, a.js.DeleteConsumer("INTERLOCK_WORK", "worker_refunds"))
	a.refused(t, "$JS.API.CONSUMER.DELETE.INTERLOCK_WORK.worker_refunds")
	_, err := a.js.AddStream(&nats.StreamConfig{Name: "SNOOP", Subjects: []string{"_INBOX.ada.>"}})
	require.Error(t, err)
	a.refused(t, "$JS.API.STREAM.CREATE.SNOOP")

	admin := d.attacker("admin")
	_, err = admin.js.ConsumerInfo("INTERLOCK_WORK", "worker_refunds")
	require.NoError(t, err, "the worker's consumer is still there")
	_, err = admin.js.StreamInfo("SNOOP")
	require.ErrorIs(t, err, nats.ErrStreamNotFound)
}
