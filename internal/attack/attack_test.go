package attack_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// forgeByRepublish is found item 1: a user with the JetStream API updates a
// stream so that what it may publish is re-published onto a resume subject,
// as an approver.
func forgeByRepublish(t *testing.T, user, stream, source, approver string) {
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", approver)
	admin := d.attacker("admin")
	info, err := admin.js.StreamInfo(stream)
	require.NoError(t, err)
	forged := info.Config
	forged.RePublish = &nats.RePublish{Source: source, Destination: "interlock.resume.run-1." + approver}

	a := d.attacker(user)
	_, err = a.js.UpdateStream(&forged)
	require.Error(t, err, "%s may not update stream %s", user, stream)
	a.refused(t, "$JS.API.STREAM.UPDATE."+stream)

	after, err := admin.js.StreamInfo(stream)
	require.NoError(t, err)
	assert.Nil(t, after.Config.RePublish, "the stream is unchanged")
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
}

// TestAttackAgentRepublishForgesDecision: the agent makes the work stream
// re-publish its work item onto interlock.resume.run-1.ada.
func TestAttackAgentRepublishForgesDecision(t *testing.T) {
	t.Parallel()
	forgeByRepublish(t, "agent", "INTERLOCK_WORK", "interlock.start.forge", "ada")
}

// TestAttackNotifierRepublishForgesDecision: the notifier does the same
// through the dead-letter stream, as bob.
func TestAttackNotifierRepublishForgesDecision(t *testing.T) {
	t.Parallel()
	forgeByRepublish(t, "notifier", "INTERLOCK_DLQ", "interlock.dlq.forge", "bob")
}

// TestAttackAgentCreatesPushConsumerOntoResume: a consumer's deliver subject
// is chosen by whoever creates it and published with the server's rights, so
// creating consumers is as good as publishing anywhere.
func TestAttackAgentCreatesPushConsumerOntoResume(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	a := d.attacker("agent")
	// Named as the agent's own consumer, the one it may look up: nats.go
	// looks a consumer up before creating it.
	_, err := a.js.AddConsumer("INTERLOCK_WORK", &nats.ConsumerConfig{Durable: "worker_refunds", FilterSubject: "interlock.start.forge",
		DeliverSubject: "interlock.resume.run-1.ada", AckPolicy: nats.AckExplicitPolicy})
	require.Error(t, err)
	a.refused(t, "$JS.API.CONSUMER.CREATE.INTERLOCK_WORK")
	_, err = d.attacker("admin").js.ConsumerInfo("INTERLOCK_WORK", "worker_refunds")
	assert.ErrorIs(t, err, nats.ErrConsumerNotFound)
}

// TestAttackForgedReplayWorkItem: whoever may start runs (an agent, the
// gateway) publishes a work item for a later pass carrying a decision
// nobody made, so the body acts as if ada approved. Replays travel on a
// subject only the coordinator may publish on, and a worker refuses a
// start that is not a first pass.
func TestAttackForgedReplayWorkItem(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	var mu sync.Mutex
	var decided []string
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		dec, err := processor.Interrupt(processor.WithToolCall(ctx, "refund"), processor.Request{Approvers: []string{"ada"}})
		if err == nil {
			mu.Lock()
			decided = append(decided, dec.Approver)
			mu.Unlock()
		}
		return "refunded", err
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", map[string]any{"order": "A-1"})
	require.NoError(t, err)
	rec, err := processor.NewClient(d.client("auditor")).Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)

	forged := subjects.Work{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds", Pass: 1},
		Decisions: []subjects.Decision{{Version: 1, DecisionID: "forged", InterruptID: rec.Interrupts[0].ID,
			Status: subjects.StatusResolved, Approver: "ada"}}}
	data, err := json.Marshal(forged)
	require.NoError(t, err)
	for _, user := range []string{"agent", "gateway"} {
		a := d.attacker(user)
		_, err = a.js.Publish("interlock.work.refunds", data, nats.MsgId("forged-replay-"+user))
		require.Error(t, err, "%s may not publish a replay", user)
		a.refused(t, `Publish to "interlock.work.refunds"`)
	}
	// As a start, it is refused by the worker and dead-lettered.
	_, err = d.attacker("gateway").js.Publish("interlock.start.refunds", data, nats.MsgId("forged-start"))
	require.NoError(t, err)
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		info, err := admin.js.StreamInfo("INTERLOCK_DLQ")
		return err == nil && info.State.Msgs == 1
	}, 20*time.Second, 20*time.Millisecond, "the forged start is dead-lettered")
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, decided, "no body ran with the forged decision")
	rec, err = processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
}

