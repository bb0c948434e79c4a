package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// The Slack interactivity endpoint, against a fake Slack (Web API and
// response URLs) and a signer of interaction payloads, on a real gateway
// over HTTP and a real JetStream server.

var slackSecret = []byte("slack-signing-secret-0123")

type slackEnv struct {
	*env
	fake   *slacktest.Server
	signer slacktest.Signer
}

func newSlackEnv(t *testing.T, set ...func(*SlackConfig)) *slackEnv {
	return newSlackEnvCo(t, nil, set...)
}

// newSlackEnvCo is newSlackEnv with the coordinator's config changed by co.
func newSlackEnvCo(t *testing.T, co func(*coordinator.Config), set ...func(*SlackConfig)) *slackEnv {
	fake := slacktest.New(t, "xoxb-test")
	e := newEnvCo(t, func(c *Config) {
		c.Slack = &SlackConfig{SigningSecret: slackSecret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			Channels: map[string]string{slackSink: "C0CHAN"}, APIURL: fake.APIURL(), ResponseURLPrefix: fake.URL + "/respond/"}
		for _, f := range set {
			f(c.Slack)
		}
	}, co)
	return &slackEnv{env: e, fake: fake, signer: slacktest.Signer{Secret: slackSecret}}
}

func (e *slackEnv) url() string { return e.srv.URL + "/v1/slack/interactions" }

// send posts a signed interaction and returns the status and body.
func (e *slackEnv) send(req *http.Request) (int, string) {
	e.t.Helper()
	resp, body := e.do(req)
	return resp.StatusCode, body
}

// slackSink is the notifier sink the test gateways post cards for, into
// channel C0CHAN.
const slackSink = "chat-sink"

// post asks the gateway's chat card service, as the notifier does, for the
// message of kind about run's interrupt through sink, under key.
func (e *env) post(sink, kind, key, run, interrupt string) subjects.ChatPostReply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := json.Marshal(subjects.ChatPostRequest{Version: subjects.Version, RunID: run, InterruptID: interrupt,
		Sink: sink, Kind: kind, Key: key})
	require.NoError(e.t, wireschema.Validate("chat-post-request", req))
	data, err := e.nc.Request(ctx, e.nc.Namespace().ChatPost(), req)
	require.NoError(e.t, err)
	require.NoError(e.t, wireschema.Validate("chat-post-reply", data), string(data))
	var reply subjects.ChatPostReply
	require.NoError(e.t, json.Unmarshal(data, &reply))
	return reply
}

// message is the message the fake holds at ts.
func (e *slackEnv) message(ts string) slacktest.Posted {
	e.t.Helper()
	for _, m := range e.fake.Messages() {
		if m.TS == ts {
			return m
		}
	}
	e.t.Fatalf("no message at %s", ts)
	return slacktest.Posted{}
}

// card has the gateway post the card of run's interrupt (once: the same
// key again is the same post) and returns it as the fake holds it.
func (e *slackEnv) card(run, interrupt string) slacktest.Posted {
	e.t.Helper()
	r := e.post(slackSink, subjects.ChatNew, "new-"+run, run, interrupt)
	require.Empty(e.t, r.Code, r.Detail)
	return e.message(r.TS)
}

// clickPayload has user of team click action on the card of
// run/interrupt, with the value the gateway signs for it (also for a
// button the card does not show); Slack's answers go to the response URL
// named respond.
func (e *slackEnv) clickPayload(team, user, action, run, interrupt, respond string) map[string]any {
	e.t.Helper()
	c := e.card(run, interrupt)
	v := slack.NewSeal(slackSecret).Value(slack.Ref{Run: run, Interrupt: interrupt}, action, c.Channel)
	return slacktest.Click(team, user, action, v, c.Channel, c.TS, e.fake.ResponseURL(respond))
}

// click sends clickPayload, signed.
func (e *slackEnv) click(team, user, action, run, interrupt, respond string) (int, string) {
	e.t.Helper()
	return e.send(e.signer.Request(e.t, e.url(), e.clickPayload(team, user, action, run, interrupt, respond)))
}

// responses waits for n posts to the response URL respond.
func (e *slackEnv) responses(respond string, n int) []slack.Response {
	e.t.Helper()
	var got []slack.Response
	require.Eventually(e.t, func() bool { got = e.fake.Responses(respond); return len(got) >= n },
		10*time.Second, 10*time.Millisecond, "%d responses to %s", n, respond)
	return got
}

