package notifier

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	chatslack "github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/subjects"
)

const slackCardsConfig = `
gateway_url: https://interlock.example.test
sinks:
  team: {type: slack, cards: gateway}
  quiet: {type: slack, cards: gateway, buttons: false}
routes:
  - {match: "true", sinks: [team, quiet]}
` + fastRetry

// slackService runs what a deployment runs for Slack cards: a coordinator
// (whose records the gateway draws the cards from) and a gateway holding
// the bot token, posting the team sink's cards into C0CHAN and the quiet
// sink's into C0QUIET, against a fake Slack.
func (e *env) slackService() *slacktest.Server {
	e.t.Helper()
	fake := slacktest.New(e.t, "xoxb-test")
	e.linkService("identities:\n  ada: {groups: [finance]}\n", false) // the coordinator, provisioned
	dir, err := approvers.Parse("identities", []byte("identities:\n  ada: {groups: [finance], slack: {team: T1, user: U1}}\n"))
	require.NoError(e.t, err)
	gw, err := gateway.New(ctx(e.t), jstest.Client(e.t, e.srv), gateway.Config{Directory: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Slack: &gateway.SlackConfig{SigningSecret: []byte("slack-signing-secret"), TeamID: "T1", BotToken: "xoxb-test",
			Channels: map[string]string{"team": "C0CHAN", "quiet": "C0QUIET"}, APIURL: fake.APIURL(),
			InboxURL: "https://interlock.example.test"}})
	require.NoError(e.t, err)
	e.t.Cleanup(gw.Close)
	return fake
}

func blocksOf(p slacktest.Posted) string {
	raw, _ := json.Marshal(p.Message.Blocks)
	return string(raw)
}

// The card sink holds no Slack token: it asks the gateway, which posts one
// Block Kit card per interrupt drawn from the stored record: the
// question, the tool and its arguments, who may decide, the deadline,
// Approve and Deny with confirm dialogs (their values signed by the
// gateway), the inbox link; a sink with buttons: false and an interrupt
// with chatDecisions: false get none.
func TestSlackSinkPostsCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := e.slackService()
	e.start(slackCardsConfig, nil)
	deadline := time.Now().Add(time.Hour).UTC()
	off := false
	s := e.suspend("refunds",
		subjects.Interrupt{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Refund 40 EUR to Ada?",
			Approvers: []string{"ada"}, ApproverGroups: []string{"finance"}, ExpiresAt: &deadline,
			Metadata: json.RawMessage(`{"tool":"refund","arguments":{"amount":40}}`)},
		subjects.Interrupt{ID: "int-2", Reason: subjects.ReasonToolCall, Message: "Close the account?", ChatDecisions: &off})
	require.Eventually(t, func() bool { return len(fake.Messages()) == 4 }, 15*time.Second, 10*time.Millisecond)
	byKey := map[string]slacktest.Posted{}
	for _, m := range fake.Messages() {
		require.NotNil(t, m.Metadata)
		assert.Equal(t, chatslack.EventType, m.Metadata.EventType)
		byKey[m.Channel+"/"+m.Metadata.EventPayload["interrupt"]] = m
	}
	card := blocksOf(byKey["C0CHAN/int-1"])
	for _, want := range []string{"Refund 40 EUR to Ada?", "refund", `{\"amount\":40}`, "ada, group finance",
		"!date^", chatslack.ActionApprove, chatslack.ActionDeny, `"confirm"`, "/inbox#" + s.RunID + "/int-1"} {
		assert.Contains(t, card, want)
	}
	seal := chatslack.NewSeal([]byte("slack-signing-secret"))
	assert.Contains(t, card, seal.Value(chatslack.Ref{Run: s.RunID, Interrupt: "int-1"}, chatslack.ActionApprove, "C0CHAN"))
	assert.NotContains(t, blocksOf(byKey["C0CHAN/int-2"]), chatslack.ActionApprove, "chatDecisions: false")
	assert.NotContains(t, blocksOf(byKey["C0QUIET/int-1"]), chatslack.ActionApprove, "buttons: false")
	assert.Contains(t, blocksOf(byKey["C0QUIET/int-1"]), "Open in inbox")
}

