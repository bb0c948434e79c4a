package attack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Attacks on runs whose key in the runs bucket holds an answer the server
// stored there (docs/security.md, "Answers the server sends for you"):
// before the run's first record, and after it.

// plantRecord has the billing agent's direct get answer of body stored
// under run's key, and waits until readers refuse it as the run's record.
func plantRecord(t *testing.T, d *deployment, run string, body []byte) {
	t.Helper()
	carrier := "interlock.agui.billing.planted-" + run
	d.attacker("agent_billing").answer(t, carrier, carrier, body, "$KV.interlock_runs."+run, false)
	foreignRecord(t, d, run)
}

// foreignRecord waits until run's key holds what readers refuse as its
// record.
func foreignRecord(t *testing.T, d *deployment, run string) {
	t.Helper()
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, run)
		return errors.Is(err, store.ErrForeignRecord)
	}, 20*time.Second, 20*time.Millisecond, "run %s's key holds an answer", run)
}

// startsDespite publishes run's first suspension and waits until it is
// recorded, naming why it might not be.
func startsDespite(t *testing.T, d *deployment, run, why string) *subjects.Run {
	t.Helper()
	d.publishSuspension(d.client("agent"), run, "ada")
	ctx, cancel := context.WithTimeout(d.ctx, 20*time.Second)
	defer cancel()
	rec, err := processor.NewClient(d.client("auditor")).Wait(ctx, run, processor.Suspended)
	if err != nil {
		for _, ev := range d.events(run) {
			t.Logf("%s event: %s %s %s", run, ev.Type, ev.Code, ev.Detail)
		}
	}
	require.NoError(t, err, why)
	require.Equal(t, []string{"ada"}, rec.Interrupts[0].Approvers)
	return rec
}