// ephemeral waits for the ephemeral answer to respond and returns its text.
func (e *slackEnv) ephemeral(respond string) string {
	e.t.Helper()
	var text string
	require.Eventually(e.t, func() bool {
		for _, r := range e.fake.Responses(respond) {
			if r.ResponseType == "ephemeral" {
				text = r.Text
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	return text
}

// undecided asserts that interrupt of run is still waiting.
func (e *env) undecided(run string) {
	e.t.Helper()
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(e.t, err)
	for _, in := range rec.Interrupts {
		assert.Nil(e.t, in.Decision, "nothing was decided")
	}
	assert.Equal(e.t, subjects.RunSuspended, rec.Status)
}

// decided waits for interrupt of run to be decided and returns its state.
func (e *env) decided(run string) subjects.InterruptState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := e.client.Wait(ctx, run, func(r *subjects.Run) bool {
		return len(r.Interrupts) > 0 && r.Interrupts[0].Decision != nil
	})
	require.NoError(e.t, err)
	return rec.Interrupts[0]
}

// decisionEvents are the accepted, rejected and duplicate decisions on
// run's trail.
func (e *env) decisionEvents(run string) []subjects.Event {
	e.t.Helper()
	evs, err := e.client.Events(context.Background(), run)
	require.NoError(e.t, err)
	var out []subjects.Event
	for _, ev := range evs {
		switch ev.Type {
		case subjects.EventDecisionAccepted, subjects.EventDecisionRejected, subjects.EventDecisionDuplicate:
			out = append(out, ev)
		}
	}
	return out
}

// Attack: a request not signed with the app's signing secret (forged, or
// signed with another app's), or with no signature at all, is refused
// before its body is read as a payload: 401 chat_signature, audited,
// nothing decided.
func TestSlackBadSignature(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	forged := slacktest.Signer{Secret: []byte("not-the-signing-secret")}
	payload := slacktest.Click("T0TEAM", "U0ADA", slack.ActionApprove, slack.Ref{Run: run, Interrupt: id}.Value(),
		"C0CHAN", "1.1", e.fake.ResponseURL("forged"))
	status, body := e.send(forged.Request(t, e.url(), payload))
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, body, string(subjects.CodeChatSignature))
	unsigned := e.signer.Request(t, e.url(), payload)
	unsigned.Header.Del(slack.HeaderSignature)
	status, _ = e.send(unsigned)
	assert.Equal(t, http.StatusUnauthorized, status)
	// The body changed after signing (a different interrupt, a different user).
	tampered := e.signer.Request(t, e.url(), payload)
	raw, _ := io.ReadAll(tampered.Body)
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(string(raw), "U0ADA", "U0BOB", 1)))
	tampered.ContentLength = -1
	status, _ = e.send(tampered)
	assert.Equal(t, http.StatusUnauthorized, status)
	e.refusals(subjects.NoRun, subjects.CodeChatSignature, 3)
	e.undecided(run)
	assert.Empty(t, e.fake.Responses("forged"))
}

// Attack: a request signed more than five minutes ago (captured and sent
// later) or dated in the future is refused: 401 chat_stale, audited.
func TestSlackStaleTimestamp(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	for _, skew := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
		old := slacktest.Signer{Secret: slackSecret, Now: func() time.Time { return time.Now().Add(skew) }}
		status, body := e.send(old.Request(t, e.url(), slacktest.Click("T0TEAM", "U0ADA", slack.ActionApprove,
			slack.Ref{Run: run, Interrupt: id}.Value(), "C0CHAN", "1.1", e.fake.ResponseURL("stale"))))
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Contains(t, body, string(subjects.CodeChatStale))
	}
	e.refusals(subjects.NoRun, subjects.CodeChatStale, 2)
	e.undecided(run)
}

// Attack: a signed request sent again inside its five minutes is handled
// once: the replay is answered 200 with nothing done and audited
// chat_replayed; the trail has one decision.
func TestSlackReplayWithinWindow(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	req := e.signer.Request(t, e.url(), e.clickPayload("T0TEAM", "U0ADA", slack.ActionDeny, run, id, "once"))
	raw, _ := io.ReadAll(req.Body)
	again := func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, req.URL.String(), strings.NewReader(string(raw)))
		r.Header = req.Header.Clone()
		return r
	}
	status, _ := e.send(again())
	assert.Equal(t, http.StatusOK, status)
	e.decided(run)
	status, _ = e.send(again())
	assert.Equal(t, http.StatusOK, status)
	e.refusals(subjects.NoRun, subjects.CodeChatReplayed, 1)
	assert.Len(t, e.decisionEvents(run), 1, "the replay decided nothing, not even a rejected attempt")
	// The first answered twice (message, then ephemeral); the replay nothing.
	e.responses("once", 2)
	assert.Len(t, e.fake.Responses("once"), 2)
}

// Attack: a user of another workspace, even one whose user id is ada's
// there, or one reaching the channel through Slack Connect (the payload's
// team is ours, the user's is not), decides nothing: chat_workspace,
// audited, an ephemeral refusal.
func TestSlackOtherWorkspace(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	status, _ := e.click("T0OTHER", "U0ADA", slack.ActionApprove, run, id, "other")
	assert.Equal(t, http.StatusOK, status)
	connect := e.clickPayload("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "connect")
	connect["user"].(map[string]any)["team_id"] = "T0OTHER"
	status, _ = e.send(e.signer.Request(t, e.url(), connect))
	assert.Equal(t, http.StatusOK, status)
	e.refusals(subjects.NoRun, subjects.CodeChatWorkspace, 2)
	assert.Contains(t, e.ephemeral("other"), "Nothing was decided")
	assert.Contains(t, e.ephemeral("connect"), "Nothing was decided")
	e.undecided(run)
}

// Attack: a Slack user no identity lists clicks Approve: an ephemeral
// refusal, chat_unknown_user audited on the run, nothing decided.
func TestSlackUnknownUser(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Message": "anyone may decide this"})
	status, _ := e.click("T0TEAM", "U0NOBODY", slack.ActionApprove, run, id, "unknown")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, e.ephemeral("unknown"), "not linked to an Interlock identity")
	e.refusals(run, subjects.CodeChatUnknownUser, 1)
	e.undecided(run)
}

// Attack: bob, mapped and in the workspace, clicks Approve on ada's
// question (the button's value names it; it grants nothing): not_allowed,
// audited as bob, an ephemeral refusal, nothing decided. The same when
// the interrupt forbids chat decisions, for ada herself: chat_off.
func TestSlackNotAllowed(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	status, _ := e.click("T0TEAM", "U0BOB", slack.ActionApprove, run, id, "bob")
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, e.ephemeral("bob"), "may not decide")
	got := e.refusals(run, subjects.CodeNotAllowed, 1)
	assert.Equal(t, "bob", got[0].Identity)
	e.undecided(run)

	off, offID := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?", "NoChat": true})
	e.click("T0TEAM", "U0ADA", slack.ActionApprove, off, offID, "off")
	assert.Contains(t, e.ephemeral("off"), "may not be decided from chat")
	e.refusals(off, subjects.CodeChatOff, 1)
	e.undecided(off)
}

