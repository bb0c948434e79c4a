package notifier

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/subjects"
)

// TestQuorumInEverySink: an interrupt that needs two approvals says so in
// the webhook's body and text, the Slack message and the mail: "0 of 2
// approvals", from whom, and that the requester may not vote.
func TestQuorumInEverySink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook, slackRecv := newReceiver(t, nil), newReceiver(t, nil)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	e.start(fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s, secret: s3cret}
  chat: {type: slack, url: %s}
  mail: {type: email, smtp: {host: %s, port: %s}, from: interlock@example.test, to: [ada@example.test]}
routes:
  - {match: "true", sinks: [ops, chat, mail]}
`+fastRetry, hook.URL, slackRecv.URL, host, port), nil)
	call, err := subjects.NewCall("pay", json.RawMessage(`{"amount":12400}`))
	require.NoError(t, err)
	e.suspend("payments", subjects.Interrupt{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Pay ACME?",
		Approvers: []string{"ada", "bob"}, ApproverGroups: []string{"finance"}, Policy: &subjects.Policy{Approvals: 2}, Call: call})
	const want = "0 of 2 approvals from ada, bob, group finance; whoever started the run may not vote"

	w := hook.waitN(t, 1)[0]
	require.NoError(t, wireschema.Validate("notification", w.body))
	var body WebhookBody
	require.NoError(t, json.Unmarshal(w.body, &body))
	require.Len(t, body.Decide, 1)
	assert.Equal(t, want, body.Decide[0].Quorum)
	assert.Contains(t, body.Text, "votes: "+want)
	assert.Contains(t, string(slackRecv.waitN(t, 1)[0].body), "votes: "+want)
	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	mail := parseMail(t, mb.got()[0])
	assert.Contains(t, mail.text(), "votes: "+want)
	assert.Contains(t, mail.html(), "votes: "+want)
}

// TestQuorumWords: what a notice says, which has no votes to count.
func TestQuorumWords(t *testing.T) {
	t.Parallel()
	in := subjects.Interrupt{Approvers: []string{"ada"}, Policy: &subjects.Policy{Approvals: 3, Denials: 2, AllowRequester: true}}
	assert.Equal(t, "3 approvals needed, 2 denials refuse from ada (the votes so far are in the inbox)", quorum(in, KindReminder, nil))
	assert.Equal(t, "3 approvals were needed", quorum(in, KindExpired, nil))
	assert.Empty(t, quorum(subjects.Interrupt{}, KindNew, nil), "no policy, nothing to say")
	// A version 2 reminder says where the votes stand.
	tally := &subjects.Tally{Approvals: 1, ApprovalsNeeded: 3, DenialsNeeded: 2, WaitingOn: []string{"ada", "group:finance"}}
	assert.Equal(t, "1 of 3 approvals, 0 of 2 denials; waiting on ada, group:finance", quorum(in, KindReminder, tally))
	in.Policy.AllowRequester = false
	tally = &subjects.Tally{Approvals: 1, ApprovalsNeeded: 2, DenialsNeeded: 1, WaitingOn: []string{"bob"}}
	assert.Equal(t, "1 of 2 approvals; waiting on bob; whoever started the run may not vote", quorum(in, KindEscalated, tally))
}
