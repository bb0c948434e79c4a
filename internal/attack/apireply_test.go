package attack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/mcpbridge"
	"github.com/interlockhq/interlock/subjects"
)

// TestAttackRolesForgeDecisionThroughAPIReply: a role stores a body of
// its choosing on a subject it may publish and direct-get (the agent: its own
// outcome subject in INTERLOCK_RUNS; the notifier: its deliveries bucket;
// the MCP proxy: its call records; the coordinator: the runs bucket), then
// asks the JetStream API for it with a direct get whose NATS reply subject
// is interlock.resume.run-1.ada. The server answers with its own rights: the
// stored message lands on ada's resume subject, in INTERLOCK_DECISIONS, and
// before the fix the coordinator applied it as ada's approval. Now it
// refuses a decision that carries the server's headers, or no message id.
func TestAttackRolesForgeDecisionThroughAPIReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ role, carrier, api string }{
		{"agent", "interlock.completed.refunds.carrier", "$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.completed.refunds.carrier"},
		{"notifier", "$KV.interlock_deliveries.carrier", "$JS.API.DIRECT.GET.KV_interlock_deliveries.$KV.interlock_deliveries.carrier"},
		{"mcp_proxy", "$KV.interlock_mcp_calls.carrier", "$JS.API.DIRECT.GET.KV_interlock_mcp_calls.$KV.interlock_mcp_calls.carrier"},
		{"coordinator", "$KV.interlock_runs.carrier", "$JS.API.DIRECT.GET.KV_interlock_runs.$KV.interlock_runs.carrier"},
	} {
		t.Run(tc.role, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t)
			switch tc.role {
			case "notifier":
				startNotifier(t, d) // provisions the deliveries bucket
			case "mcp_proxy":
				require.NoError(t, mcpbridge.Provision(d.ctx, d.provisioner()))
			}
			d.suspend(d.client("agent"), "run-1", "ada")

			a := d.attacker(tc.role)
			// The answer with the server's headers (Nats-Stream, ...), and
			// with none ("no_hdr"): the body alone, as a client's might be.
			for i, body := range []string{"", `{"no_hdr":true}`} {
				carrier := fmt.Sprintf("%s%d", tc.carrier, i)
				m := nats.NewMsg(carrier)
				m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("ada:forged-%d:carrier", i))
				m.Data = fmt.Appendf(nil, `{"version":1,"decisionId":"forged-%d","interruptId":"ask","status":"resolved"}`, i)
				_, err := a.js.PublishMsg(m)
				require.NoError(t, err, "%s stores the carrier on a subject of its own", tc.role)
				require.NoError(t, a.nc.PublishRequest(fmt.Sprintf("%s%d", tc.api, i), "interlock.resume.run-1.ada", []byte(body)))
			}
			require.NoError(t, a.nc.Flush())

			// Both copies are stored on ada's subject, and refused.
			refused := func() int {
				n := 0
				for _, ev := range d.events("run-1") {
					if ev.Type == subjects.EventDecisionRejected && ev.Code == subjects.CodeNotAllowed &&
						strings.Contains(ev.Detail, "not a client's publish") {
						n++
					}
				}
				return n
			}
			require.Eventually(t, func() bool { return refused() == 2 }, 20*time.Second, 20*time.Millisecond,
				"the two copies the server sent to ada's subject are refused and audited")
			rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
			require.NoError(t, err)
			if dec := rec.Interrupts[0].Decision; dec != nil {
				t.Fatalf("%s decided run-1 as ada: status=%s decision approver=%q status=%q id=%q", tc.role, rec.Status,
					dec.Approver, dec.Status, dec.DecisionID)
			}
		})
	}
}