// ada approves from Slack: the decision is ada's, recorded via slack; the
// message is replaced by one that says who decided, without buttons, and
// ada is told. A second click gets "already decided by ada".
func TestSlackApproveDecidesAsMappedIdentity(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Groups": []string{"finance"}, "Message": "refund?"})
	status, _ := e.click("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "approve")
	assert.Equal(t, http.StatusOK, status)
	st := e.decided(run)
	assert.Equal(t, "ada", st.Decision.Approver)
	assert.Equal(t, subjects.StatusResolved, st.Decision.Status)
	// The record is written before its events: wait for the decision's.
	var evs []subjects.Event
	require.Eventually(t, func() bool { evs = e.decisionEvents(run); return len(evs) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Len(t, evs, 1)
	assert.Equal(t, subjects.EventDecisionAccepted, evs[0].Type)
	require.NotNil(t, evs[0].Verdict)
	assert.Equal(t, "slack", evs[0].Verdict.Via)
	assert.Equal(t, "ada", evs[0].Verdict.Approver)
	got := e.responses("approve", 2)
	assert.True(t, got[0].ReplaceOriginal)
	blocks, _ := json.Marshal(got[0].Blocks)
	assert.Contains(t, string(blocks), "Approved* by ada")
	assert.NotContains(t, string(blocks), slack.ActionApprove, "the buttons are gone")
	assert.Contains(t, e.ephemeral("approve"), "You approved as ada")

	e.click("T0TEAM", "U0ADA", slack.ActionDeny, run, id, "again")
	assert.Contains(t, e.ephemeral("again"), "Already decided by ada: approved")
	assert.Len(t, e.decisionEvents(run), 1)
}

// The "Answer…" form: built from the responseSchema (a select for the
// enum, a number input with its bounds, required marks), opened with
// views.open; a submission that fails the schema is answered with
// response_action: errors on the field, at once, and decides nothing; a
// good one decides with the answer as ada.
func TestSlackFormSchemaErrors(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	schema := map[string]any{"type": "object", "required": []string{"amount", "currency"},
		"properties": map[string]any{
			"amount":   map[string]any{"type": "number", "minimum": 1, "maximum": 100},
			"currency": map[string]any{"enum": []string{"EUR", "USD"}},
			"note":     map[string]any{"type": "string", "maxLength": 20},
		}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "how much?", "Schema": schema})
	e.click("T0TEAM", "U0ADA", slack.ActionAnswer, run, id, "answer")
	var view map[string]any
	require.Eventually(t, func() bool {
		calls := e.fake.Calls("views.open")
		if len(calls) == 0 {
			return false
		}
		view = calls[0].Body["view"].(map[string]any)
		return true
	}, 10*time.Second, 10*time.Millisecond)
	raw, _ := json.Marshal(view)
	assert.Contains(t, string(raw), `"static_select"`)
	assert.Contains(t, string(raw), `"max_value":"100"`)
	assert.Contains(t, string(raw), `"optional":false`)
	meta := view["private_metadata"].(string)

	submit := func(amount, currency string) (int, map[string]any) {
		status, body := e.send(e.signer.Request(t, e.url(), slacktest.Submit("T0TEAM", "U0ADA", meta,
			map[string]string{"amount": amount}, map[string]string{"currency": currency})))
		var out map[string]any
		if body != "" {
			require.NoError(t, json.Unmarshal([]byte(body), &out), body)
		}
		return status, out
	}
	status, out := submit("500", `"EUR"`)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "errors", out["response_action"])
	assert.Contains(t, out["errors"].(map[string]any)["amount"], "maximum")
	status, out = submit("abc", `"EUR"`)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, out["errors"].(map[string]any)["amount"], "Enter a number")
	e.undecided(run)

	status, out = submit("42", `"USD"`)
	assert.Equal(t, http.StatusOK, status)
	assert.Nil(t, out)
	st := e.decided(run)
	assert.Equal(t, "ada", st.Decision.Approver)
	assert.JSONEq(t, `{"amount": 42, "currency": "USD"}`, string(st.Decision.Payload))
}

// A question decided elsewhere (here over the HTTP API, as the inbox does)
// updates its Slack card: who decided what, and no buttons. The card is
// found where the gateway recorded posting it.
func TestSlackDecidedElsewhereUpdatesMessage(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	e.card(run, id)
	raw, _ := json.Marshal(e.fake.Messages()[0].Message.Blocks)
	require.Contains(t, string(raw), slack.ActionApprove)

	status, _ := e.call(http.MethodPost, "/v1/runs/"+run+"/interrupts/"+id+"/decision", "ada-token",
		[]byte(`{"status": "cancelled", "comment": "no"}`))
	require.Equal(t, http.StatusOK, status)
	require.Eventually(t, func() bool { return e.fake.Messages()[0].Updates > 0 }, 10*time.Second, 10*time.Millisecond)
	raw, _ = json.Marshal(e.fake.Messages()[0].Message.Blocks)
	assert.Contains(t, string(raw), "Denied* by ada")
	assert.NotContains(t, string(raw), slack.ActionApprove, "the buttons are gone")
}

// A form submitted by someone who may not decide (bob, who was never shown
// it but signs a submission naming ada's question) decides nothing: the
// refusal is shown on a field the form has, and audited.
func TestSlackFormRefusedForOthers(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "how much?", "Schema": schema})
	c := e.card(run, id)
	meta := slack.NewSeal(slackSecret).Metadata(slack.Ref{Run: run, Interrupt: id, Channel: c.Channel, TS: c.TS})
	status, body := e.send(e.signer.Request(t, e.url(), slacktest.Submit("T0TEAM", "U0BOB", meta,
		map[string]string{"amount": "1"}, nil)))
	assert.Equal(t, http.StatusOK, status)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	assert.Equal(t, "errors", out["response_action"])
	assert.Contains(t, out["errors"].(map[string]any)["amount"], "may not decide")
	e.refusals(run, subjects.CodeNotAllowed, 1)
	e.undecided(run)
}