// Reminders post in the thread of the question's card; the expiry posts
// there too, in the gateway's words.
func TestSlackSinkNoticesInThread(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := e.slackService()
	e.start(strings.Replace(slackCardsConfig, "[team, quiet]", "[team]", 1), nil)
	deadline := time.Now().Add(time.Hour).UTC()
	s := e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Refund?",
		ExpiresAt: &deadline})
	require.Eventually(t, func() bool { return len(fake.Messages()) == 1 }, 15*time.Second, 10*time.Millisecond)
	first := fake.Messages()[0]
	e.notice(s, KindReminder, "remind-1", deadline.Add(-10*time.Minute), "")
	require.Eventually(t, func() bool { return len(fake.Messages()) == 2 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, first.TS, fake.Messages()[1].Thread, "the reminder is a reply in the thread")
	assert.Contains(t, fake.Messages()[1].Message.Text, "Reminder")
	e.notice(s, KindExpired, "expire-1", deadline, subjects.StatusCancelled)
	require.Eventually(t, func() bool { return len(fake.Messages()) == 3 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, first.TS, fake.Messages()[2].Thread)
	assert.Contains(t, fake.Messages()[2].Message.Text, "Expired")
}

// A notifier killed after the gateway posted the card and before recording
// the delivery asks again when the notification is redelivered, with the
// same key: the gateway answers from its record of that key and posts
// nothing more.
func TestSlackSinkRedeliveryPostsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := e.slackService()
	cfg := strings.Replace(slackCardsConfig, "[team, quiet]", "[team]", 1)
	crash, crashed := fault.Once("after-accept")
	e.start(cfg, crash)
	e.suspend("refunds")
	<-crashed
	require.Len(t, fake.Messages(), 1, "posted before the crash")
	restarted := e.start(cfg, nil)
	require.Eventually(t, func() bool { return restarted.Count("team", OutcomeDelivered) == 1 },
		15*time.Second, 10*time.Millisecond, "the redelivery is handled")
	assert.Len(t, fake.Calls("chat.postMessage"), 1, "no second post")
}