// billingClaims publishes the billing agent's first suspension of run, a
// run id of refunds', and checks it is refused and nothing written over
// the answer run's key holds: the key keeps the answer (no copy of the
// record in the trail to put back) or refunds' record, put back from its
// copy, and billing's suspension is refused as another agent's.
func billingClaims(t *testing.T, d *deployment, run string) {
	t.Helper()
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "billing"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	body, err := json.Marshal(s)
	require.NoError(t, err)
	_, err = d.attacker("agent_billing").js.PublishMsg(&nats.Msg{Subject: "interlock.suspended.billing." + run, Data: body,
		Header: nats.Header{nats.MsgIdHdr: {run + ":0:billing"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, ev := range d.events(run) {
			if ev.Type == subjects.EventInputRejected && (ev.Code == subjects.CodeWrongAgent ||
				strings.Contains(ev.Detail, "not a write of the coordinator's")) {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "billing's suspension of %s refused", run)
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	if err != nil {
		require.ErrorIs(t, err, store.ErrForeignRecord)
		return
	}
	require.Equal(t, "refunds", rec.Agent, "refunds' recorded %s was replaced by a record of billing's", run)
}

// decidedOnDisk is a deployment that kept its records in memory and moved
// them to disk (operators.md: delete KV_interlock_runs, provision again),
// with refunds' run-1 suspended in the memory era (its copy in the trail)
// and ada's cancel accepted on disk since (its copy on disk, since the tenth
// session; none before): the coordinator that
// decided it is returned, running.
func decidedOnDisk(t *testing.T) (*deployment, *coordinator.Coordinator, coordinator.Config) {
	t.Helper()
	d := bareDeployment(t, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	coCfg := coordinator.Config{Logger: quiet, AckWait: 2 * time.Second}
	require.NoError(t, coordinator.Provision(d.ctx, d.provisioner(), coCfg))
	coA := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coA.Start(d.ctx))
	d.suspend(d.client("agent"), "run-1", "ada")
	require.NoError(t, coA.Stop(context.Background()))

	require.NoError(t, d.attacker("admin").js.DeleteStream("KV_interlock_runs"))
	d.nats = jetstream.Config{}
	require.NoError(t, coordinator.Provision(d.ctx, d.provisioner(), coCfg))
	coB := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coB.Start(d.ctx))
	t.Cleanup(func() { _ = coB.Stop(context.Background()) })
	require.Equal(t, subjects.RunSuspended, d.record("run-1").Status, "put back on disk")
	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
		Status: subjects.StatusCancelled, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	require.Equal(t, subjects.RunResuming, d.record("run-1").Status)
	return d, coB, coCfg
}

// crashedAfterFirstRecord is a deployment whose coordinator wrote refunds'
// first record of run and died before its events (fault point
// outcome-after-record), and a second coordinator that runs on; the
// suspension is delivered again one ack wait (10 s) after the crash.
func crashedAfterFirstRecord(t *testing.T, run string) *deployment {
	t.Helper()
	d := bareDeployment(t, jetstream.Config{})
	coCfg := coordinator.Config{Logger: quiet, AckWait: 10 * time.Second}
	require.NoError(t, coordinator.Provision(d.ctx, d.provisioner(), coCfg))
	hook, fired := fault.Once("outcome-after-record")
	coA := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coA.Start(fault.With(d.ctx, hook)))
	t.Cleanup(func() { _ = coA.Stop(context.Background()) })
	d.publishSuspension(d.client("agent"), run, "ada")
	<-fired
	coB := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coB.Start(d.ctx))
	t.Cleanup(func() { _ = coB.Stop(context.Background()) })
	require.Equal(t, "refunds", d.record(run).Agent)
	return d
}

// An answer stored under the key of a run that has no record yet, planted
// by someone who learned the run's id before it suspended, must not keep
// the run from starting: it is no record, and the run was never recorded.
func TestAttackAgentPlantsRecordBeforeRunStarts(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, func(t *testing.T, d *deployment, _ jetstream.Storage) {
		forged, err := json.Marshal(subjects.Run{RunID: "run-2", Agent: "refunds", Status: subjects.RunCompleted})
		require.NoError(t, err)
		plantRecord(t, d, "run-2", forged)
		startsDespite(t, d, "run-2", "the planted answer kept the run from starting")
		v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-2",
			InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	})
}

// The coordinator files some entries under a run's id before the run has
// a record: an input it refused (here, an answer the server sent to the
// run's suspension subject), a ruling on an ask. A planted answer under
// the run's key then blocked the run again when any coordinator entry
// counted as the trail of a recorded run; only entries that follow a
// record write count (store.JetStream.Recorded). Found by the review of
// the eighth session's fix, with an agent's credentials and with the
// auditor's alone.
func TestAttackPlantAfterRefusedInputBlocksRun(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, func(t *testing.T, d *deployment, _ jetstream.Storage) {
		d.attacker("agent_billing").answer(t, "interlock.agui.billing.junk", "junk", []byte(`{}`),
			"interlock.suspended.refunds.run-2", false)
		refusedInputAudited(t, d, "run-2")
		plantRecord(t, d, "run-2", []byte(`{}`))
		startsDespite(t, d, "run-2", "the planted answer kept the run from starting")
	})
}

func TestAttackAuditorBlocksRunBeforeItStarts(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	aud := d.attacker("auditor")
	// A direct get of an entry the auditor may read, answered to run-2's
	// suspension subject, then one answered to run-2's key.
	require.NoError(t, aud.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
		"interlock.suspended.refunds.run-2", nil))
	refusedInputAudited(t, d, "run-2")
	require.NoError(t, aud.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
		"$KV.interlock_runs.run-2", nil))
	foreignRecord(t, d, "run-2")
	startsDespite(t, d, "run-2", "the auditor kept run-2 from starting")
}

// refusedInputAudited waits until run's trail holds an entry: the input
// the coordinator refused.
func refusedInputAudited(t *testing.T, d *deployment, run string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(d.events(run)) > 0
	}, 20*time.Second, 20*time.Millisecond, "the refused input is audited on %s's trail", run)
}

