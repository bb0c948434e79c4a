package attack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// pullAnswer has the billing agent start a "run" of its own agent with a
// message id of its choosing, then pull that work item from its own
// consumer with the NATS reply subject `to`. The server delivers the work
// item there with its own rights, with the stored headers (the chosen
// Nats-Msg-Id) and none of a direct get's: a stream capturing `to` stores
// it, and it passes CheckPublished.
func pullAnswer(t *testing.T, a *attacker, id, to string) {
	t.Helper()
	_, err := a.js.PublishMsg(&nats.Msg{Subject: "interlock.start.billing", Data: []byte(`{}`),
		Header: nats.Header{nats.MsgIdHdr: {id}}})
	require.NoError(t, err)
	require.NoError(t, a.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_billing", to,
		[]byte(`{"batch":1,"no_wait":true}`)))
	require.NoError(t, a.nc.Flush())
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
	billing := d.attacker("agent_billing")
	key := subjects.PendingKey("run-1", "ask")
	pullAnswer(t, billing, "pending:"+key+":0", "$KV.interlock_pending."+subjects.PendingKey("run-0", "ask"))
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("KV_interlock_pending", &nats.StreamInfoRequest{SubjectsFilter: "interlock.start.>"})
		return err == nil && st.State.Subjects["interlock.start.billing"] == 1
	}, 20*time.Second, 20*time.Millisecond, "the pull's answer is stored in the pending index stream, under the work item's subject")

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
