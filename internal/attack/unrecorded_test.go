package attack_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// The coordinator files some entries under a run's id before the run has
// a record: an input it refused (here, an answer the server sent to the
// run's suspension subject), a ruling on an ask. A planted answer under
// the run's key then blocked the run again when any coordinator entry
// counted as the trail of a recorded run; only entries that follow a
// record write count (store.JetStream.Recorded). Found by the review of
// the eighth session's fix.
func TestAttackPlantAfterRefusedInputBlocksRun(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, plantAfterRefusedInput)
}

func plantAfterRefusedInput(t *testing.T, d *deployment, _ jetstream.Storage) {
	billing := d.attacker("agent_billing")
	// 1. A direct get's answer sent to refunds' suspension subject of run-2:
	// refused (CheckPublished), and audited under run-2.
	billing.answer(t, "interlock.agui.billing.junk", "junk", []byte(`{}`), "interlock.suspended.refunds.run-2", false)
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		evs, err := auditor.Events(d.ctx, "run-2")
		return err == nil && len(evs) > 0
	}, 20*time.Second, 20*time.Millisecond, "the refused input is audited on run-2's trail")

	// 2. The planted answer under run-2's key.
	forged := subjects.Run{RunID: "run-2", Agent: "refunds", Status: subjects.RunCompleted}
	data, err := json.Marshal(forged)
	require.NoError(t, err)
	billing.answer(t, "interlock.agui.billing.planted", "planted", data, "$KV.interlock_runs.run-2", false)
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-2")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)

	// 3. The real first suspension.
	agent := d.client("agent")
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-2", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	subject, err := agent.Namespace().Suspended("refunds", "run-2")
	require.NoError(t, err)
	_, err = agent.Publish(d.ctx, subject, body, "run-2:0", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	_, err = auditor.Wait(ctx, "run-2", processor.Suspended)
	if err != nil {
		for _, ev := range d.events("run-2") {
			t.Logf("run-2 event: %s %s %s", ev.Type, ev.Code, ev.Detail)
		}
	}
	require.NoError(t, err, "the planted answer kept the run from starting")
}

// With an events retention a run's trail ages out while its record stays
// (the runs bucket keeps records forever): the trail cannot then tell a
// run never recorded from one whose record an answer replaced, and
// another agent could claim the run id with a first suspension of its own
// written over the key. With a retention on the events stream such a key
// is refused as before (store.JetStream.Recorded answers true).
func TestAttackRecordedRunWithAgedOutTrailKept(t *testing.T) {
	t.Parallel()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{MaxAge: 2 * time.Second,
		EventsMaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	d.suspend(d.client("agent"), "run-3", "ada")
	require.Equal(t, "refunds", d.record("run-3").Agent)
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		evs, err := auditor.Events(d.ctx, "run-3")
		return err == nil && len(evs) == 0
	}, 20*time.Second, 100*time.Millisecond, "run-3's trail ages out; its record stays")
	require.Equal(t, "refunds", d.record("run-3").Agent, "the record outlives its trail")

	billing := d.attacker("agent_billing")
	billing.answer(t, "interlock.agui.billing.planted", "planted", []byte(`{}`), "$KV.interlock_runs.run-3", false)
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-3")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)

	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-3", Agent: "billing"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	_, err = billing.js.PublishMsg(&nats.Msg{Subject: "interlock.suspended.billing.run-3", Data: body,
		Header: nats.Header{nats.MsgIdHdr: {"run-3:0:billing"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-3") {
			if ev.Type == subjects.EventInputRejected && strings.Contains(ev.Detail, "not a write of the coordinator's") {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "billing's suspension of run-3 is refused")
	_, err = auditor.Run(d.ctx, "run-3")
	require.ErrorIs(t, err, store.ErrForeignRecord, "refunds' recorded run-3 was replaced by a record of billing's")
}

// A run id chosen by its starter (WithRunID, `interlock start --run-id`)
// is the one others learn before the run starts; Client.Start read the key
// first and refused the planted answer, so the run still never started.
func TestAttackPlantedKeyBeforeStartWithRunID(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billing := d.attacker("agent_billing")
	billing.answer(t, "interlock.agui.billing.planted", "planted", []byte(`{}`), "$KV.interlock_runs.order-42", false)
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "order-42")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)
	_, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("order-42"))
	require.NoError(t, err, "a run whose id was learned early does not start")
	// A recorded run's key holding an answer is refused as before.
	d.suspend(d.client("agent"), "run-1", "ada")
	billing.answer(t, "interlock.agui.billing.planted1", "planted1", []byte(`{}`), "$KV.interlock_runs.run-1", false)
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-1")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)
	_, err = processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, store.ErrForeignRecord, "a recorded run was started again")
}