// A run id chosen by its starter (WithRunID, `interlock start --run-id`)
// is the one others learn before the run starts; Client.Start read the key
// first and refused the planted answer, so the run still never started.
// A recorded run's key holding an answer is refused as before.
func TestAttackPlantedKeyBeforeStartWithRunID(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	plantRecord(t, d, "order-42", []byte(`{}`))
	// A wait through the planted key says why it found no record.
	ctx, cancel := context.WithTimeout(d.ctx, 300*time.Millisecond)
	defer cancel()
	_, err := processor.NewClient(d.client("auditor")).Wait(ctx, "order-42", processor.Suspended)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, store.ErrForeignRecord)
	gateway := processor.NewClient(d.client("gateway"))
	_, err = gateway.Start(d.ctx, "refunds", nil, processor.WithRunID("order-42"))
	require.NoError(t, err, "a run whose id was learned early does not start")

	d.suspend(d.client("agent"), "run-1", "ada")
	plantRecord(t, d, "run-1", []byte(`{}`))
	_, err = gateway.Start(d.ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, store.ErrForeignRecord, "a recorded run was started again")
}

// agedOut runs refunds' run under a 2-second events retention until its
// trail is gone; its record stays (the runs bucket keeps records forever).
func agedOut(t *testing.T, run string) *deployment {
	t.Helper()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{MaxAge: 2 * time.Second,
		EventsMaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	d.suspend(d.client("agent"), run, "ada")
	require.Eventually(t, func() bool {
		return len(d.events(run)) == 0
	}, 20*time.Second, 100*time.Millisecond, "%s's trail ages out", run)
	require.Equal(t, "refunds", d.record(run).Agent, "the record outlives its trail")
	return d
}

// With an events retention the trail cannot tell a run never recorded from
// one whose record an answer replaced, and another agent could claim the
// run id with a first suspension of its own written over the key: with a
// retention on the events stream such a key is refused as before
// (store.JetStream.MayHaveRecord). Found by the review of the fix.
func TestAttackRecordedRunWithAgedOutTrailKept(t *testing.T) {
	t.Parallel()
	d := agedOut(t, "run-3")
	plantRecord(t, d, "run-3", []byte(`{}`))
	billingClaims(t, d, "run-3")
}

// The events stream's limits as they are now do not say whether it ever
// dropped an entry: a deployment that kept its trail for a while and then
// keeps it forever (`interlock provision` without --events-max-age raises
// the age to forever) has recorded runs whose trail aged out. Such a key
// is refused, and Client.Start does not start the run again:
// MayHaveRecord also asks whether the stream's first sequence is still its
// first. Found by the second review of the fix.
func TestAttackLiftedEventsRetentionKeepsRunRefused(t *testing.T) {
	t.Parallel()
	d := agedOut(t, "run-3")
	admin, err := jetstream.Dial(d.ctx, jetstream.DialConfig{URL: d.url("admin"), Name: "admin",
		InboxPrefix: subjects.InboxPrefix("admin")}, jetstream.Config{MaxAge: 2 * time.Second, DuplicateWindow: time.Second})
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	require.NoError(t, admin.Provision(d.ctx))
	ev, err := d.attacker("admin").js.StreamInfo("INTERLOCK_EVENTS")
	require.NoError(t, err)
	require.Zero(t, ev.Config.MaxAge, "the events stream now keeps its entries forever")

	plantRecord(t, d, "run-3", []byte(`{}`))
	_, err = processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-3"))
	require.ErrorIs(t, err, store.ErrForeignRecord, "Client.Start started the recorded run-3 again")
	billingClaims(t, d, "run-3")
}

// A coordinator that wrote a run's first record and died before the
// outcome's events leaves a trail with no suspended entry until the
// suspension is delivered again. A decision applied meanwhile was not
// counted as following a record, so an answer then planted over the key
// read as "no record", and the redelivered first suspension wrote a new
// first record over the decided one. A person's decision now counts (found
// by the second review of the fix), and since the tenth session the record
// is put back from the copy the decision's entry carries.
func TestAttackCrashAfterFirstRecordThenPlantKeepsDecision(t *testing.T) {
	t.Parallel()
	d := crashedAfterFirstRecord(t, "run-2")
	ctx := d.ctx
	v, err := processor.NewClient(d.client("ada")).Decide(ctx, processor.DecisionRequest{RunID: "run-2",
		InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	require.Equal(t, subjects.RunResuming, d.record("run-2").Status)

	plantRecord(t, d, "run-2", []byte(`{}`))
	// The suspension, delivered again to coordinator B, meets the answer:
	// the record is put back from the decision's copy, and the suspension
	// is applied to it as the repeat it is (its entry, which coordinator A
	// never wrote, is audited now).
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-2") {
			if ev.Type == subjects.EventSuspended {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the suspension delivered again")
	rec := d.record("run-2")
	require.Equal(t, subjects.RunResuming, rec.Status, "a new first record was written over ada's decision")
	require.NotNil(t, rec.Interrupts[0].Decision, "ada's decision is kept")
}

// With records in memory a server restart empties the runs bucket until a
// coordinator puts the records back; Client.Start (which has no record
// key, so puts nothing back) read ErrRunNotFound and started a recorded
// run's first pass again. Its trail says it was recorded (Recorded), which
// Start now asks when records live in memory.
func TestAttackStartRestartsRecordLostFromMemory(t *testing.T) {
	t.Parallel()
	d := newDeploymentOf(t, coordinator.Config{}, jetstream.Config{RecordsStorage: jetstream.MemoryStorage})
	d.suspend(d.client("agent"), "run-1", "ada")
	require.NoError(t, d.attacker("admin").js.PurgeStream("KV_interlock_runs",
		&nats.StreamPurgeRequest{Subject: "$KV.interlock_runs.run-1"}))
	recorded, err := store.NewJetStream(d.client("gateway")).Recorded(d.ctx, "run-1")
	require.NoError(t, err)
	require.True(t, recorded)
	_, err = processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, processor.ErrRunExists, "a recorded run whose record the bucket lost was started again")
}

// A deployment that kept records in memory and moved them to disk
// (operators.md: delete KV_interlock_runs, provision again) still puts
// records back from the trail (SealedBefore). An answer planted over the
// key of a run that had a sealed copy in the memory era, and was decided
// since (on disk, no copy), was replaced by that old copy: the decided
// interrupt was open again and a second decision accepted (found by the
// third review of the eighth session's fix). Every write carries a copy
// now, on disk too, and a copy is put back over an answer only when no
// later write is in the trail (store TestDiskCopyPutBackOnlyWhenLatest):
// the record put back is the one after the cancel.
func TestAttackMemoryToDiskPlantKeepsDecidedRun(t *testing.T) {
	t.Parallel()
	for name, plant := range map[string]func(t *testing.T, d *deployment, run string){
		"an answer":                     func(t *testing.T, d *deployment, run string) { plantRecord(t, d, run, []byte(`{}`)) },
		"an answer saying KV-Operation": plantDeleted, // fourth review: Run took it for a record lost
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			memoryToDiskPlant(t, plant)
		})
	}
}

func memoryToDiskPlant(t *testing.T, plant func(t *testing.T, d *deployment, run string)) {
	d, _, _ := decidedOnDisk(t)
	plant(t, d, "run-1")
	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
		Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	if err == nil {
		require.NotEqual(t, subjects.OutcomeAccepted, v.Outcome,
			"the cancelled interrupt was decided again, resolved: the record was rolled back to its memory-era copy")
	}
	var rej *processor.RejectionError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, subjects.CodeAlreadyDecided, rej.Verdict.Code,
		"the record put back is the one after ada's cancel: its copy rides the cancel's entry on disk too")
	require.Equal(t, subjects.RunResuming, d.record("run-1").Status)
}

