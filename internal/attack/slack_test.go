package attack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/subjects"
)

// Deciding from Slack with the shipped users end to end: the notifier (as
// the notifier user) asks the gateway (as the gateway user) to post the
// card, ada clicks Approve, the gateway decides as ada via slack, and, from its own record of
// the cards it posted, updates the message.
func TestSlackDecisionsAsShipped(t *testing.T) {
	t.Parallel()
	d, fake, secret, srv := slackCardDeployment(t)

	d.suspend(d.client("agent"), "run-1", "ada")
	require.Eventually(t, func() bool { return len(fake.Messages()) == 1 }, 20*time.Second, 20*time.Millisecond)
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	raw, _ := json.Marshal(fake.Messages()[0].Message.Blocks)
	require.NoError(t, json.Unmarshal(raw, &blocks))
	value := ""
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.ActionID == slack.ActionApprove {
				value = e.Value
			}
		}
	}
	require.Regexp(t, `^run-1/[A-Za-z0-9_-]{22}/ask$`, value, "the button names the question, signed by the gateway")

	signer := slacktest.Signer{Secret: secret}
	resp, err := http.DefaultClient.Do(signer.Request(t, srv.URL+"/v1/slack/interactions",
		slacktest.Click("T0TEAM", "U0ADA", slack.ActionApprove, value, "C0FIN", fake.Messages()[0].TS, fake.ResponseURL("ada"))))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rec, err := processor.NewClient(d.client("auditor")).Wait(d.ctx, "run-1", func(r *subjects.Run) bool {
		return r.Interrupts[0].Decision != nil
	})
	require.NoError(t, err)
	require.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
	// The record is written before its events: wait for the decision's.
	var via string
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-1") {
			if ev.Type == subjects.EventDecisionAccepted {
				via = ev.Verdict.Via
			}
		}
		return via != ""
	}, 20*time.Second, 20*time.Millisecond, "the decision is in the audit trail")
	require.Equal(t, "slack", via)
	require.Eventually(t, func() bool { return fake.Messages()[0].Updates > 0 }, 20*time.Second, 20*time.Millisecond,
		"the gateway found the message and updated it")
	raw, _ = json.Marshal(fake.Messages()[0].Message.Blocks)
	require.True(t, strings.Contains(string(raw), "Approved* by ada"), string(raw))
}

// The gateway keeps the cards it posted in its own bucket; the notifier's
// deliveries bucket is not its to read or write (it would forge the
// notifier's delivery records).
func TestAttackGatewayWritesDeliveries(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	admin := d.provisioner()
	deliveries, err := admin.Bucket(d.ctx, "deliveries", "test", 0)
	require.NoError(t, err)
	require.NoError(t, deliveries.Put(d.ctx, "some.delivery", []byte(`{"route":"r"}`)))

	a := d.attacker("gateway")
	require.NoError(t, a.nc.Publish("$KV.interlock_deliveries.some.delivery", []byte(`{}`)))
	a.refused(t, "$KV.interlock_deliveries")
	_, err = a.js.Publish("$KV.interlock_deliveries.other", []byte("x"), nats.AckWait(2*time.Second))
	require.Error(t, err)
	_, err = a.nc.Request("$JS.API.DIRECT.GET.KV_interlock_deliveries.$KV.interlock_deliveries.some.delivery", nil, time.Second)
	require.Error(t, err)
	a.refused(t, "$JS.API.DIRECT.GET.KV_interlock_deliveries")
	got, err := deliveries.Get(d.ctx, "some.delivery")
	require.NoError(t, err)
	require.JSONEq(t, `{"route":"r"}`, string(got), "nothing changed")
}