// The same as plantAfterRefusedInput with the auditor's credentials only:
// a direct get of an entry it may read, answered to run-2's suspension
// subject, then one answered to run-2's key.
func TestAttackAuditorBlocksRunBeforeItStarts(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	aud := d.attacker("auditor")
	require.NoError(t, aud.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
		"interlock.suspended.refunds.run-2", nil))
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		evs, err := auditor.Events(d.ctx, "run-2")
		return err == nil && len(evs) > 0
	}, 20*time.Second, 20*time.Millisecond, "the refused input is audited on run-2's trail")
	require.NoError(t, aud.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
		"$KV.interlock_runs.run-2", nil))
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-2")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)
	agent := d.client("agent")
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-2", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	_, err = agent.Publish(d.ctx, "interlock.suspended.refunds.run-2", body, "run-2:0", nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	_, err = auditor.Wait(ctx, "run-2", processor.Suspended)
	if err != nil {
		for _, ev := range d.events("run-2") {
			t.Logf("run-2 event: %s %s %s", ev.Type, ev.Code, ev.Detail)
		}
	}
	require.NoError(t, err, "the auditor kept run-2 from starting")
}

// The events stream's limits as they are now do not say whether it ever
// dropped an entry (found by the second review of the eighth session's
// fix; store.JetStream.MayHaveRecord now also asks whether the stream's
// first sequence is still its first). A deployment that kept its
// trail for a while and later keeps it forever (`interlock provision`
// without --events-max-age raises MaxAge to forever: raiseStream/longer)
// has recorded runs whose trail aged out: Recorded answers false for them,
// so a planted answer over such a run's key reads as "no record" and
// another agent claims the run id (or Client.Start starts it again).
func TestAttackLiftedEventsRetentionKeepsRunRefused(t *testing.T) {
	t.Parallel()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{MaxAge: 2 * time.Second,
		EventsMaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	d.suspend(d.client("agent"), "run-3", "ada")
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		evs, err := auditor.Events(d.ctx, "run-3")
		return err == nil && len(evs) == 0
	}, 20*time.Second, 100*time.Millisecond, "run-3's trail ages out; its record stays")
	require.Equal(t, "refunds", d.record("run-3").Agent)

	// The operator now keeps the audit trail forever: provision again
	// without an events retention (runs still kept 2s).
	admin, err := jetstream.Dial(d.ctx, jetstream.DialConfig{URL: d.url("admin"), Name: "admin",
		InboxPrefix: subjects.InboxPrefix("admin")}, jetstream.Config{MaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	require.NoError(t, admin.Provision(d.ctx))
	ev, err := d.attacker("admin").js.StreamInfo("INTERLOCK_EVENTS")
	require.NoError(t, err)
	require.Zero(t, ev.Config.MaxAge, "the events stream now keeps its entries forever")
	t.Logf("events stream first seq %d", ev.State.FirstSeq)

	billing := d.attacker("agent_billing")
	billing.answer(t, "interlock.agui.billing.planted", "planted", []byte(`{}`), "$KV.interlock_runs.run-3", false)
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-3")
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond)

	// The gateway may start the recorded run-3 again (its first pass runs
	// again, with other input).
	_, startErr := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-3"))

	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-3", Agent: "billing"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	_, err = billing.js.PublishMsg(&nats.Msg{Subject: "interlock.suspended.billing.run-3", Data: body,
		Header: nats.Header{nats.MsgIdHdr: {"run-3:0:billing"}}})
	require.NoError(t, err)
	var claimed *subjects.Run
	require.Eventually(t, func() bool {
		if rec, err := auditor.Run(d.ctx, "run-3"); err == nil {
			claimed = rec
			return true
		}
		for _, ev := range d.events("run-3") {
			if ev.Type == subjects.EventInputRejected && strings.Contains(ev.Detail, "not a write of the coordinator's") {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
	if claimed != nil {
		t.Errorf("refunds' recorded run-3 was replaced by a record of %s's (status %s)", claimed.Agent, claimed.Status)
	}
	require.ErrorIs(t, startErr, store.ErrForeignRecord, "Client.Start started the recorded run-3 again")
}

// A coordinator that wrote a run's first record and died (or
// whose event publish failed) before the outcome's event leaves a record
// whose trail holds no "recorded" type until the suspension is delivered
// again. A decision applied meanwhile writes decision_accepted and
// resumed, neither of which Recorded counts; an answer then planted over
// the key reads as "no record", and the redelivered first suspension
// writes a new first record over the decided one. A person's decision now
// counts as an entry that follows a record (found by the second review).
func TestAttackCrashAfterFirstRecordThenPlantKeepsDecision(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", DataDir: t.TempDir(),
		Port: -1, Sync: embedded.SyncInterval})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	d := &deployment{t: t, ctx: ctx, srv: srv}
	admin := d.provisioner()
	coCfg := coordinator.Config{Logger: quiet, AckWait: 4 * time.Second}
	require.NoError(t, coordinator.Provision(ctx, admin, coCfg))
	hook, fired := fault.Once("outcome-after-record")
	coA := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coA.Start(fault.With(ctx, hook)))
	t.Cleanup(func() { _ = coA.Stop(context.Background()) })

	agent := d.client("agent")
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-2", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	_, err = agent.Publish(ctx, "interlock.suspended.refunds.run-2", body, "run-2:0", nil)
	require.NoError(t, err)
	<-fired // run-2's first record is written; its events are not
	coB := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coB.Start(ctx))
	t.Cleanup(func() { _ = coB.Stop(context.Background()) })

	v, err := processor.NewClient(d.client("ada")).Decide(ctx, processor.DecisionRequest{RunID: "run-2",
		InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	require.Equal(t, subjects.RunResuming, d.record("run-2").Status)

	billing := d.attacker("agent_billing")
	billing.answer(t, "interlock.agui.billing.planted", "planted", []byte(`{}`), "$KV.interlock_runs.run-2", false)

	auditor := processor.NewClient(d.client("auditor"))
	// The suspension is delivered again (ack wait), to coordinator B.
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-2") {
			if ev.Type == subjects.EventSuspended || ev.Type == subjects.EventInputRejected {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	for _, ev := range d.events("run-2") {
		t.Logf("run-2 event: %s %s %s", ev.Type, ev.Code, ev.Detail)
	}
	rec, err := auditor.Run(ctx, "run-2")
	if err == nil {
		t.Logf("run-2 record: status %s pass %d writes %d", rec.Status, rec.Pass, rec.Writes)
		require.NotEqual(t, subjects.RunSuspended, rec.Status, "ada's decision was overwritten by a new first record")
	}
}

// With records in memory a
// server restart empties the runs bucket until a coordinator puts the
// records back; Client.Start (which has no record key, so puts nothing
// back) reads ErrRunNotFound and starts a recorded run's first pass again.
// its trail says it was recorded (Recorded), which Start now asks.
func TestAttackStartRestartsRecordLostFromMemory(t *testing.T) {
	t.Parallel()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	d.suspend(d.client("agent"), "run-1", "ada")
	admin := d.attacker("admin")
	require.NoError(t, admin.js.PurgeStream("KV_interlock_runs", &nats.StreamPurgeRequest{Subject: "$KV.interlock_runs.run-1"}))
	recorded, err := store.NewJetStream(d.client("gateway")).Recorded(d.ctx, "run-1")
	require.NoError(t, err)
	require.True(t, recorded)
	_, err = processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, processor.ErrRunExists, "a recorded run whose record the bucket lost was started again")
}