// TestAttackRoleReplacesMessageIDKey: the agent stores 64 hex digits of
// its choosing on its own outcome subject and has the server send a direct
// get's answer of it to $KV.interlock_keys.msgid. Before the fix the
// bucket kept it as the deployment's key, and a restarted coordinator
// signed its replay ids with a key the agent knows
// (TestAttackAgentSquatsReplayID again). The keys bucket now refuses a
// second write of a key.
func TestAttackRoleReplacesMessageIDKey(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	before, err := d.client("coordinator").IDSigner(d.ctx)
	require.NoError(t, err)

	known := strings.Repeat("ab", 32)
	a := d.attacker("agent")
	for _, carrier := range []string{"keycarrier", "probecarrier"} {
		_, err = a.js.Publish("interlock.completed.refunds."+carrier, []byte(known))
		require.NoError(t, err)
	}
	// The answer over the key, then one on a key nobody wrote: the bucket
	// stores the second once it has taken or refused the first.
	for _, send := range [][2]string{{"keycarrier", "$KV.interlock_keys.msgid"}, {"probecarrier", "$KV.interlock_keys.probe"}} {
		require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.completed.refunds."+send[0], send[1], nil))
	}
	require.NoError(t, a.nc.Flush())
	admin := d.provisioner()
	require.Eventually(t, func() bool {
		b, err := admin.OpenBucket(d.ctx, jetstream.KeysBucket)
		if err != nil {
			return false
		}
		stored, err := b.Has(d.ctx, "probe")
		return err == nil && stored
	}, 20*time.Second, 20*time.Millisecond, "the probe's answer reaches the keys bucket")

	after, err := d.client("coordinator").IDSigner(d.ctx)
	require.NoError(t, err)
	attackers := jetstream.NewIDSigner([]byte(strings.Repeat("\xab", 32)))
	require.NotEqual(t, attackers.Sign("run-1:1:work"), after.Sign("run-1:1:work"), "a restarted coordinator signs with the agent's key")
	require.Equal(t, before.Sign("run-1:1:work"), after.Sign("run-1:1:work"), "the deployment's key changed")
}

// TestAttackAgentStartsAnotherAgentsRunThroughAPIReply: the billing agent
// stores a start of a refunds run on its own outcome subject and has the
// server send a direct get's answer of it (with the server's headers, and
// without: "no_hdr") to interlock.start.refunds. The work queue stores
// both; the refunds worker dead-letters them and never runs its body
// (before, it ran a refunds pass with billing's input).
func TestAttackAgentStartsAnotherAgentsRunThroughAPIReply(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	admin := d.attacker("admin")
	dlq, err := admin.nc.SubscribeSync("interlock.dlq.worker_refunds")
	require.NoError(t, err)
	// The server knows the subscription before anything is dead-lettered
	// (CI once missed the first dead letter without this).
	require.NoError(t, admin.nc.Flush())
	var ran atomic.Int32
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(context.Context, json.RawMessage) (any, error) {
		ran.Add(1)
		return "refunded", nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	billing := d.attacker("agent_billing")
	for i, body := range []string{"", `{"no_hdr":true}`} {
		carrier := fmt.Sprintf("interlock.completed.billing.startcarrier%d", i)
		m := nats.NewMsg(carrier)
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("run-b%d:0:start:carrier", i))
		m.Data = fmt.Appendf(nil, `{"version":1,"runId":"run-b%d","agent":"refunds","pass":0,"input":{"to":"billing"}}`, i)
		_, err := billing.js.PublishMsg(m)
		require.NoError(t, err)
		require.NoError(t, billing.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_RUNS."+carrier, "interlock.start.refunds", []byte(body)))
	}
	require.NoError(t, billing.nc.Flush())
	for range 2 {
		dl, err := dlq.NextMsg(20 * time.Second)
		require.NoError(t, err, "the refunds worker dead-letters the server's answer")
		require.Contains(t, dl.Header.Get(jetstream.HeaderDLQReason), "not a client's publish")
	}
	require.Zero(t, ran.Load(), "a refunds pass ran with the billing agent's input")
}

// TestAttackTrailEntriesThroughAPIReply: the billing agent has the server
// store direct gets' answers on a refunds run's events subjects: a
// decision_accepted naming ada, a completed, and, first, messages carrying
// the ids the coordinator's next entries will take
// (<run>:seq<N>:decision_accepted, <run>:pass1:completed). The server
// stores them (nothing stops its answers), but no reader lists them (they
// carry the server's headers as stored: CheckPublished), and the
// coordinator's own entries are kept: it finds its id held by such an
// answer and stores the entry again under another. Before, readers took the
// copies for the run's (or skipped them only by the accident of a copied
// Nats-Subject header), and ada's decision and the completion were dropped
// from the trail as duplicates. With records in memory, the first entry of
// a change carries the record's sealed copy, and is kept the same way.
func TestAttackTrailEntriesThroughAPIReply(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, trailEntriesThroughAPIReply)
}