// Mapping by e-mail only where the operator turned it on: carol names no
// Slack user, only her address; with the lookup off her clicks are
// refused (chat_unknown_user), with it on the Slack user Slack gives that
// address decides as carol.
func TestSlackEmailLookup(t *testing.T) {
	t.Parallel()
	off := newSlackEnv(t)
	off.fake.AddUser("carol@example.com", "U0CAROL", "T0TEAM")
	run, id := off.suspend(map[string]any{"Groups": []string{"finance"}, "Message": "refund?"})
	off.click("T0TEAM", "U0CAROL", slack.ActionApprove, run, id, "off")
	assert.Contains(t, off.ephemeral("off"), "not linked")
	off.refusals(run, subjects.CodeChatUnknownUser, 1)
	off.undecided(run)
	assert.Empty(t, off.fake.Calls("users.lookupByEmail"), "no lookup unless turned on")

	on := newSlackEnv(t, func(c *SlackConfig) { c.EmailLookup = true })
	on.fake.AddUser("carol@example.com", "U0CAROL", "T0TEAM")
	run, id = on.suspend(map[string]any{"Groups": []string{"finance"}, "Message": "refund?"})
	on.click("T0TEAM", "U0SOMEONE", slack.ActionApprove, run, id, "someone")
	assert.Contains(t, on.ephemeral("someone"), "not linked", "an address nobody has maps nobody")
	on.click("T0TEAM", "U0CAROL", slack.ActionApprove, run, id, "carol")
	assert.Equal(t, "carol", on.decided(run).Decision.Approver)
}

// A question decided while no gateway follows the Slack messages (here
// with the SDK, as the CLI does) has its message updated by a gateway
// started later: the gateway reads the decisions from its durable consumer
// (gateway_slack, created by `interlock provision`), not from the live
// feed.
func TestSlackDecidedWhileNoGatewayRuns(t *testing.T) {
	t.Parallel()
	fake := slacktest.New(t, "xoxb-test")
	e := &slackEnv{env: newEnv(t), fake: fake, signer: slacktest.Signer{Secret: slackSecret}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, Provision(ctx, e.nc)) // `interlock provision`
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	first := e.slackGateway(t)
	e.card(run, id)
	require.NoError(t, first.Stop(ctx))
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: id,
		Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	e.decided(run)
	assert.Zero(t, fake.Messages()[0].Updates, "no gateway follows Slack yet")

	gw := e.slackGateway(t)
	require.Eventually(t, func() bool { return fake.Messages()[0].Updates > 0 }, 10*time.Second, 10*time.Millisecond)
	raw, _ := json.Marshal(fake.Messages()[0].Message.Blocks)
	assert.Contains(t, string(raw), "by ada")
	assert.NotContains(t, string(raw), slack.ActionApprove, "the buttons are gone")

	// Stop ends the follower, which runs until told, rather than waiting
	// for it as work under way: with nothing under way it returns at once.
	stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	require.NoError(t, gw.Stop(stopCtx))
	<-gw.Stopped()
}

