package notifier

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

const linkSecret = "a-secret-of-enough-bytes"

var decisionLink = regexp.MustCompile(`https://gw\.example\.test/l/[A-Za-z0-9_.-]+`)

// linksIn verifies every decision link in text and returns the distinct
// ones as "<interrupt> <action> <approver>".
func linksIn(t *testing.T, text string) []string {
	t.Helper()
	signer, err := links.NewSigner([]byte(linkSecret))
	require.NoError(t, err)
	var out []string
	for _, u := range decisionLink.FindAllString(text, -1) {
		l, err := signer.Verify(strings.TrimPrefix(u, "https://gw.example.test/l/"), time.Now())
		require.NoError(t, err, u)
		assert.InDelta(t, time.Now().Add(time.Hour).Unix(), l.Expires, 5)
		if k := l.Interrupt + " " + l.Action + " " + l.Approver; !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// A one-click link decides without a login, so it goes only to its person:
// an e-mail to them alone, a direct message. Shared channels (a Slack
// channel, a generic webhook, the log, NATS) get the inbox link, which needs
// a login, and no link ever reaches a log.
func TestPersonalLinksOnlyOnPersonalChannels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook, chat, dm, bobHook := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	var logged, logLines syncbuf.Buffer
	got := make(chan []byte, 1)
	sub, err := e.admin.Subscribe("team.notifications", func(_ string, data []byte) { got <- data })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	e.start(fmt.Sprintf(`
gateway_url: https://gw.example.test/
links: {secret_env: TEST_LINK_SECRET, ttl: 1h}
sinks:
  shared-hook: {type: webhook, url: %s}
  shared-chat: {type: slack, url: %s}
  audit: {type: log}
  bus: {type: nats, subject: team.notifications}
  ada-dm: {type: slack, url: %s, personal: ada}
  bob-hook: {type: webhook, url: %s, personal: bob}
  ada-mail:
    type: email
    smtp: {host: %s, port: %s}
    from: interlock@example.test
    to: [Ada <ada@example.test>]
    personal: ada
routes:
  - {match: "true", sinks: [shared-hook, shared-chat, audit, bus, ada-dm, bob-hook, ada-mail]}
`, hook.URL, chat.URL, dm.URL, bobHook.URL, host, port), nil, Options{
		Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Sinks:  map[string]Sink{"audit": &logSink{w: &logLines}},
	})
	e.suspend("refunds",
		subjects.Interrupt{ID: "int-1", Reason: "confirmation", Approvers: []string{"ada", "bob"}},
		subjects.Interrupt{ID: "int-2", Reason: "confirmation", Approvers: []string{"carol"}},
		subjects.Interrupt{ID: "int-3", Reason: "confirmation"},
		subjects.Interrupt{ID: "int-4", Reason: "confirmation", ApproverGroups: []string{"finance"}})

	// Shared channels: the inbox link for each question, no decision link.
	var body WebhookBody
	require.NoError(t, json.Unmarshal(hook.waitN(t, 1)[0].body, &body))
	for _, d := range body.Decide {
		assert.Equal(t, "https://gw.example.test/inbox#"+body.Suspension.RunID+"/"+d.ID, d.InboxURL)
		assert.Empty(t, d.Links)
	}
	slackBody := string(chat.waitN(t, 1)[0].body)
	assert.Contains(t, slackBody, "Open in inbox")
	var natsBody []byte
	select {
	case natsBody = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("nothing published")
	}

	// Personal channels: that person's links, for the questions they may
	// decide (named, or open to anyone), and nobody else's.
	assert.ElementsMatch(t, []string{"int-1 approve ada", "int-1 deny ada", "int-3 approve ada", "int-3 deny ada"},
		linksIn(t, string(dm.waitN(t, 1)[0].body)))
	assert.Contains(t, string(dm.got()[0].body), "Approve as ada")
	assert.ElementsMatch(t, []string{"int-1 approve bob", "int-1 deny bob", "int-3 approve bob", "int-3 deny bob"},
		linksIn(t, string(bobHook.waitN(t, 1)[0].body)))
	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	mail := parseMail(t, mb.got()[0])
	want := []string{"int-1 approve ada", "int-1 deny ada", "int-3 approve ada", "int-3 deny ada"}
	assert.ElementsMatch(t, want, linksIn(t, mail.text()))
	assert.ElementsMatch(t, want, linksIn(t, strings.ReplaceAll(mail.html(), "&amp;", "&")))

	require.Eventually(t, func() bool { return strings.Contains(logLines.String(), "\n") }, 15*time.Second, 10*time.Millisecond)
	for name, text := range map[string]string{"webhook": string(hook.got()[0].body), "slack channel": slackBody,
		"nats": string(natsBody), "log sink": logLines.String(), "notifier log": logged.String()} {
		assert.NotRegexp(t, `/l/`, text, "%s carries a decision link", name)
	}
}

func TestPersonalSinkConfig(t *testing.T) {
	t.Parallel()
	const head = "gateway_url: https://gw.example.test\nlinks: {secret_env: TEST_PERSONAL_SECRET}\nsinks:\n"
	for want, yaml := range map[string]string{
		`x.yaml:4: sink "a": a log sink is a shared channel; it cannot carry ada's personal links`:  head + "  a: {type: log, personal: ada}\n",
		`x.yaml:4: sink "a": a nats sink is a shared channel; it cannot carry ada's personal links`: head + "  a: {type: nats, subject: x, personal: ada}\n",
		`x.yaml:4: sink "a": personal links go to ada alone: to must list one address, not 2`: head +
			"  a: {type: email, smtp: {host: h}, from: i@x.test, to: [a@x.test, b@x.test], personal: ada}\n",
		`x.yaml:4: sink "a": invalid subject token: personal "a.b"`:                   head + "  a: {type: slack, url: 'https://x', personal: 'a.b'}\n",
		`x.yaml:2: sink "a": personal needs links: {secret_env: ...} and gateway_url`: "sinks:\n  a: {type: slack, url: 'https://x', personal: ada}\n",
	} {
		_, err := ParseConfig("x.yaml", []byte(yaml+"routes: []\n"))
		assert.ErrorIs(t, err, ErrConfig, want)
		assert.ErrorContains(t, err, want)
	}
}

// A Slack incoming-webhook URL is a secret (whoever has it posts to the
// channel): a failed delivery names only its host, in the logs, the dead
// letter and the notification_failed event.
func TestWebhookURLStaysOutOfErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there: every attempt fails
	var logged syncbuf.Buffer
	n := e.start(fmt.Sprintf(`
sinks:
  chat: {type: slack, url: "http://%s/services/T000/B000/SECRETTOKEN"}
routes:
  - {match: "true", sinks: [chat]}
`+fastRetry, addr), nil, Options{Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	s := e.suspend("refunds")
	require.Eventually(t, func() bool { return n.Count("chat", OutcomeDeadLettered) == 1 }, 15*time.Second, 10*time.Millisecond)
	evs := e.failedEvents(s.RunID, 1)
	dlq, _ := e.admin.Namespace().DeadLetter("notifier_chat")
	msgs, err := e.admin.Messages(ctx(t), jetstream.StreamDLQ, dlq, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	reason := msgs[0].Header.Get(jetstream.HeaderDLQReason)
	assert.Contains(t, reason, "http://"+addr)
	for what, text := range map[string]string{"log": logged.String(), "dead letter": reason, "event": string(evs[0].Data)} {
		assert.NotContains(t, text, "SECRETTOKEN", what)
		assert.NotContains(t, text, "/services/", what)
	}
}