// TestAttackAgentPurgesAuditTrail is found item 2: the agent purges
// INTERLOCK_EVENTS. Neither it nor even admin can: the stream denies purges
// and deletes.
func TestAttackAgentPurgesAuditTrail(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	var before int
	require.Eventually(t, func() bool { before = len(d.events("run-1")); return before > 0 },
		10*time.Second, 10*time.Millisecond, "the suspended event is in the trail")

	a := d.attacker("agent")
	require.Error(t, a.js.PurgeStream("INTERLOCK_EVENTS"))
	a.refused(t, "$JS.API.STREAM.PURGE.INTERLOCK_EVENTS")
	require.Error(t, a.js.DeleteStream("INTERLOCK_EVENTS"))
	a.refused(t, "$JS.API.STREAM.DELETE.INTERLOCK_EVENTS")

	admin := d.attacker("admin")
	for _, stream := range []string{"INTERLOCK_EVENTS", "INTERLOCK_DECISIONS"} {
		err := admin.js.PurgeStream(stream)
		require.Error(t, err, "deny_purge on %s", stream)
		info, err := admin.js.StreamInfo(stream)
		require.NoError(t, err)
		assert.True(t, info.Config.DenyPurge && info.Config.DenyDelete, stream)
		// deny_purge and deny_delete cannot be taken back, even by admin.
		cfg := info.Config
		cfg.DenyPurge, cfg.DenyDelete = false, false
		_, err = admin.js.UpdateStream(&cfg)
		require.Error(t, err, stream)
	}
	require.Error(t, admin.js.DeleteMsg("INTERLOCK_EVENTS", 1))
	assert.Len(t, d.events("run-1"), before, "the audit trail is whole")
}

// TestAttackAgentReadsAnotherRunsRecord is found item 2: the agent reads a
// run record (inputs, answers) with $JS.API.DIRECT.GET.
func TestAttackAgentReadsAnotherRunsRecord(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	a := d.attacker("agent")
	_, err := a.nc.Request("$JS.API.DIRECT.GET.KV_interlock_runs.$KV.interlock_runs.run-1", nil, 2*time.Second)
	require.Error(t, err)
	a.refused(t, "$JS.API.DIRECT.GET.KV_interlock_runs")
	_, err = a.nc.Request("$JS.API.STREAM.MSG.GET.KV_interlock_runs", []byte(`{"last_by_subj":"$KV.interlock_runs.run-1"}`), 2*time.Second)
	require.Error(t, err)
	a.refused(t, "$JS.API.STREAM.MSG.GET.KV_interlock_runs")
}

// TestAttackReplyToOverwritesAnotherRun is found item 3: ada names
// $KV.interlock_runs.run-2 as Interlock-Reply-To of her own decision, and the
// coordinator, with its own rights, writes the verdict over run-2's record.
// Now the reply is not sent, the refusal is an event with its own code, and
// the decision itself is handled as any other.
func TestAttackReplyToOverwritesAnotherRun(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	agent := d.client("agent")
	d.suspend(agent, "run-1", "ada")
	d.suspend(agent, "run-2", "bob")
	auditor := d.client("auditor")
	runs := store.NewJetStream(auditor)
	_, before, err := runs.Run(d.ctx, "run-2")
	require.NoError(t, err)

	a := d.attacker("ada")
	for i, target := range []string{"$KV.interlock_runs.run-2", "_INBOX.bob.stolen", "interlock.resume.run-2.bob"} {
		m := nats.NewMsg("interlock.resume.run-1.ada")
		m.Header.Set("Interlock-Reply-To", target)
		m.Header.Set(nats.MsgIdHdr, "attack-"+string(rune('a'+i)))
		status := "resolved"
		if i > 0 {
			status = "cancelled" // already decided: a rejected decision's verdict is refused the same way
		}
		m.Data = []byte(`{"version":1,"decisionId":"attack-` + string(rune('a'+i)) + `","interruptId":"ask","status":"` + status + `"}`)
		_, err := a.js.PublishMsg(m)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, ev := range d.events("run-1") {
			if ev.Type == subjects.EventReplyRefused && ev.Code == subjects.CodeReplyRefused {
				n++
			}
		}
		return n == 3
	}, 20*time.Second, 20*time.Millisecond, "each refused reply is audited")

	_, after, err := runs.Run(d.ctx, "run-2")
	require.NoError(t, err)
	assert.Equal(t, before, after, "run-2's record is untouched")
	rec, err := processor.NewClient(auditor).Run(d.ctx, "run-2")
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.Nil(t, rec.Interrupts[0].Decision)
	// Ada's own decision was still accepted: only the reply was ignored.
	rec1, err := processor.NewClient(auditor).Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.NotNil(t, rec1.Interrupts[0].Decision)
	assert.Equal(t, "ada", rec1.Interrupts[0].Decision.Approver)
}

