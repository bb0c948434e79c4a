package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/subjects"
)

// Socket Mode: the same interactions as the HTTP endpoint's, delivered in
// envelopes over WebSocket connections the gateway opened to a fake Slack
// (apps.connections.open, hello, interactive, disconnect; acks checked,
// unacked envelopes sent again).

const slackAppToken = "xapp-1-test"

// newSocketEnv is a Slack test gateway with Socket Mode on (two
// connections) against a fake that sends an unacknowledged envelope again
// after redeliver; it waits for both connections.
func newSocketEnv(t *testing.T, redeliver time.Duration) *slackEnv {
	fake := slacktest.New(t, "xoxb-test")
	fake.EnableSocketMode(t, slackAppToken, redeliver)
	e := newEnvWith(t, func(c *Config) {
		c.Slack = &SlackConfig{SigningSecret: slackSecret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			Channels: map[string]string{slackSink: "C0CHAN"}, APIURL: fake.APIURL(), ResponseURLPrefix: fake.URL + "/respond/",
			AppToken: slackAppToken, SocketBackoff: 20 * time.Millisecond}
	})
	require.Eventually(t, func() bool { return fake.Connections() == 2 }, 10*time.Second, 10*time.Millisecond)
	return &slackEnv{env: e, fake: fake, signer: slacktest.Signer{Secret: slackSecret}}
}

// acked waits for the ack of envelope id and returns it; it must have come
// within Slack's three seconds.
func (e *slackEnv) acked(id string) slacktest.Acked {
	e.t.Helper()
	var got []slacktest.Acked
	require.Eventually(e.t, func() bool { got = e.fake.Acks(id); return len(got) > 0 }, 10*time.Second, 10*time.Millisecond,
		"ack of %s", id)
	assert.Less(e.t, got[0].Delay, slacktest.AckDeadline, "acknowledged within Slack's three seconds")
	return got[0]
}

