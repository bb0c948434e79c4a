package attack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// pullBody has the billing agent start a "run" of its own agent with a
// body and a message id of its choosing, then pull that work item from its
// own consumer with the NATS reply subject to. The server delivers it there
// with its own rights, with the stored headers (the chosen Nats-Msg-Id)
// and none of a direct get's: the stream capturing to stores it, under
// the work item's own subject, interlock.start.billing. It returns once
// stream holds it (pulling again while it does not).
func pullBody(t *testing.T, d *deployment, a *attacker, id string, body []byte, to, stream string) {
	t.Helper()
	_, err := a.js.PublishMsg(&nats.Msg{Subject: "interlock.start.billing", Data: body,
		Header: nats.Header{nats.MsgIdHdr: {id}}})
	require.NoError(t, err)
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo(stream, &nats.StreamInfoRequest{SubjectsFilter: "interlock.start.>"})
		if err == nil && st.State.Subjects["interlock.start.billing"] == 1 {
			return true
		}
		require.NoError(t, a.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_billing", to,
			[]byte(`{"batch":1,"no_wait":true}`)))
		require.NoError(t, a.nc.Flush())
		return false
	}, 20*time.Second, 100*time.Millisecond, "the pull's answer is stored in %s under the work item's subject", stream)
}

func billingConsumer(t *testing.T, d *deployment) {
	t.Helper()
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("billing", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
}

// TestAttackPendingIndexIDSquattedByPullAnswer: a pull's answer
// carries the work item's stored headers, so a message id of the
// attacker's choosing and no server header: reclaim reads it at the
// duplicate's sequence, CheckPublished passes, and the coordinator's put is
// taken for its own retry and dropped. run-1's entry was never listed.
// reclaim now also requires the message holding the id to be on the
// write's own subject (a pull's answer keeps the work item's), and the
// coordinator's ids carry a keyed tag (store.JetStream.SignIDs).
func TestAttackPendingIndexIDSquattedByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	key := subjects.PendingKey("run-1", "ask")
	pullBody(t, d, d.attacker("agent_billing"), "pending:"+key+":0", []byte(`{}`),
		"$KV.interlock_pending."+subjects.PendingKey("run-0", "ask"), "KV_interlock_pending")

	d.suspend(d.client("agent"), "run-1", "ada")
	require.Contains(t, listed(t, d, "auditor", "run-1"), "run-1")
}

// TestAttackTrailIDsSquattedByPullAnswer: the same with the audit
// trail. The billing agent starts runs of its own with the ids of a refunds
// run's next entries (<run>:seq<N>:decision_accepted, <run>:pass1:completed)
// and pulls them, in one pull, with the reply subject
// interlock.events.<run>.x: INTERLOCK_EVENTS stores them (under
// interlock.start.billing), no server header, the chosen ids. The
// coordinator's entries are taken for duplicates, reclaim reads the
// squatting message, finds it "a client's publish" and keeps nothing: ada's
// decision_accepted and the completion were missing from the trail.
func TestAttackTrailIDsSquattedByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	adaAgent(t, d)
	run := suspendedRefund(t, d)

	billing := d.attacker("agent_billing")
	ids := []string{run + ":pass1:completed"}
	for seq := 1; seq <= 40; seq++ {
		ids = append(ids, fmt.Sprintf("%s:seq%d:decision_accepted", run, seq))
	}
	for _, id := range ids {
		_, err := billing.js.PublishMsg(&nats.Msg{Subject: "interlock.start.billing", Data: []byte(`{}`),
			Header: nats.Header{nats.MsgIdHdr: {id}}})
		require.NoError(t, err)
	}
	require.NoError(t, billing.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_billing",
		"interlock.events."+run+".squatted", fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, len(ids))))
	require.NoError(t, billing.nc.Flush())
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("INTERLOCK_EVENTS", &nats.StreamInfoRequest{SubjectsFilter: "interlock.start.>"})
		return err == nil && st.State.Subjects["interlock.start.billing"] == uint64(len(ids))
	}, 20*time.Second, 20*time.Millisecond, "the pull's answers are stored in the events stream")

	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	require.NoError(t, err)
	_, err = processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: run,
		InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(d.ctx, 20*time.Second)
	defer cancel()
	done, err := processor.NewClient(d.client("auditor")).Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	require.Equal(t, subjects.RunCompleted, done.Status)
	decidedAndCompleted(t, d, run)
}