// The pending index's marker was read as whatever delete marker its key
// held last (Bucket.Marker checked KV-Operation: DEL only). A direct get's
// answer keeps the carrier's own headers, so any role with one read could
// have a "built" marker stored for a lost index: it was never built again
// and what waits stayed unlisted. A marker must now be a client's publish
// (each carries a message id), and the next is written over an answer.
// Found by the third review of the eighth session's fix.
func TestAttackForgedIndexMarkerThroughAPIReply(t *testing.T) {
	t.Parallel()
	d := bareDeployment(t, jetstream.Config{})
	ctx := d.ctx
	coCfg := coordinator.Config{Logger: quiet, AckWait: 2 * time.Second}
	require.NoError(t, coordinator.Provision(ctx, d.provisioner(), coCfg))
	coA := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coA.Start(ctx))
	d.suspend(d.client("agent"), "run-1", "ada")
	auditor := processor.NewClient(d.client("auditor"))
	listed := func() bool {
		p, err := auditor.Pending(ctx)
		return err == nil && len(p) == 1 && p[0].RunID == "run-1"
	}
	require.Eventually(t, listed, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, coA.Stop(context.Background()))

	// The index lost (a restart of a memory-backed index empties it).
	require.NoError(t, d.attacker("admin").js.PurgeStream("KV_interlock_pending"))
	require.False(t, listed())

	{
		billing := d.attacker("agent_billing")
		carrier := "interlock.agui.billing.marker"
		_, err := billing.js.PublishMsg(&nats.Msg{Subject: carrier,
			Data:   []byte(`{"state":"built","by":"x","at":"2026-01-01T00:00:00Z"}`),
			Header: nats.Header{nats.MsgIdHdr: {"m1"}, "KV-Operation": {"DEL"}}})
		require.NoError(t, err)
		require.NoError(t, billing.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_AGUI."+carrier, "$KV.interlock_pending._.index", nil))
		require.NoError(t, billing.nc.Flush())
		require.Eventually(t, func() bool {
			_, seq, err := store.NewJetStream(d.client("auditor")).IndexMarker(ctx)
			return errors.Is(err, store.ErrNotFound) && seq > 0
		}, 10*time.Second, 20*time.Millisecond, "the answer is stored as the marker, and not read as one")
	}

	coB := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coB.Start(ctx))
	t.Cleanup(func() { _ = coB.Stop(context.Background()) })
	require.Eventually(t, listed, 15*time.Second, 50*time.Millisecond,
		"the lost index was never built again: billing's forged marker says it is built")
}