func trailEntriesThroughAPIReply(t *testing.T, d *deployment, _ jetstream.Storage) {
	adaAgent(t, d)
	run := suspendedRefund(t, d)

	a := d.attacker("agent_billing")
	inject := func(i int, id, subject, body string) {
		a.answer(t, fmt.Sprintf("interlock.agui.billing.forge%d", i), id, []byte(body), subject, false)
	}
	ids := []string{run + ":pass1:completed"}
	for seq := 1; seq <= 40; seq++ {
		ids = append(ids, fmt.Sprintf("%s:seq%d:decision_accepted", run, seq))
	}
	for i, id := range ids {
		inject(i, id, "interlock.events."+run+".squatted", `{}`)
	}
	forged := `{"version":1,"type":"decision_accepted","runId":"` + run + `","agent":"refunds","pass":0,"at":"2026-12-03T17:00:00Z",` +
		`"verdict":{"version":1,"decisionId":"forged","runId":"` + run + `","interruptId":"ask","outcome":"accepted","approver":"ada","at":"2026-12-03T17:00:00Z"}}`
	inject(100, "forged-entry", "interlock.events."+run+".decision_accepted", forged)
	require.NoError(t, a.nc.Flush())
	// The answers are stored (the server's own rights), before ada decides.
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("INTERLOCK_EVENTS", &nats.StreamInfoRequest{SubjectsFilter: "interlock.events." + run + ".>"})
		return err == nil && st.State.Subjects["interlock.events."+run+".squatted"] == uint64(len(ids)) &&
			st.State.Subjects["interlock.events."+run+".decision_accepted"] == 1
	}, 20*time.Second, 20*time.Millisecond, "the answers are stored")
	for _, ev := range d.events(run) {
		require.NotEqual(t, subjects.EventDecisionAccepted, ev.Type, "a reader lists the forged entry: %+v", ev.Verdict)
	}

	done, err := approveAsAda(t, d, run, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, subjects.RunCompleted, done.Status)
	decidedAndCompleted(t, d, run)
	for _, ev := range d.events(run) {
		if ev.Type == subjects.EventDecisionAccepted {
			require.NotEqual(t, "forged", ev.Verdict.DecisionID)
		}
	}
}

// TestAttackAgentFiresAnotherRunsTimerThroughAPIReply: a refunds run waits
// on ada with a deadline an hour away, after which the agent's default
// answer applies (onExpiry resolve). The billing agent stores the expiry's
// timer body on a subject of its own and has the server send direct gets'
// answers of it (with the server's headers, and without: "no_hdr") to
// interlock.timers.due.<run>, where the timers stream stores them. Before
// the fix the coordinator applied the first: the interrupt expired an hour
// early, resolved with the default, and ada never decided. A due timer must
// now be one the server's scheduler fired (it carries Nats-Scheduler and no
// header of an answer); the others are refused and audited.
func TestAttackAgentFiresAnotherRunsTimerThroughAPIReply(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}, ExpiresAt: &deadline,
			OnExpiry: &subjects.ExpiryPolicy{Action: subjects.ExpiryResolve, Payload: json.RawMessage(`{"refund":"default"}`)}}}}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	agent := d.client("agent")
	_, err = agent.Publish(d.ctx, "interlock.suspended.refunds.run-1", data, "run-1:0", nil)
	require.NoError(t, err)
	_, err = processor.NewClient(d.client("auditor")).Wait(d.ctx, "run-1", processor.Suspended)
	require.NoError(t, err)

	billing := d.attacker("agent_billing")
	for i, bare := range []bool{false, true} {
		timer := subjects.Timer{Version: 1, Name: fmt.Sprintf("forged%d", i), RunID: "run-1", InterruptID: "ask",
			Kind: subjects.TimerExpire, Deadline: deadline, At: time.Now().Add(-time.Second)}
		data, err := json.Marshal(timer)
		require.NoError(t, err)
		carrier := fmt.Sprintf("interlock.completed.billing.timercarrier%d", i)
		billing.answer(t, carrier, carrier, data, "interlock.timers.due.run-1", bare)
	}

	refused := func() int {
		n := 0
		for _, ev := range d.events("run-1") {
			if ev.Type == subjects.EventInputRejected && ev.Code == subjects.CodeNotAllowed && strings.Contains(ev.Detail, "not a timer") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return refused() == 2 }, 20*time.Second, 20*time.Millisecond,
		"the two answers the server sent to the run's due timers are refused and audited")
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, subjects.RunSuspended, rec.Status, "the interrupt expired an hour early")
	require.Nil(t, rec.Interrupts[0].Decision, "the billing agent's timer applied the refunds agent's default")
}