// TestAttackApproverSnoopsAnotherInbox is the _INBOX part of found item 5:
// ada subscribes to every inbox and reads bob's verdicts.
func TestAttackApproverSnoopsAnotherInbox(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "bob")
	a := d.attacker("ada")
	snoop, err := a.nc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, a.nc.Flush())
	a.refused(t, `Subscription to "_INBOX.>"`)
	snoopBob, err := a.nc.SubscribeSync("_INBOX.bob.>")
	require.NoError(t, err)
	a.refused(t, `Subscription to "_INBOX.bob.>"`)

	v, err := processor.NewClient(d.client("bob")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
		Status: subjects.StatusResolved, Approver: "bob", Payload: map[string]any{"secret": "s3cr3t"}})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome, "bob's verdict reached bob")
	require.NoError(t, a.nc.Flush())
	for _, sub := range []*nats.Subscription{snoop, snoopBob} {
		_, err := sub.NextMsg(50 * time.Millisecond)
		assert.Error(t, err, "ada received nothing of bob's")
	}
}

// TestShippedPermissionsRunEveryRole runs a whole run with each role as its
// own least-privileged user: the worker and the notifier bind to consumers
// admin provisioned, the gateway lists, reads and decides for ada (waiting
// for the verdict on the events feed), ada decides over NATS with her own
// inbox, and the auditor reads it all.
func TestShippedPermissionsRunEveryRole(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))

	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		first, err := processor.Interrupt(processor.WithToolCall(ctx, "one"), processor.Request{Approvers: []string{"ada"}})
		if err != nil {
			return nil, err
		}
		second, err := processor.Interrupt(processor.WithToolCall(ctx, "two"), processor.Request{Approvers: []string{"ada"}})
		if err != nil {
			return nil, err
		}
		return first.Approver + "+" + second.Approver, nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	notes := startNotifier(t, d)
	// What /readyz asks of every service's connection. (Agent workers serve
	// no /readyz, and their users read no stream-wide state.)
	for _, user := range []string{"coordinator", "notifier", "gateway", "auditor"} {
		_, err := d.client(user).MsgCount(d.ctx, jetstream.StreamRuns)
		require.NoError(t, err, "%s is ready", user)
	}

	run, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", map[string]any{"order": "A-1"})
	require.NoError(t, err)
	auditor := processor.NewClient(d.client("auditor"))
	_, err = auditor.Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)

	// The gateway's user: list, read, decide as ada. The coordinator puts
	// the index entry after the record it follows from, so a listing just
	// after the record shows the suspension may not have it yet.
	gw := processor.NewClient(d.client("gateway"))
	var pending []subjects.PendingInterrupt
	require.Eventually(t, func() bool {
		pending, err = gw.Pending(d.ctx)
		require.NoError(t, err)
		return len(pending) == 1
	}, 10*time.Second, 20*time.Millisecond, "the suspension listed")
	_, err = gw.Run(d.ctx, run)
	require.NoError(t, err)
	v, err := gw.Decide(d.ctx, processor.DecisionRequest{RunID: run, InterruptID: pending[0].ID,
		Status: subjects.StatusResolved, Approver: "ada", Via: "gateway"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	// Ada over NATS, as the CLI does: her own user, her own inbox.
	rec, err := auditor.Wait(d.ctx, run, func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended && r.Pass == 1 })
	require.NoError(t, err)
	ada := processor.NewClient(d.client("ada"))
	v, err = ada.Decide(d.ctx, processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	// A duplicate, answered from the audit trail ada may read.
	v, err = ada.Decide(d.ctx, processor.DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusResolved, Approver: "ada", DecisionID: v.DecisionID})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeDuplicate, v.Outcome)

	done, err := auditor.Wait(d.ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, done.Status)
	assert.JSONEq(t, `"ada+ada"`, string(done.Result))
	notes.wait(t)
}