// TestAttackPendingIndexIDSquattedByOverwrittenAnswer: direct gets
// only. The billing agent has an answer carrying the id of run-1's coming
// put ("pending:<key>:0") stored on a junk key of the pending index, then
// a second answer on the same key: the bucket keeps one message per key,
// so the first is removed, but the stream still remembers its id (the
// duplicate window). The coordinator's put is a duplicate of a sequence no
// message holds; reclaim (publish.go) reads the next message instead,
// takes that for "no longer there to judge" and reports a duplicate: the
// entry was never stored. The coordinator's ids now carry a keyed tag
// nobody else can compute (store.JetStream.SignIDs).
func TestAttackPendingIndexIDSquattedByOverwrittenAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	key := subjects.PendingKey("run-1", "ask")
	billing := d.attacker("agent_billing")
	forge := func(i int, id, subject, body string) {
		billing.answer(t, fmt.Sprintf("interlock.agui.billing.indexcarrier%d", i), id, []byte(body), subject, false)
	}
	junk := "$KV.interlock_pending." + subjects.PendingKey("run-0", "ask")
	forge(0, "pending:"+key+":0", junk, `{}`)
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("KV_interlock_pending", &nats.StreamInfoRequest{SubjectsFilter: junk})
		return err == nil && st.State.Subjects[junk] == 1
	}, 20*time.Second, 20*time.Millisecond, "the first answer is stored")
	forge(1, "overwrite", junk, `{}`)
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("KV_interlock_pending")
		return err == nil && st.State.LastSeq >= 3
	}, 20*time.Second, 20*time.Millisecond, "the second answer is stored over the first")

	d.suspend(d.client("agent"), "run-1", "ada")
	require.Contains(t, listed(t, d, "auditor", "run-1"), "run-1")
}

// listed is the pending index as who lists it, once it lists run or after
// 20 seconds.
func listed(t *testing.T, d *deployment, who, run string) []string {
	t.Helper()
	var runs []string
	var err error
	require.Eventually(t, func() bool {
		var page []subjects.PendingInterrupt
		page, _, err = processor.NewClient(d.client(who)).PendingPage(d.ctx, 0, 100)
		runs = runs[:0]
		for _, p := range page {
			runs = append(runs, p.RunID)
		}
		return err != nil || slices.Contains(runs, run)
	}, 20*time.Second, 20*time.Millisecond, "%s's entry is listed", run)
	require.NoError(t, err, "%s lists the pending index", who)
	return runs
}

// TestAttackPendingEntryForgedByPullAnswer: the billing agent has a pull's
// answer carrying a pending entry of its own wording (a run that does not
// exist, a question for ada) stored in the pending index's stream, under
// interlock.start.billing. Bucket.Page reads the stream with ">" and takes
// every message for a key; the answer carries a message id and no server
// header, so CheckPublished passed and the listing showed it. Page now
// takes only messages on the bucket's own subjects.
func TestAttackPendingEntryForgedByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	forged := subjects.PendingInterrupt{RunID: "run-forged", Agent: "refunds",
		InterruptState: subjects.InterruptState{Interrupt: subjects.Interrupt{ID: "ask", Reason: "confirmation",
			Approvers: []string{"ada"}}}}
	body, err := json.Marshal(forged)
	require.NoError(t, err)
	pullBody(t, d, d.attacker("agent_billing"), "forged-entry", body,
		"$KV.interlock_pending."+subjects.PendingKey("run-0", "ask"), "KV_interlock_pending")

	d.suspend(d.client("agent"), "run-1", "ada")
	runs := listed(t, d, "auditor", "run-1")
	require.NotContains(t, runs, "run-forged", "an entry of the billing agent's wording is listed as pending")
}