// TestAttackChatPostOtherRoles: only the notifier asks the gateway's chat
// card service and only the gateway serves it. An agent (or an approver)
// that asks is refused by the server; a notifier that subscribes to
// answer in the gateway's place is refused too.
func TestAttackChatPostOtherRoles(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	req, _ := json.Marshal(subjects.ChatPostRequest{Version: subjects.Version, RunID: "run-1", InterruptID: "ask",
		Sink: "finance-slack", Kind: subjects.ChatNew, Key: "k"})
	for _, user := range []string{"agent", "ada", "auditor"} {
		a := d.attacker(user)
		_, err := a.nc.Request("interlock.chat.post", req, time.Second)
		require.Error(t, err, user)
		a.refused(t, `Publish to "interlock.chat.post"`)
	}
	n := d.attacker("notifier")
	_, err := n.nc.SubscribeSync("interlock.chat.post")
	require.NoError(t, err)
	n.refused(t, `Subscription to "interlock.chat.post"`)
}

// slackCardDeployment is the shipped deployment with a notifier whose
// Slack sink asks the gateway for cards (slackCardNotifierConfig) and a
// gateway that draws them on fake, which maps ada's Slack user; it returns
// the signing secret and the gateway's HTTP server.
func slackCardDeployment(t *testing.T) (*deployment, *slacktest.Server, []byte, *httptest.Server) {
	t.Helper()
	d := newDeployment(t)
	fake := slacktest.New(t, "xoxb-test")
	cfg, err := notifier.ParseConfig("notifier.yaml", []byte(slackCardNotifierConfig()))
	require.NoError(t, err)
	p, err := notifier.New(d.provisioner(), cfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, p.Provision(d.ctx))
	n, err := notifier.New(d.client("notifier"), cfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, n.Start(d.ctx))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	dir, err := approvers.Parse("identities", []byte("identities:\n  ada: {slack: {team: T0TEAM, user: U0ADA}}\n"))
	require.NoError(t, err)
	secret := []byte("slack-signing-secret-for-tests")
	gw, err := gateway.New(d.ctx, d.client("gateway"), gateway.Config{Directory: dir, Logger: quiet,
		Slack: &gateway.SlackConfig{SigningSecret: secret, TeamID: "T0TEAM", BotToken: "xoxb-test",
			Channels: map[string]string{"finance-slack": "C0FIN"}, APIURL: fake.APIURL(), ResponseURLPrefix: fake.URL + "/respond/"}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return d, fake, secret, srv
}

// slackCardNotifierConfig is the notifier's configuration with a Slack sink
// whose cards carry buttons, as docs/notifiers.md prescribes: the gateway
// posts them (its --slack-channel maps the sink to C0FIN).
func slackCardNotifierConfig() string {
	return `
gateway_url: https://interlock.example.test
sinks:
  finance-slack: {type: slack, cards: gateway}
routes:
  - {match: "true", sinks: [finance-slack]}
`
}

// buttonOf is the action id and value of the button labelled text on a
// message the fake holds.
func buttonOf(t *testing.T, m slacktest.Posted, text string) (string, string) {
	t.Helper()
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
			Text     struct {
				Text string `json:"text"`
			} `json:"text"`
		} `json:"elements"`
	}
	raw, _ := json.Marshal(m.Message.Blocks)
	require.NoError(t, json.Unmarshal(raw, &blocks))
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.Text.Text == text {
				return e.ActionID, e.Value
			}
		}
	}
	t.Fatalf("no %q button on %s", text, raw)
	return "", ""
}