// A click delivered over Socket Mode decides as the HTTP endpoint's does:
// acknowledged at once with no payload, decided as ada via slack, the
// message replaced without buttons, ada told.
func TestSlackSocketClickDecides(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 5*time.Second)
	run, id := e.suspend(map[string]any{"Groups": []string{"finance"}, "Message": "refund?"})
	env := e.fake.Deliver(e.clickPayload("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "approve"))
	assert.Empty(t, e.acked(env).Payload, "a click's ack carries nothing")
	st := e.decided(run)
	assert.Equal(t, "ada", st.Decision.Approver)
	assert.Equal(t, subjects.StatusResolved, st.Decision.Status)
	var evs []subjects.Event
	require.Eventually(t, func() bool { evs = e.decisionEvents(run); return len(evs) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Len(t, evs, 1)
	require.NotNil(t, evs[0].Verdict)
	assert.Equal(t, "slack", evs[0].Verdict.Via)
	got := e.responses("approve", 2)
	blocks, _ := json.Marshal(got[0].Blocks)
	assert.Contains(t, string(blocks), "Approved* by ada")
	assert.Contains(t, e.ephemeral("approve"), "You approved as ada")
	assert.Len(t, e.fake.Calls("apps.connections.open"), 2, "one per connection, with the app-level token")
}

// Attack (replay): an envelope whose ack is lost is sent again by Slack,
// on this connection or another; the second delivery is acknowledged and
// decides nothing (chat_replayed, audited): one decision on the trail.
func TestSlackSocketRedeliveredDecidesOnce(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 300*time.Millisecond)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	e.fake.LoseAcks(1)
	env := e.fake.Deliver(e.clickPayload("T0TEAM", "U0ADA", slack.ActionDeny, run, id, "once"))
	e.acked(env)
	assert.Equal(t, -1, e.fake.Sends(env), "acknowledged")
	e.decided(run)
	e.refusals(subjects.NoRun, subjects.CodeChatReplayed, 1)
	require.Eventually(t, func() bool { return len(e.decisionEvents(run)) > 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Len(t, e.decisionEvents(run), 1, "the redelivery decided nothing, not even a rejected attempt")
	e.responses("once", 2)
	assert.Len(t, e.fake.Responses("once"), 2, "the redelivery answered nothing")
}

// Attack: over Socket Mode, as over HTTP, an unknown Slack user, a button
// value the gateway did not sign, and a user of another workspace decide
// nothing: each is acknowledged, told in an ephemeral message, and audited
// (chat_unknown_user, chat_forged, chat_workspace).
func TestSlackSocketRefusals(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 5*time.Second)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	card := e.card(run, id)
	envs := []string{
		e.fake.Deliver(e.clickPayload("T0TEAM", "U0NOBODY", slack.ActionApprove, run, id, "unknown")),
		e.fake.Deliver(slacktest.Click("T0TEAM", "U0ADA", slack.ActionApprove, slack.Ref{Run: run, Interrupt: id}.Value(),
			card.Channel, card.TS, e.fake.ResponseURL("forged"))),
		e.fake.Deliver(e.clickPayload("T0OTHER", "U0ADA", slack.ActionApprove, run, id, "other")),
	}
	for _, env := range envs {
		assert.Empty(t, e.acked(env).Payload)
	}
	assert.Contains(t, e.ephemeral("unknown"), "not linked to an Interlock identity")
	assert.Contains(t, e.ephemeral("forged"), "did not post this message")
	assert.Contains(t, e.ephemeral("other"), "Nothing was decided")
	e.refusals(run, subjects.CodeChatUnknownUser, 1)
	e.refusals(run, subjects.CodeChatForged, 1)
	e.refusals(subjects.NoRun, subjects.CodeChatWorkspace, 1)
	e.undecided(run)
}

// A form submitted over Socket Mode that fails the schema is answered in
// the envelope's ack (response_action: errors on the field), within the
// three seconds, and decides nothing; when that ack is lost, the
// redelivery's ack carries the same errors; a good one is acknowledged with
// nothing (the form closes) and decides with the answer.
func TestSlackSocketFormErrorsInAck(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 500*time.Millisecond)
	schema := map[string]any{"type": "object", "required": []string{"amount"},
		"properties": map[string]any{"amount": map[string]any{"type": "number", "minimum": 1, "maximum": 100}}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "how much?", "Schema": schema})
	c := e.card(run, id)
	meta := slack.NewSeal(slackSecret).Metadata(slack.Ref{Run: run, Interrupt: id, Channel: c.Channel, TS: c.TS})
	bad := e.acked(e.fake.Deliver(slacktest.Submit("T0TEAM", "U0ADA", meta, map[string]string{"amount": "500"}, nil)))
	var out map[string]any
	require.NoError(t, json.Unmarshal(bad.Payload, &out), string(bad.Payload))
	assert.Equal(t, "errors", out["response_action"])
	assert.Contains(t, out["errors"].(map[string]any)["amount"], "maximum")
	e.undecided(run)

	// Its ack lost, the submission comes again: the errors come with the
	// second ack too (remembered with the mark), and nothing is decided.
	e.fake.LoseAcks(1)
	again := e.fake.Deliver(slacktest.Submit("T0TEAM", "U0ADA", meta, map[string]string{"amount": "0"}, nil))
	lost := e.acked(again)
	out = nil
	require.NoError(t, json.Unmarshal(lost.Payload, &out), "the errors again, not an empty ack: %s", lost.Payload)
	assert.Contains(t, out["errors"].(map[string]any)["amount"], "minimum")
	e.refusals(subjects.NoRun, subjects.CodeChatReplayed, 1)
	e.undecided(run)

	good := e.acked(e.fake.Deliver(slacktest.Submit("T0TEAM", "U0ADA", meta, map[string]string{"amount": "42"}, nil)))
	assert.Empty(t, good.Payload)
	st := e.decided(run)
	assert.Equal(t, "ada", st.Decision.Approver)
	assert.JSONEq(t, `{"amount": 42}`, string(st.Decision.Payload))
}

// Slack refreshes the connections (disconnect, then closes them) and the
// network drops them: the gateway opens new ones each time (with backoff
// after a failure) and every envelope, including those sent while no
// connection was open and those whose connection died before the ack, is
// acknowledged and decides.
func TestSlackSocketReconnectLosesNothing(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 300*time.Millisecond)
	var runs []string
	deliver := func(name string) string {
		run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund " + name + "?"})
		runs = append(runs, run)
		return e.fake.Deliver(e.clickPayload("T0TEAM", "U0ADA", slack.ActionApprove, run, id, name))
	}
	e.acked(deliver("before"))

	opened := e.fake.Opened()
	e.fake.Disconnect(time.Second)
	require.Eventually(t, func() bool { return e.fake.Opened() >= opened+2 && e.fake.Connections() == 2 },
		10*time.Second, 10*time.Millisecond, "new connections before the old ones close")
	e.acked(deliver("refreshed"))

	// An envelope whose ack is lost as its connection dies.
	e.fake.LoseAcks(1)
	lost := deliver("lost")
	require.Eventually(t, func() bool { return e.fake.Sends(lost) >= 1 }, 10*time.Second, 10*time.Millisecond)
	opened = e.fake.Opened()
	e.fake.Kill()
	e.acked(lost)
	e.acked(deliver("after"))
	require.Eventually(t, func() bool { return e.fake.Opened() >= opened+2 }, 10*time.Second, 10*time.Millisecond)
	for _, run := range runs {
		assert.Equal(t, "ada", e.decided(run).Decision.Approver)
		require.Eventually(t, func() bool { return len(e.decisionEvents(run)) > 0 }, 10*time.Second, 10*time.Millisecond)
		assert.Len(t, e.decisionEvents(run), 1)
	}
}