// slackGateway starts another gateway on e's server that follows the
// Slack messages.
func (e *slackEnv) slackGateway(t *testing.T) *Gateway {
	t.Helper()
	gw, err := New(context.Background(), e.nc, Config{Directory: e.dir, Logger: quiet,
		Slack: &SlackConfig{SigningSecret: slackSecret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			Channels: map[string]string{slackSink: "C0CHAN"}, APIURL: e.fake.APIURL(), ResponseURLPrefix: e.fake.URL + "/respond/"}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	return gw
}

// A chat.update Slack fails on its side is tried again (the consumer's
// backoff) until it succeeds; the event is acked only then.
func TestSlackUpdateRetried(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	e.card(run, id)
	e.fake.Fail("chat.update", "internal_error")
	status, _ := e.call(http.MethodPost, "/v1/runs/"+run+"/interrupts/"+id+"/decision", "ada-token",
		[]byte(`{"status": "resolved"}`))
	require.Equal(t, http.StatusOK, status)
	require.Eventually(t, func() bool { return e.fake.Messages()[0].Updates > 0 }, 15*time.Second, 10*time.Millisecond)
	assert.Len(t, e.fake.Calls("chat.update"), 2, "failed once, then updated")
	require.Eventually(t, func() bool {
		st, err := e.nc.ConsumerState(context.Background(), jetstream.StreamEvents, SlackDurable)
		return err == nil && st.AckPending == 0 && st.Pending == 0
	}, 10*time.Second, 10*time.Millisecond, "acked after the update")
}

// Attack (the notifier's, or anyone's who can post in the channel): clicks
// on buttons the gateway did not draw decide nothing. A value without the
// gateway's signature, a genuine value copied onto another message, a
// genuine Deny value under an Approve action, a genuine value clicked in
// another channel, and a form whose metadata the gateway did not sign are
// each refused chat_forged, audited, and ada is told; nothing is decided.
func TestSlackForgedClicksRefused(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	card := e.card(run, id)
	seal := slack.NewSeal(slackSecret)
	ref := slack.Ref{Run: run, Interrupt: id}
	bot := &slack.Client{Token: "xoxb-test", APIURL: e.fake.APIURL()}
	other, err := bot.PostMessage(context.Background(), "C0CHAN", "", card.Message, nil)
	require.NoError(t, err)
	for _, c := range []struct{ name, action, value, channel, ts string }{
		{"unsigned", slack.ActionApprove, ref.Value(), card.Channel, card.TS},
		{"copied", slack.ActionApprove, seal.Value(ref, slack.ActionApprove, "C0CHAN"), other.Channel, other.TS},
		{"relabelled", slack.ActionApprove, seal.Value(ref, slack.ActionDeny, "C0CHAN"), card.Channel, card.TS},
		{"elsewhere", slack.ActionApprove, seal.Value(ref, slack.ActionApprove, "C0CHAN"), "C0OTHER", card.TS},
	} {
		status, _ := e.send(e.signer.Request(t, e.url(), slacktest.Click("T0TEAM", "U0ADA", c.action, c.value,
			c.channel, c.ts, e.fake.ResponseURL(c.name))))
		assert.Equal(t, http.StatusOK, status, c.name)
		assert.Contains(t, e.ephemeral(c.name), "did not post this message", c.name)
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	form, formID := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "how much?", "Schema": schema})
	// A genuine form's metadata (for run's card) made to name the other
	// question, its mac kept.
	var moved map[string]any
	require.NoError(t, json.Unmarshal([]byte(seal.Metadata(slack.Ref{Run: run, Interrupt: id, Channel: card.Channel,
		TS: card.TS})), &moved))
	moved["run"], moved["interrupt"] = form, formID
	movedMeta, _ := json.Marshal(moved)
	for _, meta := range []string{`{"run":"` + form + `","interrupt":"` + formID + `"}`, string(movedMeta)} {
		status, body := e.send(e.signer.Request(t, e.url(), slacktest.Submit("T0TEAM", "U0ADA", meta,
			map[string]string{"amount": "1"}, nil)))
		assert.Equal(t, http.StatusOK, status)
		assert.Contains(t, body, "did not post this message")
	}
	e.refusals(run, subjects.CodeChatForged, 4)
	e.refusals(form, subjects.CodeChatForged, 2)
	e.undecided(run)
	e.undecided(form)
}

// The chat card service draws the card from the stored record (the
// question, who may decide, buttons signed for its channel), posts a
// request's key once (a notifier's redelivery asks again), puts
// reminders and expiries in the card's thread in its own words, leaves the
// buttons off when the sink or the interrupt says so, and refuses, audited,
// a sink it posts nothing for and a run or interrupt that is not there.
func TestChatPostDrawsFromRecord(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund 40 EUR?"})
	first := e.post(slackSink, subjects.ChatNew, "k1", run, id)
	require.Empty(t, first.Code, first.Detail)
	assert.Equal(t, "C0CHAN", first.Channel)
	again := e.post(slackSink, subjects.ChatNew, "k1", run, id)
	assert.Equal(t, first, again, "the same key is the same post")
	assert.Len(t, e.fake.Calls("chat.postMessage"), 1)
	card := e.message(first.TS)
	raw, _ := json.Marshal(card.Message.Blocks)
	assert.Contains(t, string(raw), "refund 40 EUR?")
	assert.Contains(t, string(raw), "ada")
	seal := slack.NewSeal(slackSecret)
	assert.Contains(t, string(raw), seal.Value(slack.Ref{Run: run, Interrupt: id}, slack.ActionApprove, "C0CHAN"))

	reminder := e.post(slackSink, subjects.ChatReminder, "k2", run, id)
	require.Empty(t, reminder.Code, reminder.Detail)
	reply := e.message(reminder.TS)
	assert.Equal(t, first.TS, reply.Thread, "in the card's thread")
	assert.Contains(t, reply.Message.Text, "Reminder")

	quiet := func(input map[string]any, noButtons bool) {
		r, i := e.suspend(input)
		req, _ := json.Marshal(subjects.ChatPostRequest{Version: 1, RunID: r, InterruptID: i, Sink: slackSink,
			Kind: subjects.ChatNew, Key: "k", NoButtons: noButtons})
		data, err := e.nc.Request(context.Background(), e.nc.Namespace().ChatPost(), req)
		require.NoError(t, err)
		var out subjects.ChatPostReply
		require.NoError(t, json.Unmarshal(data, &out))
		require.Empty(t, out.Code, out.Detail)
		raw, _ := json.Marshal(e.message(out.TS).Message.Blocks)
		assert.NotContains(t, string(raw), slack.ActionApprove)
		assert.NotContains(t, string(raw), slack.ActionDeny)
	}
	quiet(map[string]any{"Approvers": []string{"ada"}, "Message": "quiet"}, true)
	quiet(map[string]any{"Approvers": []string{"ada"}, "Message": "no chat", "NoChat": true}, false)

	// Slack refuses a post for good: chat_post_failed, nothing recorded as
	// posted; asked again (the channel fixed), it posts at once.
	run4, id4 := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund 50 EUR?"})
	e.fake.Fail("chat.postMessage", "channel_not_found")
	failed := e.post(slackSink, subjects.ChatNew, "k4", run4, id4)
	assert.Equal(t, subjects.CodeChatPostFailed, failed.Code, failed.Detail)
	retried := e.post(slackSink, subjects.ChatNew, "k4", run4, id4)
	require.Empty(t, retried.Code, retried.Detail)

	assert.Equal(t, subjects.CodeChatNotRouted, e.post("other-sink", subjects.ChatNew, "k", run, id).Code)
	// A run or interrupt not in the record is one not recorded yet: ask
	// again, not audited (TestSlackSinkPostsAfterCoordinatorLag).
	assert.Equal(t, subjects.CodeUnavailable, e.post(slackSink, subjects.ChatNew, "k", run, "nope").Code)
	assert.Equal(t, subjects.CodeUnavailable, e.post(slackSink, subjects.ChatNew, "k", "no-such-run", id).Code)
	e.refusals(run, subjects.CodeChatNotRouted, 1)

	status, _ := e.call(http.MethodPost, "/v1/runs/"+run+"/interrupts/"+id+"/decision", "ada-token",
		[]byte(`{"status": "cancelled"}`))
	require.Equal(t, http.StatusOK, status)
	e.decided(run)
	expired := e.post(slackSink, subjects.ChatExpired, "k3", run, id)
	require.Empty(t, expired.Code, expired.Detail)
	assert.Equal(t, first.TS, e.message(expired.TS).Thread)
	assert.Contains(t, e.message(expired.TS).Message.Text, "Denied")
}

// A gateway that dies between chat.postMessage and recording the post
// (here: abandoned at that point) does not post again when asked again
// (the notifier's redelivery, to any gateway): the intent was recorded
// before the post, and once its lease is out the post is found by its key
// in the channel's history, or for a reply in the card's thread, and
// recorded. The card so found counts for clicks.
func TestSlackPostCrashBetweenPostAndRecord(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	e.gw.lease.Store(0) // no wait for the dead gateway's lease
	var crashed atomic.Bool
	crash := func(point string) bool { return point == "slack-after-post" && crashed.CompareAndSwap(false, true) }
	e.gw.crash.Store(&crash)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	lost := e.post(slackSink, subjects.ChatNew, "k1", run, id)
	assert.Equal(t, subjects.CodeUnavailable, lost.Code, "abandoned after posting")
	require.Len(t, e.fake.Messages(), 1)
	got := e.post(slackSink, subjects.ChatNew, "k1", run, id)
	require.Empty(t, got.Code, got.Detail)
	assert.Equal(t, e.fake.Messages()[0].TS, got.TS, "found, not posted again")
	assert.Len(t, e.fake.Calls("chat.postMessage"), 1)
	assert.NotEmpty(t, e.fake.Calls("conversations.history"))

	crashed.Store(false)
	lost = e.post(slackSink, subjects.ChatReminder, "k2", run, id)
	assert.Equal(t, subjects.CodeUnavailable, lost.Code)
	got = e.post(slackSink, subjects.ChatReminder, "k2", run, id)
	require.Empty(t, got.Code, got.Detail)
	assert.Len(t, e.fake.Calls("chat.postMessage"), 2, "the reply once")
	assert.NotEmpty(t, e.fake.Calls("conversations.replies"))

	e.click("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "approve")
	assert.Equal(t, "ada", e.decided(run).Decision.Approver)
}

// The notifier chooses each request's key, so it could have the gateway
// post any number of cards for one interrupt (each listed, followed and
// updated for good). A second card for an interrupt in a channel that has
// one is not posted: the request is answered with the card there.
func TestSlackOneCardPerChannel(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	first := e.post(slackSink, subjects.ChatNew, "k1", run, id)
	require.Empty(t, first.Code, first.Detail)
	for _, key := range []string{"k2", "k3"} {
		again := e.post(slackSink, subjects.ChatNew, key, run, id)
		require.Empty(t, again.Code, again.Detail)
		assert.Equal(t, first, again, "the card already there")
	}
	assert.Len(t, e.fake.Calls("chat.postMessage"), 1)
	cards, _, err := e.gw.slackCards(context.Background(), run, id)
	require.NoError(t, err)
	assert.Len(t, cards, 1)
}

// Stop returns within its context even when the Slack follower is in the
// middle of a chat.update Slack does not answer: the update is cancelled
// and Stop reports the work it cut short.
func TestSlackStopWithinDeadline(t *testing.T) {
	t.Parallel()
	fake := slacktest.New(t, "xoxb-test")
	target, err := url.Parse(fake.URL)
	require.NoError(t, err)
	fwd := httputil.NewSingleHostReverseProxy(target)
	updating := make(chan struct{}, 1)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat.update") {
			select {
			case updating <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	e := &slackEnv{env: newEnv(t), fake: fake, signer: slacktest.Signer{Secret: slackSecret}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, Provision(ctx, e.nc))
	gw, err := New(context.Background(), e.nc, Config{Directory: e.dir, Logger: quiet,
		Slack: &SlackConfig{SigningSecret: slackSecret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			Channels: map[string]string{slackSink: "C0CHAN"}, APIURL: hang.URL + "/api/", ResponseURLPrefix: fake.URL + "/respond/"}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	e.card(run, id)
	_, err = e.client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: id,
		Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
	require.NoError(t, err)
	select {
	case <-updating:
	case <-ctx.Done():
		t.Fatal("the follower never called chat.update")
	}
	stopCtx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	start := time.Now()
	err = gw.Stop(stopCtx)
	t.Logf("Stop took %s: %v", time.Since(start), err)
	assert.Less(t, time.Since(start), 2*time.Second, "Stop kept to its context")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	<-gw.Stopped()
}

// TestSlackDeadCardDoesNotStrandOthers: an interrupt's card in one channel
// that Slack will never update (deleted by an admin, its channel archived)
// does not keep its cards elsewhere showing buttons once it is decided.
func TestSlackDeadCardDoesNotStrandOthers(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t, func(c *SlackConfig) { c.Channels["other-sink"] = "C1CHAN" })
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	a := e.post(slackSink, subjects.ChatNew, "ka", run, id)
	require.Empty(t, a.Code, a.Detail)
	b := e.post("other-sink", subjects.ChatNew, "kb", run, id)
	require.Empty(t, b.Code, b.Detail)
	e.fake.Fail("chat.update", "message_not_found") // the first card updated was deleted
	status, _ := e.call(http.MethodPost, "/v1/runs/"+run+"/interrupts/"+id+"/decision", "ada-token",
		[]byte(`{"status": "cancelled"}`))
	require.Equal(t, http.StatusOK, status)
	followed := func(ts string) bool {
		raw, _ := json.Marshal(e.message(ts).Message.Blocks)
		return !strings.Contains(string(raw), slack.ActionDeny)
	}
	require.Eventually(t, func() bool { return followed(a.TS) || followed(b.TS) }, 10*time.Second, 20*time.Millisecond,
		"the card Slack did not refuse shows the decision")
	assert.Len(t, e.fake.Calls("chat.update"), 2, "each card updated once: the refused one is not retried")
}

// TestSlackEmailLookupOneUserTwoIdentities: two identities whose addresses
// Slack gives to one user map that user to nobody. Before, the index kept
// whichever it looked up last, in map order, so the user decided as one
// identity or the other from refresh to refresh.
func TestSlackEmailLookupOneUserTwoIdentities(t *testing.T) {
	t.Parallel()
	dir, err := approvers.Parse("test", []byte("identities:\n"+
		"  carol: {groups: [finance], email: carol@example.com}\n"+
		"  dave: {groups: [finance, treasury], email: carol.alias@example.com}\n"+
		"  erin: {groups: [finance], email: erin@example.com}\n"))
	require.NoError(t, err)
	fake := slacktest.New(t, "xoxb-test")
	fake.AddUser("carol@example.com", "U0CAROL", "T0TEAM")
	fake.AddUser("carol.alias@example.com", "U0CAROL", "T0TEAM")
	fake.AddUser("erin@example.com", "U0ERIN", "T0TEAM")
	g := &Gateway{cfg: Config{Directory: dir, Logger: quiet,
		Slack: &SlackConfig{BotToken: "xoxb-test", APIURL: fake.APIURL(), EmailLookup: true}}}
	for i := range 40 {
		g.emails.mu.Lock()
		g.emails.refreshed = time.Time{} // look every address up again
		g.emails.mu.Unlock()
		if i >= 20 {
			// One lookup of the refresh fails (Slack's rate limit): the
			// identity keeps what it had, the user's ambiguity included.
			// Before, the other identity's lookup then mapped the user alone.
			fake.Fail("users.lookupByEmail", "ratelimited")
		}
		id, ok := g.slackIdentity(context.Background(), "T0TEAM", "U0CAROL")
		require.False(t, ok, "one Slack user for two identities decides as neither, not as %s", id.Name)
		erin, ok := g.slackIdentity(context.Background(), "T0TEAM", "U0ERIN")
		require.True(t, ok)
		require.Equal(t, "erin", erin.Name)
	}
}

// TestSlackCardWithoutButtonsKeepsNone: a card posted without buttons
// (the sink's `buttons: false`) is redrawn without them, and a click on a
// button it never showed decides nothing. Before, the first vote redrew
// every card of the question with signed buttons, and a click on the new
// ones in the channel the operator kept from deciding counted.
func TestSlackCardWithoutButtonsKeepsNone(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Approvals": 2,
		"Message": "pay?", "Tool": "pay", "Args": map[string]any{"amount": 5}})
	req, err := json.Marshal(subjects.ChatPostRequest{Version: subjects.Version, RunID: run, InterruptID: id,
		Sink: slackSink, Kind: subjects.ChatNew, Key: "new-" + run, NoButtons: true})
	require.NoError(t, err)
	data, err := e.nc.Request(context.Background(), e.nc.Namespace().ChatPost(), req)
	require.NoError(t, err)
	var out subjects.ChatPostReply
	require.NoError(t, json.Unmarshal(data, &out))
	require.Empty(t, out.Code, out.Detail)
	blocks := func() string {
		raw, err := json.Marshal(e.message(out.TS).Message.Blocks)
		require.NoError(t, err)
		return string(raw)
	}
	require.NotContains(t, blocks(), slack.ActionApprove, "posted without buttons")

	status, body := e.call(http.MethodPost, "/v1/runs/"+run+"/interrupts/"+id+"/decision", "ada-token", []byte(`{"status":"resolved"}`))
	require.Equal(t, http.StatusOK, status, body)
	require.Eventually(t, func() bool { return e.message(out.TS).Updates > 0 }, 10*time.Second, 10*time.Millisecond,
		"the card shows the vote so far")
	assert.NotContains(t, blocks(), slack.ActionApprove, "redrawn without buttons")

	// A signed value for that channel, on the card that shows no buttons.
	e.click("T0TEAM", "U0BOB", slack.ActionApprove, run, id, "bob")
	assert.Contains(t, e.ephemeral("bob"), "decides nothing")
	e.refusals(run, subjects.CodeChatForged, 1)
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Nil(t, rec.Interrupts[0].Decision, "bob's click counted for nothing")
	assert.Len(t, rec.Interrupts[0].Votes, 1, "ada's vote only")
}

// TestSlackRefusedAnswerIsTold: an answer the coordinator refuses after
// its form closed (here bob's second vote, which the policy does not let
// him change) is told to the user, in the card's channel, since a form's
// submission has no response URL. Before, the form closed and nothing
// said the answer counted for nothing.
func TestSlackRefusedAnswerIsTold(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Approvals": 2,
		"Message": "how much?", "Schema": schema}, processor.WithRequester("ada"))
	answer := func(n int, amount string) {
		e.click("T0TEAM", "U0BOB", slack.ActionAnswer, run, id, fmt.Sprintf("answer-%d", n))
		var meta string
		require.Eventually(t, func() bool {
			calls := e.fake.Calls("views.open")
			if len(calls) <= n {
				return false
			}
			meta = calls[n].Body["view"].(map[string]any)["private_metadata"].(string)
			return true
		}, 10*time.Second, 10*time.Millisecond)
		status, body := e.send(e.signer.Request(t, e.url(), slacktest.Submit("T0TEAM", "U0BOB", meta, map[string]string{"amount": amount}, nil)))
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, body, "the answer fits the schema: the form closes")
	}
	told := func(text string) map[string]any {
		var got map[string]any
		require.Eventually(t, func() bool {
			for _, c := range e.fake.Calls("chat.postEphemeral") {
				if c.Body["user"] == "U0BOB" && strings.Contains(fmt.Sprint(c.Body["text"]), text) {
					got = c.Body
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "told %q", text)
		return got
	}
	answer(0, "5")
	told("Your vote")
	answer(1, "6")
	assert.Equal(t, "C0CHAN", told("allows no change")["channel"])
	e.undecided(run)
}

// TestSlackRequesterIsToldAtOnce: the run's requester, whom the policy
// excludes, is refused when clicking, before any form opens: the refusal
// is told at once and audited as requester_excluded. Before, "Answer…"
// opened the form, and the requester learned only after filling it in and
// submitting that the answer counted for nothing.
func TestSlackRequesterIsToldAtOnce(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Approvals": 2,
		"Message": "how much?", "Schema": schema}, processor.WithRequester("ada"))
	e.click("T0TEAM", "U0ADA", slack.ActionAnswer, run, id, "answer")
	assert.Contains(t, e.ephemeral("answer"), "You (ada) started this run")
	assert.Empty(t, e.fake.Calls("views.open"), "no form opens for the requester")
	e.refusals(run, subjects.CodeRequesterExcluded, 1)

	e.click("T0TEAM", "U0ADA", slack.ActionDeny, run, id, "deny")
	assert.Contains(t, e.ephemeral("deny"), "You (ada) started this run")
	e.refusals(run, subjects.CodeRequesterExcluded, 2)
	e.undecided(run)
}