// TestAttackNotifierForgesSlackCard: whoever holds the notifier's
// credentials and configuration posts into the channel a card that shows
// run-1's question but whose "Deny" button approves run-2 (both ada's to
// decide), and ada clicks "Deny". A click decides only what the gateway
// drew: the notifier holds no Slack bot token (the gateway posts every
// card), each button's value is signed by the gateway for its run,
// interrupt, action and channel, and a click counts only on a message the
// gateway recorded posting for that interrupt. The forged clicks are
// refused (chat_forged, audited) and decide nothing; the genuine card
// still decides.
func TestAttackNotifierForgesSlackCard(t *testing.T) {
	t.Parallel()
	d, fake, secret, srv := slackCardDeployment(t)
	config := slackCardNotifierConfig()

	agent := d.client("agent")
	d.suspend(agent, "run-1", "ada")
	require.Eventually(t, func() bool { return len(fake.Messages()) == 1 }, 20*time.Second, 20*time.Millisecond)
	d.suspend(agent, "run-2", "ada")
	require.Eventually(t, func() bool { return len(fake.Messages()) == 2 }, 20*time.Second, 20*time.Millisecond)
	card1, card2 := fake.Messages()[0], fake.Messages()[1]

	// 1. The notifier's configuration and environment hold no bot token.
	assert.NotContains(t, notifierSecrets(config), "xoxb-test", "the notifier holds the Slack bot token")

	// 2. Cards posted with the bot token anyway (a leaked token, an
	// incoming webhook of the same app): run-1's card, its "Deny" button
	// approving run-2, once with run-2's genuine Approve value (read from
	// the channel's history) and once with a value made up.
	approveID, approveValue := buttonOf(t, card2, "Approve")
	require.Equal(t, slack.ActionApprove, approveID)
	forge := func(value string) string {
		raw, _ := json.Marshal(card1.Message.Blocks)
		_, denyValue := buttonOf(t, card1, "Deny")
		forged := strings.ReplaceAll(string(raw), `"action_id":"`+slack.ActionDeny+`"`, `"action_id":"`+slack.ActionApprove+`"`)
		forged = strings.ReplaceAll(forged, `"value":"`+denyValue+`"`, `"value":"`+value+`"`)
		var m slack.Message
		require.NoError(t, json.Unmarshal([]byte(`{"text":"forged","blocks":`+forged+`}`), &m))
		bot := &slack.Client{Token: "xoxb-test", APIURL: fake.APIURL()}
		posted, err := bot.PostMessage(d.ctx, "C0FIN", "", m, nil)
		require.NoError(t, err)
		return posted.TS
	}
	signer := slacktest.Signer{Secret: secret}
	click := func(action, value, ts, respond string) {
		resp, err := http.DefaultClient.Do(signer.Request(t, srv.URL+"/v1/slack/interactions",
			slacktest.Click("T0TEAM", "U0ADA", action, value, "C0FIN", ts, fake.ResponseURL(respond))))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Eventually(t, func() bool {
			for _, r := range fake.Responses(respond) {
				if r.ResponseType == "ephemeral" {
					return true
				}
			}
			return false
		}, 20*time.Second, 20*time.Millisecond, "ada is answered (%s)", respond)
	}
	click(slack.ActionApprove, approveValue, forge(approveValue), "copied")
	click(slack.ActionApprove, "run-2/ask", forge("run-2/ask"), "made-up")
	auditor := processor.NewClient(d.client("auditor"))
	for _, run := range []string{"run-1", "run-2"} {
		rec, err := auditor.Run(d.ctx, run)
		require.NoError(t, err)
		require.Nil(t, rec.Interrupts[0].Decision, "%s decided by a click on a forged card", run)
	}
	require.Eventually(t, func() bool {
		forged := 0
		for _, ev := range d.events("run-2") {
			if ev.Type == subjects.EventAccessRefused && ev.Code == subjects.CodeChatForged {
				forged++
			}
		}
		return forged == 2
	}, 20*time.Second, 20*time.Millisecond, "both forged clicks audited")

	// 3. The genuine card decides what it shows.
	denyID, denyValue := buttonOf(t, card1, "Deny")
	click(denyID, denyValue, card1.TS, "genuine")
	rec, err := auditor.Wait(d.ctx, "run-1", func(r *subjects.Run) bool { return r.Interrupts[0].Decision != nil })
	require.NoError(t, err)
	require.Equal(t, subjects.StatusCancelled, rec.Interrupts[0].Decision.Status)
	require.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
}
