package attack_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// refusedReplies waits for n reply_refused entries under run _ and
// returns them.
func (d *deployment) refusedReplies(n int) []subjects.Event {
	d.t.Helper()
	var got []subjects.Event
	require.Eventually(d.t, func() bool {
		got = got[:0]
		for _, ev := range d.events(subjects.NoRun) {
			if ev.Code == subjects.CodeReplyRefused {
				got = append(got, ev)
			}
		}
		return len(got) >= n
	}, 15*time.Second, 50*time.Millisecond, "%d reply_refused entries", n)
	return got
}

// TestAttackAskReplyAimedAtStoredSubjects: an agent asks on its own ask
// subject (which it may publish) with a NATS reply subject the coordinator
// may publish on: another agent's run record, an entry of that run's
// audit trail, its pending index entry. NATS does not check a reply
// subject against the publisher's permissions. Before, the coordinator
// answered there with its own rights: the victim's record was emptied, its
// trail said "completed", and its approval never replayed. Now a request
// whose reply is not an inbox is neither applied nor answered, and is
// audited.
func TestAttackAskReplyAimedAtStoredSubjects(t *testing.T) {
	t.Parallel()
	d := newDeploymentWith(t, withRules(t, smallRefunds))
	d.suspend(d.client("agent"), "victim-run", "ada")
	auditor := processor.NewClient(d.client("auditor"))

	a := d.attacker("agent_billing")
	targets := []string{
		"$KV.interlock_runs.victim-run",
		"interlock.events.victim-run.completed",
		"$KV.interlock_pending." + subjects.PendingKey("victim-run", "ask"),
		"_INBOX.>",
	}
	for _, target := range targets {
		require.NoError(t, a.nc.PublishMsg(&nats.Msg{Subject: "interlock.ask.billing.x", Reply: target, Data: []byte(`{}`)}))
	}
	require.NoError(t, a.nc.Flush())
	refused := d.refusedReplies(len(targets))
	assert.Contains(t, refused[0].Detail, "not an inbox")

	rec, err := auditor.Run(d.ctx, "victim-run")
	require.NoError(t, err)
	assert.Equal(t, "refunds", rec.Agent, "the victim's record is untouched")
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	for _, ev := range d.events("victim-run") {
		assert.NotEqual(t, subjects.EventCompleted, ev.Type, "no entry the coordinator did not decide to write")
	}
	pend, err := auditor.Pending(d.ctx)
	require.NoError(t, err)
	require.Len(t, pend, 1)
	assert.Equal(t, "victim-run", pend[0].RunID)

	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: "victim-run",
		InterruptID: "ask", Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome, "the victim's approval still counts")
}

// TestAttackServiceReplyAimedAtGatewaySubjects: the notifier sends a
// request to the gateway's link service with a reply
// subject the gateway may publish on. Before, the gateway answered there
// with its own rights: a message on bob's resume subject (a rejected
// decision in bob's name), a start of any agent as any requester, a key of
// its links bucket (an interrupt's Slack card list) or sessions bucket,
// an access_refused entry in a run's trail. Now nothing is answered there,
// and each refusal is audited.
func TestAttackServiceReplyAimedAtGatewaySubjects(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	startLinkGateway(t, d)
	d.suspend(d.client("agent"), "run-1", "bob")
	a := d.attacker("notifier")
	admin := d.attacker("admin")
	sum := sha256.Sum256([]byte("run-1\x00ask"))
	stored := map[string]string{
		"interlock.resume.run-1.bob":                                     "INTERLOCK_DECISIONS",
		"interlock.start.billing.ada":                                    "INTERLOCK_WORK",
		"$KV.interlock_links.slackcards-" + hex.EncodeToString(sum[:16]): "KV_interlock_links",
		"$KV.interlock_sessions.anything":                                "KV_interlock_sessions",
		"interlock.observed.run-1.access_refused":                        "INTERLOCK_OBSERVED",
	}
	services := []string{"interlock.links.mint"} // the chat card service (served with Slack): processor/gateway TestSlackPostReplyNotAnInbox
	for target := range stored {
		for _, svc := range services {
			require.NoError(t, a.nc.PublishMsg(&nats.Msg{Subject: svc, Reply: target, Data: []byte(`{}`)}))
		}
	}
	require.NoError(t, a.nc.Flush())
	d.refusedReplies(len(stored) * len(services))
	for target, stream := range stored {
		_, err := admin.js.GetLastMsg(stream, target)
		assert.True(t, errors.Is(err, nats.ErrMsgNotFound), "nothing stored on %s: %v", target, err)
	}
	for _, ev := range d.events("run-1") {
		assert.NotEqual(t, subjects.EventDecisionRejected, ev.Type, "nothing decided in bob's name")
		assert.NotEqual(t, subjects.EventAccessRefused, ev.Type, "no entry in run-1's trail")
	}
}