// TestShippedPermissionsRecordsInMemory: with the runs bucket in memory the
// coordinator, as its shipped user, reads a new run's trail (the last event,
// from the stream's leader) before it creates the record, seals copies into
// the events, and a record lost from the bucket is put back from them; the
// auditor reads the trail and gets ciphertext where the record rides.
func TestShippedPermissionsRecordsInMemory(t *testing.T) {
	t.Parallel()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(processor.WithToolCall(ctx, "one"), processor.Request{Approvers: []string{"ada"}})
		if err != nil {
			return nil, err
		}
		return d.Approver, nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	run, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	auditor := processor.NewClient(d.client("auditor"))
	rec, err := auditor.Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)
	// The record lost (what a restart does to a bucket in memory): the
	// decision puts it back from the trail before it is applied.
	nc, err := nats.Connect(d.url("admin"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	runs, err := js.Stream(d.ctx, d.client("admin").BucketStreamName(jetstream.RunsBucket))
	require.NoError(t, err)
	require.NoError(t, runs.Purge(d.ctx, natsjs.WithPurgeSubject("$KV.interlock_runs."+run)))
	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: run,
		InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	done, err := auditor.Wait(d.ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, done.Status)
	assert.JSONEq(t, `"ada"`, string(done.Result))
	assert.Equal(t, uint64(3), done.Writes, "suspended, decided, completed: one record, put back once")

	filter, err := d.client("auditor").Namespace().RunEvents(run)
	require.NoError(t, err)
	// The record is written before the event that carries its copy: a
	// reader that saw it completed waits for that event.
	sealed := 0
	require.Eventually(t, func() bool {
		msgs, err := d.client("auditor").Messages(d.ctx, jetstream.StreamEvents, filter, 1, 100)
		require.NoError(t, err)
		sealed = 0
		for _, m := range msgs {
			if strings.Contains(string(m.Data), `"record":"`) {
				sealed++
			}
		}
		return sealed >= 3
	}, 20*time.Second, 20*time.Millisecond, "a copy on each record write's event")
	assert.Equal(t, 3, sealed, "one copy on each record write's event")
}

// TestUnprovisionedRoleFailsClearly: a worker whose consumer was never
// provisioned does not create it (it may not) but says what to do.
func TestUnprovisionedRoleFailsClearly(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	w := processor.NewWorker(d.client("agent_billing"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("billing", func(context.Context, json.RawMessage) (any, error) { return nil, nil }))
	err := w.Start(d.ctx)
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned)
	assert.Contains(t, err.Error(), "interlock provision")
	assert.Contains(t, err.Error(), "worker_billing")
}

// TestAttackApproverReadsAnAnswer: the run record holds every answer, the
// answers to sensitive questions (a PIN) too. Ada, who may decide run-1,
// reads over NATS the record of run-2, where bob has answered: the shipped
// approver users read no run record, only decide (and read the audit trail,
// which carries no answers).
func TestAttackApproverReadsAnAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	agent := d.client("agent")
	d.suspend(agent, "run-1", "ada")
	d.suspend(agent, "run-2", "bob")
	v, err := processor.NewClient(d.client("bob")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-2",
		InterruptID: "ask", Status: subjects.StatusResolved, Payload: map[string]any{"pin": "pin-8642"}, Approver: "bob"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	a := d.attacker("ada")
	_, err = a.nc.Request("$JS.API.DIRECT.GET.KV_interlock_runs.$KV.interlock_runs.run-2", nil, 2*time.Second)
	require.Error(t, err)
	a.refused(t, "$JS.API.DIRECT.GET.KV_interlock_runs")
	_, err = a.nc.Request("$JS.API.STREAM.MSG.GET.KV_interlock_runs", []byte(`{"last_by_subj":"$KV.interlock_runs.run-2"}`), 2*time.Second)
	require.Error(t, err)
	a.refused(t, "$JS.API.STREAM.MSG.GET.KV_interlock_runs")
	// The audit trail she may read says that bob answered, never what.
	evs, err := processor.NewClient(d.client("ada")).Events(d.ctx, "run-2")
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	for _, ev := range evs {
		raw, _ := json.Marshal(ev)
		assert.NotContains(t, string(raw), "pin-8642") // not the digits alone: a timestamp may hold them
	}
}

// TestAttackApproverBatchReads: the batched direct gets that list events
// are granted to approvers on the events stream only. Ada asks for a batch
// of run records, pending entries, AG-UI transcripts, decisions and pass
// outcomes: every request is refused by the server.
func TestAttackApproverBatchReads(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "bob")
	batch := []byte(`{"next_by_subj":">","batch":100}`)
	for _, stream := range []string{"KV_interlock_runs", "KV_interlock_pending", "INTERLOCK_AGUI", "INTERLOCK_DECISIONS", "INTERLOCK_RUNS"} {
		a := d.attacker("ada")
		subject := "$JS.API.DIRECT.GET." + stream
		_, err := a.nc.Request(subject, batch, 2*time.Second)
		require.Error(t, err, stream)
		a.refused(t, `"`+subject+`"`)
	}
	// What she may read, she reads in batches: the audit trail.
	evs, err := processor.NewClient(d.client("ada")).Events(d.ctx, "run-1")
	require.NoError(t, err)
	assert.NotEmpty(t, evs)
}