// A long-lived Client that once found the runs bucket on disk cached that
// (Client.onDisk) for good. After the deployment moves its records to
// memory (operators.md: delete the bucket, provision with
// --records-storage memory), a record the memory bucket lost (a restart,
// here a purge of its key as TestAttackStartRestartsRecordLostFromMemory
// does) read as never written to that client, and Start ran a recorded
// run's first pass again. The client now reads the bucket's storage again
// after onDiskFor (10 s): within that, Go's check is what it was (Python's
// and TypeScript's start() make none). Found by the third review.
func TestAttackLongLivedClientStartsRunLostFromMemory(t *testing.T) {
	t.Parallel()
	d := bareDeployment(t, jetstream.Config{})
	ctx := d.ctx
	coCfg := coordinator.Config{Logger: quiet, AckWait: 2 * time.Second}
	require.NoError(t, coordinator.Provision(ctx, d.provisioner(), coCfg))
	coA := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coA.Start(ctx))
	gateway := processor.NewClient(d.client("gateway"))
	_, err := gateway.Start(ctx, "refunds", nil, processor.WithRunID("early-run"))
	require.NoError(t, err) // the gateway's client has now seen the bucket on disk
	require.NoError(t, coA.Stop(context.Background()))

	require.NoError(t, d.attacker("admin").js.DeleteStream("KV_interlock_runs"))
	d.nats = jetstream.Config{RecordsStorage: jetstream.MemoryStorage}
	require.NoError(t, coordinator.Provision(ctx, d.provisioner(), coCfg))
	coB := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coB.Start(ctx))
	t.Cleanup(func() { _ = coB.Stop(context.Background()) })

	d.suspend(d.client("agent"), "run-1", "ada")
	refusedInputAudited(t, d, "run-1") // its suspended entry is stored
	require.NoError(t, d.attacker("admin").js.PurgeStream("KV_interlock_runs",
		&nats.StreamPurgeRequest{Subject: "$KV.interlock_runs.run-1"}))
	_, err = processor.NewClient(d.client("gateway")).Start(ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, processor.ErrRunExists, "a fresh client refuses")
	require.Eventually(t, func() bool {
		_, err := gateway.Start(ctx, "refunds", nil, processor.WithRunID("run-1"))
		return errors.Is(err, processor.ErrRunExists)
	}, 25*time.Second, 500*time.Millisecond, "the long-lived client kept starting the recorded run-1 again")
}