// With no gateway to post the cards (none runs, or none maps the sink to
// a channel), the notification fails visibly: retried, then dead-lettered
// with a notification_failed observation naming why; never dropped.
func TestSlackSinkWithoutGatewayFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := strings.Replace(slackCardsConfig, "[team, quiet]", "[team]", 1)
	n := e.start(cfg, nil)
	s := e.suspend("refunds")
	require.Eventually(t, func() bool { return n.Count("team", OutcomeDeadLettered) == 1 }, 15*time.Second, 10*time.Millisecond)
	evs := e.failedEvents(s.RunID, 1)
	var ev subjects.Event
	require.NoError(t, json.Unmarshal(evs[0].Data, &ev))
	assert.Equal(t, "team", ev.Sink)
	assert.Equal(t, 3, ev.Attempts, "retried first")
	assert.Contains(t, ev.Detail, "chat card service did not answer")

	// A gateway that posts nothing for the sink refuses at once.
	e2 := newEnv(t)
	e2.slackService()
	n2 := e2.start(strings.NewReplacer("team:", "other:", "[team, quiet]", "[other]").Replace(slackCardsConfig), nil)
	s2 := e2.suspend("refunds")
	require.Eventually(t, func() bool { return n2.Count("other", OutcomeDeadLettered) == 1 }, 15*time.Second, 10*time.Millisecond)
	// The coordinator runs here: it records the observation in the trail.
	require.Eventually(t, func() bool {
		trail, err := processor.NewClient(e2.admin).Events(ctx(t), s2.RunID)
		require.NoError(t, err)
		for _, x := range trail {
			if x.Type == subjects.EventNotificationFailed {
				ev = x
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "notification_failed in the trail")
	assert.Equal(t, 1, ev.Attempts, "a refusal is not retried")
	assert.Contains(t, ev.Detail, string(subjects.CodeChatNotRouted))
	dlq, _ := e2.admin.Namespace().DeadLetter("notifier_other")
	msgs, err := e2.admin.Messages(ctx(t), jetstream.StreamDLQ, dlq, 0, 10)
	require.NoError(t, err)
	assert.Len(t, msgs, 1)
}

func TestSlackSinkConfig(t *testing.T) {
	t.Parallel()
	route := "\nroutes:\n  - {match: \"true\", sinks: [s]}\n"
	ok := []string{
		"sinks:\n  s: {type: slack, url: https://hooks.slack.com/x}",
		"sinks:\n  s: {type: slack, cards: gateway}",
		"sinks:\n  s: {type: slack, cards: gateway, buttons: false}",
	}
	for _, y := range ok {
		_, err := ParseConfig("x", []byte(y+route))
		assert.NoError(t, err, y)
	}
	bad := map[string]string{
		"sinks:\n  s: {type: slack}":                                           "url (an incoming webhook) or cards: gateway",
		"sinks:\n  s: {type: slack, cards: notifier}":                          "the only value is gateway",
		"sinks:\n  s: {type: slack, channel: C1, token_env: TEST_SLACK_TOKEN}": "only it holds the bot token",
		"sinks:\n  s: {type: slack, cards: gateway, api_url: https://x}":       "--slack-channel s=CHANNEL",
		"sinks:\n  s: {type: slack, url: https://h/x, cards: gateway}":         "exclude each other",
		"sinks:\n  s: {type: slack, url: https://h/x, buttons: false}":         "buttons need cards",
		"sinks:\n  s: {type: slack, cards: gateway, personal: ada}":            "not personal links",
	}
	for y, want := range bad {
		_, err := ParseConfig("x", []byte(y+route))
		require.ErrorIs(t, err, ErrConfig, y)
		assert.Contains(t, err.Error(), want, y)
	}
}

// The coordinator lags (restarting, or behind on a burst) past the
// gateway's wait for the record when the notifier reads a suspension: the
// gateway answers unavailable (the notifier only asks about suspensions it
// read from the stream, so a run or interrupt not recorded is one not
// recorded yet), the card sink retries, and once the coordinator catches
// up the question is posted; nothing is dead-lettered.
func TestSlackSinkPostsAfterCoordinatorLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := slacktest.New(t, "xoxb-test")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, gateway.Provision(ctx(t), e.admin))
	dir, err := approvers.Parse("identities", []byte("identities:\n  ada: {groups: [finance], slack: {team: T1, user: U1}}\n"))
	require.NoError(t, err)
	gw, err := gateway.New(ctx(t), jstest.Client(t, e.srv), gateway.Config{Directory: dir, Logger: quiet,
		Slack: &gateway.SlackConfig{SigningSecret: []byte("slack-signing-secret"), TeamID: "T1", BotToken: "xoxb-test",
			Channels: map[string]string{"team": "C0CHAN"}, APIURL: fake.APIURL()}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	n := e.start(strings.Replace(slackCardsConfig, "[team, quiet]", "[team]", 1), nil)
	e.suspend("refunds") // no coordinator records it yet
	require.Eventually(t, func() bool {
		return n.Count("team", OutcomeRetried)+n.Count("team", OutcomeDeadLettered) >= 1
	}, 20*time.Second, 10*time.Millisecond, "the first attempt ends")
	require.Zero(t, n.Count("team", OutcomeDeadLettered), "a record not there yet is no refusal")
	co := coordinator.New(e.admin, coordinator.Config{Logger: quiet})
	require.NoError(t, co.Start(ctx(t)))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	require.Eventually(t, func() bool { return n.Count("team", OutcomeDelivered) == 1 }, 20*time.Second, 10*time.Millisecond)
	assert.Len(t, fake.Calls("chat.postMessage"), 1, "the question is posted once the coordinator catches up")
	assert.Zero(t, n.Count("team", OutcomeDeadLettered))
}