// Stop closes the Socket Mode connections and returns once their work is
// done: a click delivered before is decided; one delivered after reaches
// no connection, is acknowledged by nobody and waits for the next gateway
// (Slack keeps sending it), which decides it.
func TestSlackSocketStop(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 200*time.Millisecond)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	e.acked(e.fake.Deliver(e.clickPayload("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "before")))
	e.decided(run)
	later, laterID := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund again?"})
	click := e.clickPayload("T0TEAM", "U0ADA", slack.ActionApprove, later, laterID, "after") // its card posted now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.gw.Stop(ctx))
	require.Eventually(t, func() bool { return e.fake.Connections() == 0 }, 10*time.Second, 10*time.Millisecond)

	env := e.fake.Deliver(click)
	assert.Empty(t, e.fake.Acks(env), "no gateway, no ack")
	next, err := New(context.Background(), e.nc, Config{Directory: e.dir, Logger: quiet,
		Slack: &SlackConfig{SigningSecret: slackSecret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			APIURL: e.fake.APIURL(), ResponseURLPrefix: e.fake.URL + "/respond/", AppToken: slackAppToken,
			SocketBackoff: 20 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(next.Close)
	e.acked(env)
	assert.Equal(t, "ada", e.decided(later).Decision.Approver)
}

// The gateway dies after marking an envelope's interaction taken and
// before handling it (no ack, nothing decided, no answer kept): Slack's
// redelivery finds the mark without an outcome and is answered that the
// submission was not taken (the form stays open, saying to submit again),
// not with an empty ack that would close the form with nothing decided;
// submitted again, it decides.
func TestSlackSocketCrashAfterMarkAsksAgain(t *testing.T) {
	t.Parallel()
	e := newSocketEnv(t, 300*time.Millisecond)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "how much?",
		"Schema": map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}}})
	c := e.card(run, id)
	var crashed atomic.Bool
	crash := func(point string) bool {
		return point == "slack-socket-after-mark" && crashed.CompareAndSwap(false, true)
	}
	e.gw.crash.Store(&crash)
	meta := slack.NewSeal(slackSecret).Metadata(slack.Ref{Run: run, Interrupt: id, Channel: c.Channel, TS: c.TS})
	lost := e.acked(e.fake.Deliver(slacktest.Submit("T0TEAM", "U0ADA", meta, map[string]string{"amount": "42"}, nil)))
	require.True(t, crashed.Load())
	var out map[string]any
	require.NoError(t, json.Unmarshal(lost.Payload, &out), "an answer, not an empty ack: %q", lost.Payload)
	assert.Equal(t, "errors", out["response_action"])
	assert.Contains(t, fmt.Sprint(out["errors"]), "submit again")
	e.undecided(run)

	good := e.acked(e.fake.Deliver(slacktest.Submit("T0TEAM", "U0ADA", meta, map[string]string{"amount": "42"}, nil)))
	assert.Empty(t, good.Payload)
	assert.Equal(t, "ada", e.decided(run).Decision.Approver)
}
