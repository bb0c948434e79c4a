package notifier

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// TestNotificationsMatchSchemas drives a real run through a reminder, an
// escalation and an expiry, and checks every notification the webhook, NATS
// and log sinks sent against docs/schema.
func TestNotificationsMatchSchemas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.escalatingAgent()
	e.linkService("identities:\n  ada: {links: [ada-hook]}\n", true)

	hook, personal := newReceiver(t, nil), newReceiver(t, nil)
	var logLines syncbuf.Buffer
	bus := make(chan []byte, 16)
	sub, err := e.admin.Subscribe("team.notifications", func(_ string, data []byte) { bus <- data })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	e.start(fmt.Sprintf(`
gateway_url: https://gw.example.test
nats_url: nats://127.0.0.1:4222
sinks:
  hook: {type: webhook, url: %s, secret: s3cret}
  ada-hook: {type: webhook, url: %s, personal: ada}
  bus: {type: nats, subject: team.notifications}
  audit: {type: log}
routes:
  - {name: all, match: 'true', sinks: [hook, ada-hook, bus, audit]}
`, hook.URL, personal.URL), nil, Options{Sinks: map[string]Sink{"audit": &logSink{w: &logLines}}})

	run, err := processor.NewClient(e.admin).Start(ctx(t), "refunds", map[string]int{"order": 7})
	require.NoError(t, err)
	const total = 5 // new, reminder, escalated, reminder (for the new deadline), expired
	kinds := map[Kind]int{}
	for _, r := range hook.waitN(t, total) {
		require.NoError(t, wireschema.Validate("notification", r.body))
		var b WebhookBody
		require.NoError(t, json.Unmarshal(r.body, &b))
		kinds[b.Kind]++
	}
	assert.Equal(t, map[Kind]int{KindNew: 1, KindReminder: 2, KindEscalated: 1, KindExpired: 1}, kinds)
	withLinks := 0
	for _, r := range personal.waitN(t, total) {
		require.NoError(t, wireschema.Validate("notification", r.body))
		if strings.Contains(string(r.body), `"links"`) {
			withLinks++
		}
	}
	assert.Equal(t, total-1, withLinks, "links on everything but the expiry")
	for range total {
		select {
		case b := <-bus:
			require.NoError(t, wireschema.Validate("notification", b))
		case <-time.After(15 * time.Second):
			t.Fatal("nats sink: missing notification")
		}
	}
	require.Eventually(t, func() bool { return strings.Count(logLines.String(), "\n") == total }, 15*time.Second, 10*time.Millisecond)
	for _, line := range strings.Split(strings.TrimSpace(logLines.String()), "\n") {
		require.NoError(t, wireschema.Validate("notification-log", []byte(line)))
		assert.Contains(t, line, run)
	}

	// The schema refuses what the fix removed: a decision command on an
	// expiry, a notice without its timer.
	var expired map[string]any
	for _, r := range hook.got() {
		var b WebhookBody
		require.NoError(t, json.Unmarshal(r.body, &b))
		if b.Kind == KindExpired {
			require.NoError(t, json.Unmarshal(r.body, &expired))
		}
	}
	expired["decide"].([]any)[0].(map[string]any)["approveCommand"] = "interlock approve x y"
	bad, _ := json.Marshal(expired)
	assert.Error(t, wireschema.Validate("notification", bad))
	delete(expired["decide"].([]any)[0].(map[string]any), "approveCommand")
	delete(expired["notice"].(map[string]any), "timer")
	bad, _ = json.Marshal(expired)
	assert.Error(t, wireschema.Validate("notification", bad))
}

// TestDecideEntriesCarryEveryInterruptSwitch checks that a notification
// about an interrupt that turns one-click links and chat decisions off (as
// an agent may) still matches the schema: the decide entries carry every
// field of the interrupt.
func TestDecideEntriesCarryEveryInterruptSwitch(t *testing.T) {
	t.Parallel()
	off := false
	s := &subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "r1", Agent: "refunds"}, Interrupts: []subjects.Interrupt{
		{ID: "int-1", Reason: subjects.ReasonToolCall, OneClickLinks: &off, ChatDecisions: &off},
	}}
	note := &Notification{Key: "r1.int-1.0", Route: "all", Sink: "hook", Kind: KindNew, Headline: "h", Suspension: *s,
		Subject: "s", Text: "t", Decide: decideHints(&Config{}, s, "", nil)}
	body, err := json.Marshal(WebhookBody{Version: 1, Notification: note})
	require.NoError(t, err)
	require.Contains(t, string(body), `"oneClickLinks":false`)
	require.Contains(t, string(body), `"chatDecisions":false`)
	require.NoError(t, wireschema.Validate("notification", body))
}