// The crash window of TestAttackCrashAfterFirstRecordThenPlantKeepsDecision
// without the decision: refunds' run-2 has a record and no trail until its
// suspension is delivered again; an answer planted then, and billing's own
// first suspension of run-2, wrote billing's record over refunds'. The
// runs stream holds both agents' outcomes of run-2: such a key is refused
// (store.JetStream.claimed). Found by the third review of the fix.
func TestAttackCrashAfterFirstRecordThenPlantKeepsAgent(t *testing.T) {
	t.Parallel()
	d := crashedAfterFirstRecord(t, "run-2")
	plantRecord(t, d, "run-2", []byte(`{}`))
	billingClaims(t, d, "run-2")
}

// The route of TestAttackMemoryToDiskPlantKeepsDecidedRun through a whole
// restore: an answer planted at the runs bucket's `_.records` marker as
// well reads as no marker, so the next coordinator puts the records back
// from the trail, and put the old copy over the answer at run-1's key
// too. A restore now leaves an answer in place unless records live in
// memory.
func TestAttackMemoryToDiskPlantedMarkerKeepsDecidedRun(t *testing.T) {
	t.Parallel()
	d, coB, coCfg := decidedOnDisk(t)
	require.NoError(t, coB.Stop(context.Background()))

	plantRecord(t, d, "run-1", []byte(`{}`))
	carrier := "interlock.agui.billing.records-marker"
	d.attacker("agent_billing").answer(t, carrier, carrier, []byte(`{}`), "$KV.interlock_runs._.records", false)
	restores := func() int {
		n := 0
		for _, ev := range d.events(subjects.NoRun) {
			if ev.Type == subjects.EventRecordsRestored {
				n++
			}
		}
		return n
	}
	before := restores()
	coC := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, coC.Start(d.ctx))
	t.Cleanup(func() { _ = coC.Stop(context.Background()) })
	require.Eventually(t, func() bool { return restores() > before }, 20*time.Second, 20*time.Millisecond,
		"the planted marker reads as none: the records are put back again")
	_, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
	require.ErrorIs(t, err, store.ErrForeignRecord, "the memory-era copy was put back over ada's decision")
}

// plantDeleted has the billing agent's direct get answer stored under
// run's key, its carrier stored with the header KV-Operation: DEL, which
// the answer keeps: it was read as a deletion (Bucket.Last) before anything
// asked whether it was a client's publish, so a recorded run read as never
// recorded. It is refused as the run's record now.
func plantDeleted(t *testing.T, d *deployment, run string) {
	t.Helper()
	billing := d.attacker("agent_billing")
	carrier := "interlock.agui.billing.deleted-" + run
	_, err := billing.js.PublishMsg(&nats.Msg{Subject: carrier, Data: []byte(`{}`),
		Header: nats.Header{nats.MsgIdHdr: {carrier}, "KV-Operation": {"DEL"}}})
	require.NoError(t, err)
	require.NoError(t, billing.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_AGUI."+carrier, "$KV.interlock_runs."+run, nil))
	require.NoError(t, billing.nc.Flush())
	foreignRecord(t, d, run)
}

// An answer carrying KV-Operation: DEL under a recorded run's key: another
// agent's first suspension was written over it (the run taken over), and
// Client.Start with the run's id started its first pass again. Found by
// the fourth review of the eighth session's fix.
func TestAttackDeleteMarkerAnswerKeepsRecordedRun(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	plantDeleted(t, d, "run-1")
	_, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("run-1"))
	require.ErrorIs(t, err, store.ErrForeignRecord, "a recorded run was started again")
	billingClaims(t, d, "run-1")
}

