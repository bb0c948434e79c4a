package notifier

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	chatslack "github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/subjects"
)

func slackAPIConfig(fake *slacktest.Server) string {
	return fmt.Sprintf(`
gateway_url: https://interlock.example.test
sinks:
  team: {type: slack, channel: C0CHAN, token_env: TEST_SLACK_TOKEN, api_url: %s}
  quiet: {type: slack, channel: C0QUIET, token_env: TEST_SLACK_TOKEN, api_url: %s, buttons: false}
routes:
  - {match: "true", sinks: [team, quiet]}
`+fastRetry, fake.APIURL(), fake.APIURL())
}

// The Web API sink posts one Block Kit card per interrupt: the question,
// the tool and its arguments, who may decide, the deadline, Approve and
// Deny with confirm dialogs, the inbox link; a sink with buttons: false
// and an interrupt with chatDecisions: false get none. Each post carries
// its intent key as message metadata and is listed for the gateway.
func TestSlackSinkPostsCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := slacktest.New(t, "xoxb-test")
	e.start(slackAPIConfig(fake), nil)
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
	blocks := func(p slacktest.Posted) string { raw, _ := json.Marshal(p.Message.Blocks); return string(raw) }
	card := blocks(byKey["C0CHAN/int-1"])
	for _, want := range []string{"Refund 40 EUR to Ada?", "refund", `{\"amount\":40}`, "ada, group finance",
		"!date^", chatslack.ActionApprove, chatslack.ActionDeny, `"confirm"`, "/inbox#" + s.RunID + "/int-1"} {
		assert.Contains(t, card, want)
	}
	assert.NotContains(t, blocks(byKey["C0CHAN/int-2"]), chatslack.ActionApprove, "chatDecisions: false")
	assert.NotContains(t, blocks(byKey["C0QUIET/int-1"]), chatslack.ActionApprove, "buttons: false")
	assert.Contains(t, blocks(byKey["C0QUIET/int-1"]), "Open in inbox")

	marks, err := e.admin.OpenBucket(ctx(t), "deliveries")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		raw, err := marks.Get(ctx(t), chatslack.MessagesKey(s.RunID, "int-1"))
		var list []chatslack.Posted
		_ = json.Unmarshal(raw, &list)
		return err == nil && len(list) == 2
	}, 10*time.Second, 10*time.Millisecond, "both messages are listed for the gateway")
}

// A notifier that dies after chat.postMessage and before recording the
// post does not post again when the notification is redelivered: it finds
// its intent, finds the post in the channel's history by its metadata and
// records it.
func TestSlackSinkCrashBetweenPostAndRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := slacktest.New(t, "xoxb-test")
	cfg := strings.Replace(slackAPIConfig(fake), "[team, quiet]", "[team]", 1)
	crash, crashed := fault.Once("slack-after-post")
	e.start(cfg, crash)
	s := e.suspend("refunds")
	<-crashed
	require.Len(t, fake.Messages(), 1, "posted before the crash")
	restarted := e.start(cfg, nil)
	require.Eventually(t, func() bool { return restarted.Count("team", OutcomeDelivered) == 1 },
		15*time.Second, 10*time.Millisecond, "the redelivery is handled")
	assert.Len(t, fake.Messages(), 1, "no second post")
	assert.NotEmpty(t, fake.Calls("conversations.history"), "the history was searched")
	marks, err := e.admin.OpenBucket(ctx(t), "deliveries")
	require.NoError(t, err)
	raw, err := marks.Get(ctx(t), chatslack.IntentKey(deliveryKey("team", &s, KindNew, ""), "int-1"))
	require.NoError(t, err)
	var got intent
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, "posted", got.State)
	assert.Equal(t, fake.Messages()[0].TS, got.TS)
}

