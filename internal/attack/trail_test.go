package attack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// adaAgent registers, as the agent user, an agent "refunds" whose one
// interrupt only ada may decide, and counts the passes that got her answer.
func adaAgent(t *testing.T, d *deployment) *atomic.Int32 {
	t.Helper()
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	var answered atomic.Int32
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		dec, err := processor.Interrupt(processor.WithToolCall(ctx, "refund"), processor.Request{Approvers: []string{"ada"}})
		if err != nil {
			return nil, err
		}
		answered.Add(1)
		return "refunded by " + dec.Approver, nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return &answered
}

// suspendedRefund starts a refunds run (adaAgent's) and waits until it
// is suspended on ada's question.
func suspendedRefund(t *testing.T, d *deployment) string {
	t.Helper()
	run, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	_, err = processor.NewClient(d.client("auditor")).Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)
	return run
}

// decidedAndCompleted waits until run's trail holds one decision_accepted
// and one completed entry.
func decidedAndCompleted(t *testing.T, d *deployment, run string) {
	t.Helper()
	seen := map[subjects.EventType]int{}
	require.Eventually(t, func() bool {
		clear(seen)
		for _, ev := range d.events(run) {
			seen[ev.Type]++
		}
		return seen[subjects.EventDecisionAccepted] == 1 && seen[subjects.EventCompleted] == 1
	}, 20*time.Second, 20*time.Millisecond, "the trail holds ada's decision and the completion, once each: %v", seen)
}

// approveAsAda decides run's pending interrupt as ada over NATS and waits,
// at most within, for the run to finish.
func approveAsAda(t *testing.T, d *deployment, run string, within time.Duration) (*subjects.Run, error) {
	t.Helper()
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	require.NoError(t, err)
	require.Len(t, rec.Pending(), 1)
	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: run,
		InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	ctx, cancel := context.WithTimeout(d.ctx, within)
	defer cancel()
	return processor.NewClient(d.client("auditor")).Wait(ctx, run, processor.Finished)
}

// observationSubjects are the subjects role could once write audit entries
// on directly, and the one it reports its observations on now: an attack
// tries them all, the server refusing the ones role may not use.
func observationSubjects(role, run string) []string {
	t := map[string]string{"notifier": "notification_failed", "gateway": "access_refused"}[role]
	return []string{"interlock.events." + run + "." + t, "interlock.observed." + run + "." + t}
}

// TestAttackRolesSquatAuditEntryIDs is finding 2 of the second trust
// review: event message ids were predictable and deduplication is
// stream-wide, so the notifier (and the gateway) published messages with the
// ids of the coordinator's future entries, and ada's accepted decision, the
// resumed and the completed entries never reached the stored audit trail.
// (Coordinators since issue 25 write no resumed entry; the squatted id
// stays in the list for older ones.)
// Only the coordinator writes the events stream now; the other roles'
// observations have a stream of their own.
func TestAttackRolesSquatAuditEntryIDs(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"notifier", "gateway"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t)
			adaAgent(t, d)
			run, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", nil)
			require.NoError(t, err)
			_, err = processor.NewClient(d.client("auditor")).Wait(d.ctx, run, processor.Suspended)
			require.NoError(t, err)

			a := d.attacker(role)
			ids := []string{run + ":pass1:resumed", run + ":pass1:completed"}
			for seq := 1; seq <= 40; seq++ {
				ids = append(ids, fmt.Sprintf("%s:seq%d:decision_accepted", run, seq))
			}
			for _, subject := range observationSubjects(role, run) {
				for _, id := range ids {
					_ = a.nc.PublishMsg(&nats.Msg{Subject: subject, Data: []byte(`{}`), Header: nats.Header{nats.MsgIdHdr: {id}}})
				}
			}
			require.NoError(t, a.nc.Flush())

			done, err := approveAsAda(t, d, run, 30*time.Second)
			require.NoError(t, err)
			assert.Equal(t, subjects.RunCompleted, done.Status)
			// The record is written before its events: wait for them.
			want := []subjects.EventType{subjects.EventDecisionAccepted, subjects.EventCompleted}
			seen := map[subjects.EventType]bool{}
			require.Eventually(t, func() bool {
				for _, ev := range d.events(run) {
					seen[ev.Type] = true
				}
				return seen[want[0]] && seen[want[1]]
			}, 20*time.Second, 20*time.Millisecond, "the stored audit trail has %v; it has %v", want, seen)
		})
	}
}