// TestSlackOneCardPerChannelRaced: two requests for a new card of one
// interrupt in one channel (two sinks mapped to it, or whoever holds the
// notifier's credentials asking twice) post one card: the second, asked
// while the first posts, is answered unavailable and, asked again, gets
// the first's card. Before, both read "no card yet" and both posted.
func TestSlackOneCardPerChannelRaced(t *testing.T) {
	t.Parallel()
	var fakeURL atomic.Pointer[url.URL]
	posting := make(chan struct{}, 1)
	release := make(chan struct{})
	var posts atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat.postMessage") && posts.Add(1) == 1 {
			posting <- struct{}{}
			select { // the first post waits until the second request is answered
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		httputil.NewSingleHostReverseProxy(fakeURL.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	e := newSlackEnv(t, func(c *SlackConfig) {
		c.APIURL = proxy.URL + "/api/"
		c.Channels["other-sink"] = "C0CHAN"
	})
	target, err := url.Parse(e.fake.URL)
	require.NoError(t, err)
	fakeURL.Store(target)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "refund?"})
	first := make(chan subjects.ChatPostReply, 1)
	go func() { first <- e.post(slackSink, subjects.ChatNew, "k-one", run, id) }()
	<-posting
	second := e.post("other-sink", subjects.ChatNew, "k-other", run, id)
	close(release)
	one := <-first
	require.Empty(t, one.Code, one.Detail)
	for second.Code == subjects.CodeUnavailable { // the notifier asks again
		second = e.post("other-sink", subjects.ChatNew, "k-other", run, id)
	}
	require.Empty(t, second.Code, second.Detail)
	assert.Equal(t, one.TS, second.TS, "the card already there")
	assert.Len(t, e.fake.Messages(), 1, "one card in the channel")
	cards, _, err := e.gw.slackCards(context.Background(), run, id)
	require.NoError(t, err)
	assert.Len(t, cards, 1)
}