func TestSlackSinkConfig(t *testing.T) {
	t.Parallel()
	route := "\nroutes:\n  - {match: \"true\", sinks: [s]}\n"
	ok := []string{
		"sinks:\n  s: {type: slack, url: https://hooks.slack.com/x}",
		"sinks:\n  s: {type: slack, channel: C1, token_env: TEST_SLACK_TOKEN}",
		"sinks:\n  s: {type: slack, channel: C1, token_env: TEST_SLACK_TOKEN, buttons: false}",
	}
	for _, y := range ok {
		_, err := ParseConfig("x", []byte(y+route))
		assert.NoError(t, err, y)
	}
	bad := map[string]string{
		"sinks:\n  s: {type: slack}":                                                             "url (an incoming webhook) or channel",
		"sinks:\n  s: {type: slack, channel: C1}":                                                "token_env is required",
		"sinks:\n  s: {type: slack, channel: C1, token_env: NO_SUCH_SLACK_TOKEN_VAR}":            "empty or unset",
		"sinks:\n  s: {type: slack, url: https://h/x, channel: C1, token_env: TEST_SLACK_TOKEN}": "exclude each other",
		"sinks:\n  s: {type: slack, url: https://h/x, buttons: false}":                           "need the Web API",
	}
	for y, want := range bad {
		_, err := ParseConfig("x", []byte(y+route))
		require.ErrorIs(t, err, ErrConfig, y)
		assert.Contains(t, err.Error(), want, y)
	}
}

// Reminders post in the thread of the question's message; the expiry
// posts there too and turns the message into "Expired", without buttons.
func TestSlackSinkNoticesInThread(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := slacktest.New(t, "xoxb-test")
	e.start(strings.Replace(slackAPIConfig(fake), "[team, quiet]", "[team]", 1), nil)
	deadline := time.Now().Add(time.Hour).UTC()
	s := e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Refund?",
		ExpiresAt: &deadline})
	require.Eventually(t, func() bool { return len(fake.Messages()) == 1 }, 15*time.Second, 10*time.Millisecond)
	first := fake.Messages()[0]
	e.notice(s, KindReminder, "remind-1", deadline.Add(-10*time.Minute), "")
	require.Eventually(t, func() bool { return len(fake.Messages()) == 2 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, first.TS, fake.Messages()[1].Thread, "the reminder is a reply in the thread")
	e.notice(s, KindExpired, "expire-1", deadline, subjects.StatusCancelled)
	require.Eventually(t, func() bool { return len(fake.Messages()) == 3 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, first.TS, fake.Messages()[2].Thread)
	updated := fake.Messages()[0]
	assert.Equal(t, 1, updated.Updates)
	raw, _ := json.Marshal(updated.Message.Blocks)
	assert.Contains(t, string(raw), "Expired")
	assert.NotContains(t, string(raw), chatslack.ActionApprove)
}

// A notifier that dies after posting a reminder in the question's thread
// and before recording it does not reply twice: the reply is not in the
// channel's history (conversations.history lists no thread replies), so
// the redelivery looks for it in the thread (conversations.replies) by
// its metadata and records it.
func TestSlackSinkCrashBetweenReplyAndRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := slacktest.New(t, "xoxb-test")
	cfg := strings.Replace(slackAPIConfig(fake), "[team, quiet]", "[team]", 1)
	var posts atomic.Int32
	crashed := make(chan struct{})
	e.start(cfg, func(point string) bool {
		if point == "slack-after-post" && posts.Add(1) == 2 {
			close(crashed)
			return true
		}
		return false
	})
	deadline := time.Now().Add(time.Hour).UTC()
	s := e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Refund?",
		ExpiresAt: &deadline})
	require.Eventually(t, func() bool { return len(fake.Messages()) == 1 }, 15*time.Second, 10*time.Millisecond)
	e.notice(s, KindReminder, "remind-1", deadline.Add(-10*time.Minute), "")
	<-crashed
	require.Len(t, fake.Messages(), 2, "replied before the crash")
	restarted := e.start(cfg, nil)
	require.Eventually(t, func() bool { return restarted.Count("team", OutcomeDelivered) == 1 },
		15*time.Second, 10*time.Millisecond, "the redelivery is handled")
	assert.Len(t, fake.Messages(), 2, "no second reply")
	assert.NotEmpty(t, fake.Calls("conversations.replies"), "the thread was searched")
	marks, err := e.admin.OpenBucket(ctx(t), "deliveries")
	require.NoError(t, err)
	raw, err := marks.Get(ctx(t), chatslack.IntentKey(deliveryKey("team", &s, KindReminder, "remind-1"), "int-1"))
	require.NoError(t, err)
	var got intent
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, "posted", got.State)
	assert.Equal(t, fake.Messages()[1].TS, got.TS)
}