// TestAttackForgedEntryInTrail is finding 3: the notifier published a body
// of type decision_accepted, approver ada, on its notification_failed
// subject, and every reader listed it as ada's accepted decision. Readers
// take an entry's type from the subject it was stored under, and an entry
// of another role reaches the trail only as that role's observation,
// recorded by the coordinator with its author. An entry written before
// this change (here by admin, who still may) is read the same way.
func TestAttackForgedEntryInTrail(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	adaAgent(t, d)
	run := suspendedRefund(t, d)

	forged, err := json.Marshal(subjects.Event{Version: 1, Type: subjects.EventDecisionAccepted, RunID: run, Pass: 0,
		At: time.Now().UTC(), Verdict: &subjects.Verdict{DecisionID: "forged", Approver: "ada",
			Outcome: subjects.OutcomeAccepted, InterruptID: "ask"}})
	require.NoError(t, err)
	notifier := d.attacker("notifier")
	for i, subject := range observationSubjects("notifier", run) {
		m := nats.NewMsg(subject)
		m.Data = forged
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("forged-observation-%d", i)) // as the notifier's own carry
		_ = notifier.nc.PublishMsg(m)
	}
	require.NoError(t, notifier.nc.Flush())
	// An entry of the old layout: a notification_failed written straight
	// onto the events stream, with the message id the notifier gave it.
	_, err = d.attacker("admin").js.Publish("interlock.events."+run+".notification_failed", forged,
		nats.MsgId(run+":notify-ops-7:notification_failed"))
	require.NoError(t, err)

	auditor := processor.NewClient(d.client("auditor"))
	var evs []subjects.Event
	require.Eventually(t, func() bool {
		evs, err = auditor.Events(d.ctx, run)
		require.NoError(t, err)
		n := 0
		for _, ev := range evs {
			if ev.Type == subjects.EventNotificationFailed {
				n++
			}
		}
		return n >= 2
	}, 20*time.Second, 20*time.Millisecond, "the notifier's observation and the old entry are listed")
	for _, ev := range evs {
		assert.NotEqual(t, subjects.EventDecisionAccepted, ev.Type, "no reader lists a forged decision")
		assert.Nil(t, ev.Verdict, "a %s entry carries no verdict", ev.Type)
		if ev.Type == subjects.EventNotificationFailed {
			assert.Contains(t, []string{subjects.ObserverNotifier, ""}, ev.Observer)
		}
	}
	rec, err := auditor.Run(d.ctx, run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status, "nothing was decided")
}

// TestAttackAgentSquatsReplayID is finding 12: the agent published a start
// of a run of its own with the message id of the coordinator's replay of
// another run; ada approved that run, its replay was dropped as a duplicate,
// and the approved action never ran. The coordinator's message ids are
// keyed with a secret only it (and admin) can read.
func TestAttackAgentSquatsReplayID(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	answered := adaAgent(t, d)
	victim, err := processor.NewClient(d.client("agent")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	_, err = processor.NewClient(d.client("auditor")).Wait(d.ctx, victim, processor.Suspended)
	require.NoError(t, err)

	squat, err := json.Marshal(subjects.Work{PassRef: subjects.PassRef{Version: 1, RunID: "squatter", Agent: "refunds"}})
	require.NoError(t, err)
	a := d.attacker("agent")
	for _, id := range []string{subjects.WorkMsgID(victim, 1), victim + ":1:work"} {
		_, err = a.js.Publish("interlock.start.refunds", squat, nats.MsgId(id))
		require.NoError(t, err)
	}

	done, err := approveAsAda(t, d, victim, 20*time.Second)
	require.NoError(t, err, "the approved run replays")
	assert.Equal(t, subjects.RunCompleted, done.Status)
	assert.Equal(t, int32(1), answered.Load())
}

// TestAttackAgentSquatsDeadLetterIDs: a dead letter's message id was
// dlq-<consumer>-<stream>-<sequence>, which anyone may predict, so the
// billing agent stored messages with the ids of the refunds worker's future
// dead letters on its own dead-letter subject: the refunds worker's dead
// letter was dropped as a duplicate and the work item it could not handle
// was lost. A dead letter's id ends in a nonce of its own.
func TestAttackAgentSquatsDeadLetterIDs(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))

	// A start the refunds worker cannot handle: it is dead-lettered.
	ack, err := d.attacker("gateway").js.Publish("interlock.start.refunds", []byte(`{"version":1}`))
	require.NoError(t, err)
	squatter := d.attacker("agent_billing")
	for seq := uint64(1); seq <= ack.Sequence+5; seq++ {
		_, err := squatter.js.Publish("interlock.dlq.worker_billing", []byte("squat"),
			nats.MsgId(subjects.DeadLetterMsgID("worker_refunds", "INTERLOCK_WORK", seq)))
		require.NoError(t, err)
	}

	adaAgent(t, d)
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		m, err := admin.js.GetLastMsg("INTERLOCK_DLQ", "interlock.dlq.worker_refunds")
		return err == nil && m.Header.Get("Interlock-Dlq-Sequence") == fmt.Sprint(ack.Sequence)
	}, 20*time.Second, 20*time.Millisecond, "the refunds worker's dead letter is stored")
}

// TestAttackNotifierForgesDeadLetters: the notifier could publish on every
// dead-letter subject, so an operator saw dead letters it forged as the
// coordinator's, a worker's or the gateway's. It may publish only on its
// own consumers' (interlock.dlq.notifier_<sink>).
func TestAttackNotifierForgesDeadLetters(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	a := d.attacker("notifier")
	_, err := a.js.Publish("interlock.dlq.notifier_finance-slack", []byte("its own"))
	require.NoError(t, err, "its own sinks' dead letters")
	for _, subject := range []string{"interlock.dlq.coordinator_decisions", "interlock.dlq.worker_refunds", "interlock.dlq.gateway_slack"} {
		require.NoError(t, a.nc.Publish(subject, []byte("forged")))
		a.refused(t, `Publish to "`+subject+`"`)
	}
	info, err := d.attacker("admin").js.StreamInfo("INTERLOCK_DLQ")
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Msgs, "only its own dead letter is stored")
}
