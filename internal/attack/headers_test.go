package attack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// hiddenHeaders is a carrier's header block whose part before a blank line
// holds id as its message id and, when asRead, one copy of each header a
// direct get's answer carries (a reader strips the server's last value of
// each); the server appends its own to every answer of it after the blank
// line, where nats.go's parser stopped reading.
func hiddenHeaders(id string, asRead bool) string {
	h := "NATS/1.0\r\nNats-Msg-Id: " + id + "\r\n"
	if asRead {
		h += "Nats-Stream: X\r\nNats-Subject: x\r\nNats-Sequence: 999\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\n"
	}
	return h + "\r\n\r\n"
}

// rawCarrier publishes, as user, on carrier (a subject of stream) a message
// whose header block is hdr byte for byte (jstest.RawPublish), and waits
// until stream holds it: a direct get asked for before would be answered
// 404, and that answer stored instead.
func (d *deployment) rawCarrier(user, stream, carrier, hdr string, body []byte) {
	d.t.Helper()
	jstest.RawPublish(d.t, d.url(user), carrier, hdr, body)
	admin := d.attacker("admin")
	require.Eventually(d.t, func() bool {
		m, err := admin.js.GetLastMsg(stream, carrier)
		return err == nil && string(m.Data) == string(body)
	}, 10*time.Second, 10*time.Millisecond, "the carrier is stored on %s", carrier)
}

// The agent stores on its own outcome subject a decision whose header
// block holds a blank line after its message id, and has a direct get's
// answer of it sent to ada's resume subject: nats.go stopped reading the
// headers at the blank line, before those the server appended, so the
// coordinator's consumer took the answer for ada's publish and applied
// the decision as hers. Found by a review of the ninth session; nats.go
// now reads a header block as nats-server does (third_party/nats.go).
func TestAttackAgentDecidesAsAdaWithBlankLineInHeaders(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")

	a := d.attacker("agent")
	carrier := "interlock.completed.refunds.blank"
	d.rawCarrier("agent", "INTERLOCK_RUNS", carrier, hiddenHeaders("ada:forged:blank", false),
		[]byte(`{"version":1,"decisionId":"forged-blank","interruptId":"ask","status":"resolved"}`))
	require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_RUNS."+carrier, "interlock.resume.run-1.ada", nil))
	require.NoError(t, a.nc.Flush())

	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-1") {
			if strings.Contains(ev.Detail, "not a client's publish") {
				return true
			}
		}
		rec, err := auditor.Run(d.ctx, "run-1")
		require.NoError(t, err)
		require.Nil(t, rec.Interrupts[0].Decision, "the agent decided run-1 as ada")
		return false
	}, 20*time.Second, 20*time.Millisecond, "the answer is refused and audited")
	rec, err := auditor.Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.Nil(t, rec.Interrupts[0].Decision)
}

// An answer the agent had stored on its own suspension subject of a
// suspended run (its outcome consumer refuses it) was the last
// "suspension" the coordinator saw when a decision came: it took the
// suspension for one not yet applied, and a decision naming no interrupt
// of the run's waited for it, retried until its deliveries ran out,
// instead of being rejected at once. Only a client's publish counts now.
// Found by a third review of the ninth session.
func TestAttackAnswerOnSuspensionSubjectDelaysNoDecision(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	carrier := "interlock.completed.refunds.suspcarrier"
	d.storedAnswer(d.attacker("agent"), "$JS.API.DIRECT.GET.INTERLOCK_RUNS."+carrier, nil, "INTERLOCK_RUNS",
		"interlock.suspended.refunds.run-1")

	ctx, cancel := context.WithTimeout(d.ctx, 8*time.Second)
	defer cancel()
	_, err := processor.NewClient(d.client("ada")).Decide(ctx, processor.DecisionRequest{RunID: "run-1",
		InterruptID: "no-such-interrupt", Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	var rej *processor.RejectionError
	require.ErrorAs(t, err, &rej, "a decision naming no interrupt of the run is rejected at once")
}