// The same with the auditor's credentials alone: the pending index's own
// marker is a delete marker every reader of the index may direct-get. Its
// answer carries the marker's compare-and-set header too, so the server
// stores it only under a key whose last revision is the one that header
// names: the auditor picks such a run (every record's revision is in its
// reads), and so does this test.
func TestAttackAuditorDeletesRecordedRunWithIndexMarker(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	st := store.NewJetStream(d.client("admin"))
	require.Eventually(t, func() bool {
		m, _, err := st.IndexMarker(d.ctx)
		return err == nil && m.State == store.IndexBuilt
	}, 30*time.Second, 20*time.Millisecond)
	admin := d.attacker("admin")
	marker, err := admin.js.GetLastMsg("KV_interlock_pending", "$KV.interlock_pending._.index")
	require.NoError(t, err)
	want, err := strconv.ParseUint(marker.Header.Get(nats.ExpectedLastSubjSeqHdr), 10, 64)
	require.NoError(t, err)
	run := ""
	for i := 1; run == ""; i++ {
		candidate := fmt.Sprintf("run-%d", i)
		if i > 1 {
			d.suspend(d.client("agent"), candidate, "ada")
		}
		m, err := admin.js.GetLastMsg("KV_interlock_runs", "$KV.interlock_runs."+candidate)
		require.NoError(t, err)
		require.LessOrEqual(t, m.Sequence, want, "no run's record is at revision %d, which the marker's answer expects", want)
		if m.Sequence == want {
			run = candidate
		}
	}
	d.storedAnswer(d.attacker("auditor"), "$JS.API.DIRECT.GET.KV_interlock_pending.$KV.interlock_pending._.index", nil,
		"KV_interlock_runs", "$KV.interlock_runs."+run)
	foreignRecord(t, d, run)
}

// storedAnswer has a send the request api with reply subject to, and waits
// until stream holds a newer message on to, sending it again every two
// seconds: a request the server never answered (once, under the whole
// suite's load, the answer was never stored) is sent again rather than
// waited for.
func (d *deployment) storedAnswer(a *attacker, api string, req []byte, stream, to string) {
	d.t.Helper()
	admin := d.attacker("admin")
	var before uint64
	if m, err := admin.js.GetLastMsg(stream, to); err == nil {
		before = m.Sequence
	}
	require.Eventually(d.t, func() bool {
		require.NoError(d.t, a.nc.PublishRequest(api, to, req))
		require.NoError(d.t, a.nc.Flush())
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if m, err := admin.js.GetLastMsg(stream, to); err == nil && m.Sequence > before {
				return true
			}
			time.Sleep(20 * time.Millisecond) // polls the condition with a deadline
		}
		return false
	}, 20*time.Second, time.Millisecond, "the answer to %s is stored on %s", api, to)
}

// SealedBefore took any message on interlock.events._.records_restored
// for the coordinator's own entry: an answer stored there made a
// deployment that never kept records in memory put records back (and
// remember none) from its next start on. Found by the fourth review.
func TestAttackAnswerMakesDiskDeploymentRestore(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	st := store.NewJetStream(d.client("coordinator"))
	before, err := st.SealedBefore(d.ctx)
	require.NoError(t, err)
	require.False(t, before)
	aud := d.attacker("auditor")
	// Without headers: with them, its message id would repeat the entry's.
	require.NoError(t, aud.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
		"interlock.events._.records_restored", []byte(`{"no_hdr":true}`)))
	require.NoError(t, aud.nc.Flush())
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		info, err := admin.js.StreamInfo("INTERLOCK_EVENTS", &nats.StreamInfoRequest{SubjectsFilter: "interlock.events._.records_restored"})
		return err == nil && info.State.Subjects["interlock.events._.records_restored"] == 1
	}, 10*time.Second, 20*time.Millisecond, "the answer is stored")
	after, err := st.SealedBefore(d.ctx)
	require.NoError(t, err)
	require.False(t, after, "an answer the auditor had stored reads as the coordinator's records_restored entry")
}