// TestSlackPostReplyNotAnInbox: a request to the chat card service whose
// NATS reply subject is not an inbox (here bob's resume subject: NATS does
// not check a reply subject against the requester's permissions) is not
// answered, so nothing is published there with the gateway's rights, no
// card is posted, and the refusal is audited. Before, the gateway's answer
// was stored as a decision in bob's name.
func TestSlackPostReplyNotAnInbox(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"bob"}})
	req, _ := json.Marshal(subjects.ChatPostRequest{Version: subjects.Version, RunID: run, InterruptID: id,
		Kind: subjects.ChatNew, Sink: slackSink, Key: "new-" + run})
	target, err := e.nc.Namespace().ResumeAs(run, "bob")
	require.NoError(t, err)
	nc, err := nats.Connect(e.natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: e.nc.Namespace().ChatPost(), Reply: target, Data: req}))
	refused := e.refusals(subjects.NoRun, subjects.CodeReplyRefused, 1)
	assert.Contains(t, refused[0].Detail, target)
	stored, err := e.nc.Messages(context.Background(), jetstream.StreamDecisions, target, 1, 1)
	require.NoError(t, err)
	assert.Empty(t, stored, "nothing stored on bob's resume subject")
	assert.Empty(t, e.fake.Calls("chat.postMessage"), "no card posted")
	e.undecided(run)
}

// The message's top-level text (what Slack shows in notifications and
// previews, read as mrkdwn) carried the agent's question as written, where
// the blocks escape it: an agent could notify the whole channel and show a
// link of its own under the card's name.
func TestSlackFallbackTextEscaped(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	q := "<!channel> Urgent <https://evil.example/approve|click here to approve> & more"
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": q})
	c := e.card(run, id)
	assert.NotContains(t, c.Message.Text, "<", "no mention or link in %q", c.Message.Text)
	assert.Contains(t, c.Message.Text, "&lt;!channel&gt; Urgent &lt;https://evil.example/approve|click here to approve&gt; &amp; more")
}
