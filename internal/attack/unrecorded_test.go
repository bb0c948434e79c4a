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

	"github.com/interlockhq/interlock/jetstream"
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
