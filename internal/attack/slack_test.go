package attack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/subjects"
)

// The bot token of the Slack sink in these tests (os.Setenv, not t.Setenv:
// the tests run in parallel).
func init() { os.Setenv("SLACK_TEST_BOT_TOKEN", "xoxb-test") }

// Deciding from Slack with the shipped users end to end: the notifier (as
// the notifier user) posts the card, ada clicks Approve, the gateway (as
// the gateway user) decides as ada via slack, and, reading the notifier's
// message list with its shipped rights, updates the message.
func TestSlackDecisionsAsShipped(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	fake := slacktest.New(t, "xoxb-test")
	cfg, err := notifier.ParseConfig("notifier.yaml", []byte(fmt.Sprintf(`
gateway_url: https://interlock.example.test
sinks:
  finance-slack: {type: slack, channel: C0FIN, token_env: SLACK_TEST_BOT_TOKEN, api_url: %s}
routes:
  - {match: "true", sinks: [finance-slack]}
`, fake.APIURL())))
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
			APIURL: fake.APIURL(), ResponseURLPrefix: fake.URL + "/respond/"}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

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
	require.Equal(t, "run-1/ask", value, "the button names the question, nothing more")

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

// The gateway reads the notifier's deliveries bucket, where the Slack sink
// lists the messages it posted, to update them once their question is
// decided; it may not write there (it would forge the notifier's delivery
// records or point the updates at other messages).
func TestAttackGatewayWritesDeliveries(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	admin := d.provisioner()
	deliveries, err := admin.Bucket(d.ctx, "deliveries", "test", 0)
	require.NoError(t, err)
	key := slack.MessagesKey("run-1", "ask")
	require.NoError(t, deliveries.Put(d.ctx, key, []byte(`[{"channel":"C1","ts":"1.1"}]`)))

	gw := d.client("gateway")
	b, err := gw.OpenBucket(d.ctx, "deliveries")
	require.NoError(t, err, "the gateway opens the deliveries bucket")
	got, err := b.Get(d.ctx, key)
	require.NoError(t, err, "and reads it")
	require.JSONEq(t, `[{"channel":"C1","ts":"1.1"}]`, string(got))

	a := d.attacker("gateway")
	require.NoError(t, a.nc.Publish("$KV.interlock_deliveries."+key, []byte(`[{"channel":"C9","ts":"9.9"}]`)))
	a.refused(t, "$KV.interlock_deliveries")
	_, err = a.js.Publish("$KV.interlock_deliveries.other", []byte("x"), nats.AckWait(2*time.Second))
	require.Error(t, err)
	got, err = b.Get(d.ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, `[{"channel":"C1","ts":"1.1"}]`, string(got), "nothing changed")
}