// TestAttackAgentForgesNotificationsThroughAPIReply: before a refunds run
// suspends, the billing agent has the server store direct gets' answers on
// the run's suspension subject (a question of its own wording, "call this
// number") and on its reminder subject. Before the fix the notifier sent
// both to every sink, in the run's name, and then dropped the refunds
// agent's real suspension as a repeat of its delivery key (sink, run,
// pass). It now notifies only what a client published.
func TestAttackAgentForgesNotificationsThroughAPIReply(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	notes := startNotifier(t, d)

	billing := d.attacker("agent_billing")
	forge := func(i int, subject string, v any) {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		carrier := fmt.Sprintf("interlock.agui.billing.notecarrier%d", i)
		billing.answer(t, carrier, carrier, data, subject, false)
	}
	forgedAsk := []subjects.Interrupt{{ID: "ask", Reason: "forged: call +1 555 0100 to approve", Approvers: []string{"ada"}}}
	forge(0, "interlock.suspended.refunds.run-1", subjects.Suspension{
		PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "refunds"}, Interrupts: forgedAsk})
	forge(1, "interlock.reminder.refunds.run-1", subjects.Notice{
		PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "refunds"}, Kind: subjects.KindReminder, Timer: "forged",
		Seq: 1, At: time.Now().UTC(), Interrupts: forgedAsk})
	require.NoError(t, billing.nc.Flush())
	// The coordinator refuses the forged suspension: it has read past it.
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-1") {
			if ev.Type == subjects.EventInputRejected && strings.Contains(ev.Detail, "not a client's publish") {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the coordinator refuses the forged suspension")

	d.suspend(d.client("agent"), "run-1", "ada")
	for {
		m, err := notes.bus.NextMsg(20 * time.Second)
		require.NoError(t, err, "the refunds agent's own suspension is notified")
		var note struct {
			Kind       string              `json:"kind"`
			Suspension subjects.Suspension `json:"suspension"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &note))
		require.Len(t, note.Suspension.Interrupts, 1)
		require.NotContains(t, note.Suspension.Interrupts[0].Reason, "forged",
			"the notifier sent the billing agent's %s in run-1's name", note.Kind)
		if note.Suspension.RunID == "run-1" && note.Kind == "new" {
			break
		}
	}
}

// TestAttackPendingIndexThroughAPIReply: the billing agent has the server
// store direct gets' answers in the pending index (the inbox's listing):
// one carrying the message id of the coordinator's next put (an entry's
// id, "pending:<key>:0", is computable from the run and interrupt ids),
// stored before the run suspends; one of bytes that are no JSON; one
// listing a question of its own wording. Before the fix the real entry was
// dropped as a repeat, and the listing failed on the bytes for everyone
// (the inbox, `interlock pending`). Now the coordinator reclaims its id,
// and readers list only the coordinator's puts.
func TestAttackPendingIndexThroughAPIReply(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	key := subjects.PendingKey("run-1", "ask")
	billing := d.attacker("agent_billing")
	forge := func(i int, id, subject, body string) {
		billing.answer(t, fmt.Sprintf("interlock.agui.billing.indexcarrier%d", i), id, []byte(body), subject, false)
	}
	forged := `{"runId":"run-9","agent":"refunds","interrupt":{"id":"ask","reason":"forged: call +1 555 0100"}}`
	forge(0, "pending:"+key+":0", "$KV.interlock_pending."+subjects.PendingKey("run-0", "ask"), forged)
	forge(1, "garbage", "$KV.interlock_pending.run-8.000000000000000000000000", "\x00 not json")
	forge(2, "listed", "$KV.interlock_pending."+subjects.PendingKey("run-9", "ask"), forged)
	require.NoError(t, billing.nc.Flush())
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		st, err := admin.js.StreamInfo("KV_interlock_pending")
		return err == nil && st.State.Msgs >= 3
	}, 20*time.Second, 20*time.Millisecond, "the answers are stored")

	d.suspend(d.client("agent"), "run-1", "ada")
	for _, who := range []string{"auditor", "coordinator"} {
		require.Equal(t, []string{"run-1"}, listed(t, d, who, "run-1"), "%s's listing", who)
	}
}

// TestAttackRecordReplacedByAPIAnswerStillReplays: any role's user may ask
// the JetStream API for something it may read (the billing agent, its own
// consumer's info) and name a run's record key as the reply subject: the
// server stores its JSON answer there, over the record, and every reader
// refuses it. Before the tenth session a run whose records were on disk
// then stopped for good: ada's approval was rejected ("not a write of the
// coordinator's") and nothing replayed. The coordinator now puts the
// record's latest sealed copy, which every write carries in the trail,
// back over the answer: ada's approval is applied and the replay queued.
func TestAttackRecordReplacedByAPIAnswerStillReplays(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, func(t *testing.T, d *deployment, _ jetstream.Storage) {
		d.suspend(d.client("agent"), "run-1", "ada")
		billing := d.attacker("agent_billing")
		require.NoError(t, billing.nc.PublishRequest("$JS.API.CONSUMER.INFO.INTERLOCK_WORK.worker_billing",
			"$KV.interlock_runs.run-1", nil))
		require.NoError(t, billing.nc.Flush())
		foreignRecord(t, d, "run-1")

		v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1",
			InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
		require.NoError(t, err, "ada's approval of a run whose record an answer replaced")
		require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
		require.True(t, v.Replay, "the replay is queued")
		rec := d.record("run-1")
		require.Equal(t, subjects.RunResuming, rec.Status)
		require.Equal(t, []string{"ada"}, rec.Interrupts[0].Approvers, "the record put back is the run's own")
	})
}

// TestAttackAgentForgesRunRecordThroughAPIReply: the billing agent reads
// nothing of the refunds run, but writes a record of its own wording for
// it: a copy of what a run record looks like, with bob, not ada, as the
// one who may decide, stored on a subject of its own and sent by the server
// as a direct get's answer to $KV.interlock_runs.run-1 (with the server's
// headers, then without). Before the fix the coordinator read the last as
// the run's record, and accepted bob's approval. Every write of a record
// now carries a message id, and a reader refuses what is not a client's
// publish (store.ErrForeignRecord); the coordinator puts the record's last
// sealed copy back over the answer, bob is refused as not an approver, and
// ada decides. (With records on disk the run stayed stopped until the
// tenth session: records on disk wrote no copies.)
func TestAttackAgentForgesRunRecordThroughAPIReply(t *testing.T) {
	t.Parallel()
	eachRecordStorage(t, forgedRunRecord)
}

func forgedRunRecord(t *testing.T, d *deployment, _ jetstream.Storage) {
	d.suspend(d.client("agent"), "run-1", "ada")
	rec := d.record("run-1")
	rec.Interrupts[0].Approvers = []string{"bob"}
	data, err := json.Marshal(rec)
	require.NoError(t, err)

	billing := d.attacker("agent_billing")
	for i, bare := range []bool{false, true} {
		carrier := fmt.Sprintf("interlock.agui.billing.recordcarrier%d", i)
		billing.answer(t, carrier, carrier, data, "$KV.interlock_runs.run-1", bare)
	}
	foreignRecord(t, d, "run-1")
	auditor := processor.NewClient(d.client("auditor"))

	v, err := processor.NewClient(d.client("bob")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1",
		InterruptID: "ask", Status: subjects.StatusResolved, Approver: "bob", Via: "cli"})
	if err == nil {
		require.NotEqual(t, subjects.OutcomeAccepted, v.Outcome, "bob decided ada's interrupt through a record the billing agent wrote")
	}
	var rej *processor.RejectionError
	require.ErrorAs(t, err, &rej)
	require.NotContains(t, rej.Verdict.Detail, "not a write of the coordinator's", "the record was not put back")
	put, err := auditor.Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, []string{"ada"}, put.Interrupts[0].Approvers, "the record put back is the run's own")
	v, err = processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "run-1",
		InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
}