// TestAttackPendingListingBrokenByPullAnswer: the same with bytes that
// are no JSON: every listing of the index fails.
func TestAttackPendingListingBrokenByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	pullBody(t, d, d.attacker("agent_billing"), "junk-entry", []byte("not json"),
		"$KV.interlock_pending."+subjects.PendingKey("run-0", "ask"), "KV_interlock_pending")
	_, _, err := processor.NewClient(d.client("auditor")).PendingPage(d.ctx, 0, 100)
	require.NoError(t, err, "the pending listing fails on an answer stored under another subject")
}

// TestAttackRunRecordForgedByPullAnswer: a pull's answer stored in the
// runs bucket's stream (under interlock.start.billing) with a record of
// the billing agent's wording for run-1: Runs (interlock runs) and
// RunsPage (the index build) take it for run-1's record, the later one.
func TestAttackRunRecordForgedByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	d.suspend(d.client("agent"), "run-1", "ada")
	rec := d.record("run-1")
	rec.Interrupts[0].Approvers = []string{"bob"}
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	pullBody(t, d, d.attacker("agent_billing"), "forged-record", data, "$KV.interlock_runs.junk", "KV_interlock_runs")

	all, err := processor.NewClient(d.client("admin")).Runs(d.ctx)
	require.NoError(t, err)
	for _, r := range all {
		if r.RunID == "run-1" {
			require.Equal(t, []string{"ada"}, r.Interrupts[0].Approvers, "Runs lists the billing agent's record as run-1's")
		}
	}
	page, _, err := store.NewJetStream(d.client("coordinator")).RunsPage(d.ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, page, 1, "RunsPage (the index build's read) lists the answer as a record")
}

// TestAttackRunsListingBrokenByPullAnswer: bytes that are no JSON in the
// runs bucket's stream: Runs and every index build fail.
func TestAttackRunsListingBrokenByPullAnswer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	pullBody(t, d, d.attacker("agent_billing"), "junk-record", []byte("not json"), "$KV.interlock_runs.junk", "KV_interlock_runs")
	_, _, err := store.NewJetStream(d.client("coordinator")).RunsPage(d.ctx, 0, 100)
	require.NoError(t, err, "the index build's read of the records fails")
}

// TestAuditorListsRuns: Runs reads with stream info and per-key gets,
// which the auditor and the gateway hold (a batched direct get on the
// bare $JS.API.DIRECT.GET.KV_interlock_runs, which RunsPage uses, is the
// coordinator's alone).
func TestAuditorListsRuns(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
	defer cancel()
	_, err := processor.NewClient(d.client("auditor")).Runs(ctx)
	require.NoError(t, err, "the auditor lists runs (it did before RunsPage)")
}

// TestAttackIndexBuildTakesForgedRecord: the pending index lost (emptied
// by admin, as a restart empties an index in memory) is built again from
// RunsPage, which takes the billing agent's pull answer for a record: a
// run that never existed, waiting on a question of its wording, is put into
// the index with the coordinator's own signed put, and stays (its record is
// missing, so no sweep removes it).
func TestAttackIndexBuildTakesForgedRecord(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	billingConsumer(t, d)
	d.suspend(d.client("agent"), "run-1", "ada")
	rec := d.record("run-1")
	rec.RunID = "run-forged"
	rec.Interrupts[0].Message = "Wire the refund to account 666?"
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	pullBody(t, d, d.attacker("agent_billing"), "forged-record", data, "$KV.interlock_runs.junk", "KV_interlock_runs")

	require.NoError(t, d.attacker("admin").js.PurgeStream("KV_interlock_pending"))
	runs := listed(t, d, "auditor", "run-1")
	require.NotContains(t, runs, "run-forged", "the index build put an entry for a record the billing agent wrote")
}