// TestAttackApproverCancelPosesAsExpiry is issue 23's finding 10 on the
// shipped configuration: bob, as his own NATS user, cancels with metadata
// {"reason":"expired"}, and the agent's replay was told the interrupt
// expired. The reason comes from who cancelled.
func TestAttackApproverCancelPosesAsExpiry(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := processor.Interrupt(ctx, processor.Request{Message: "refund?", Approvers: []string{"bob"}})
		var ce *processor.CancelledError
		if errors.As(err, &ce) {
			return map[string]string{"reason": ce.Reason, "by": ce.Approver}, nil
		}
		return "refunded", err
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	auditor := processor.NewClient(d.client("auditor"))
	rec, err := auditor.Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)
	v, err := processor.NewClient(d.client("bob")).Decide(d.ctx, processor.DecisionRequest{RunID: run,
		InterruptID: rec.Interrupts[0].ID, Status: subjects.StatusCancelled, Approver: "bob",
		Metadata: map[string]any{"reason": "expired"}})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	rec, err = auditor.Wait(d.ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.JSONEq(t, `{"reason":"denied","by":"bob"}`, string(rec.Result))
}

// Attack (issue 23, finding 7): as the agent, record a suspension just under
// the 1 MiB message limit; ada's 60 KB answer (under the 64 KiB decision
// limit) would then make the run record exceed the server's max_payload:
// no verdict, retried for ever, nobody told. Refused at the suspension
// instead: the coordinator fails the run with record_too_large (audited),
// and ada's answer gets a verdict.
func TestAttackOversizedSuspensionStallsDecision(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	agent := d.client("agent")
	run := "run-oversized"
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"},
			Metadata: json.RawMessage(`{"blob":"` + strings.Repeat("x", 1_000_000) + `"}`)}}}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	require.Less(t, len(data), subjects.MaxMessageSize)
	subject, err := agent.Namespace().Suspended("refunds", run)
	require.NoError(t, err)
	_, err = agent.Publish(d.ctx, subject, data, run+":0", nil)
	require.NoError(t, err)

	auditor := processor.NewClient(d.client("auditor"))
	rec, err := auditor.Wait(d.ctx, run, func(r *subjects.Run) bool { return r.Status != subjects.RunResuming })
	require.NoError(t, err)
	require.Equal(t, subjects.RunFailed, rec.Status, "a question whose answer could not be recorded is not asked")
	assert.Contains(t, rec.Error, "max payload")
	// The record is written before its events: wait for the refusal's.
	var refused []subjects.Event
	require.Eventually(t, func() bool {
		refused = refused[:0]
		for _, ev := range d.events(run) {
			if ev.Type == subjects.EventInputRejected && ev.Code == subjects.CodeRecordTooLarge {
				refused = append(refused, ev)
			}
		}
		return len(refused) > 0
	}, 20*time.Second, 20*time.Millisecond, "the refusal is audited")
	require.Len(t, refused, 1, "audited once")

	ctx, cancel := context.WithTimeout(d.ctx, 20*time.Second)
	defer cancel()
	v, err := processor.NewClient(d.client("ada")).Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: "ask",
		Approver: "ada", Status: subjects.StatusResolved, Comment: strings.Repeat("c", 60_000)})
	require.ErrorIs(t, err, processor.ErrRejected, "a verdict, not a decision retried for ever: %v", err)
	assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
}
