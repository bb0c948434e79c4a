package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// linkSecret is the gateway's: the notifier never sees it.
const linkSecret = "a-secret-of-enough-bytes"

// linkIdentities is the gateway's identities file in these tests: the
// personal sinks of each identity, whose links it mints.
const linkIdentities = `
identities:
  ada: {groups: [finance], links: [ada-dm, ada-mail]}
  bob: {groups: [ops], links: [bob-hook]}
`

// linkService runs what a deployment runs for one-click links: a
// coordinator (which records the runs the gateway checks; unless the test
// runs one already) and a gateway
// holding the link secret and identities, answering the notifier's link
// requests.
func (e *env) linkService(identities string, coordinated bool) *gateway.Gateway {
	e.t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if !coordinated {
		co := coordinator.New(e.admin, coordinator.Config{Logger: quiet})
		require.NoError(e.t, co.Start(ctx(e.t)))
		e.t.Cleanup(func() { _ = co.Stop(context.Background()) })
	}
	dir, err := approvers.Parse("identities", []byte(identities))
	require.NoError(e.t, err)
	signer, err := links.NewSigner([]byte(linkSecret))
	require.NoError(e.t, err)
	require.NoError(e.t, gateway.Provision(ctx(e.t), e.admin))
	gw, err := gateway.New(ctx(e.t), jstest.Client(e.t, e.srv), gateway.Config{Directory: dir, Links: signer, Logger: quiet,
		LinkTTL: time.Hour})
	require.NoError(e.t, err)
	e.t.Cleanup(gw.Close)
	return gw
}

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
	no := false
	e := newEnv(t)
	gw := e.linkService(linkIdentities, false)
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
		subjects.Interrupt{ID: "int-4", Reason: "confirmation", ApproverGroups: []string{"finance"}},
		subjects.Interrupt{ID: "int-5", Reason: "confirmation", Approvers: []string{"ada"}, OneClickLinks: &no})

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

	// Personal channels: that person's links, minted by the gateway for the
	// questions they may decide (named, in a group of theirs the gateway
	// knows, or open to anyone), and nobody else's; none for a question
	// that turned links off.
	want := []string{"int-1 approve ada", "int-1 deny ada", "int-3 approve ada", "int-3 deny ada",
		"int-4 approve ada", "int-4 deny ada"}
	assert.ElementsMatch(t, want, linksIn(t, string(dm.waitN(t, 1)[0].body)))
	assert.Contains(t, string(dm.got()[0].body), "Approve as ada")
	assert.ElementsMatch(t, []string{"int-1 approve bob", "int-1 deny bob", "int-3 approve bob", "int-3 deny bob"},
		linksIn(t, string(bobHook.waitN(t, 1)[0].body)))
	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	mail := parseMail(t, mb.got()[0])
	assert.ElementsMatch(t, want, linksIn(t, mail.text()))
	assert.ElementsMatch(t, want, linksIn(t, strings.ReplaceAll(mail.html(), "&amp;", "&")))

	require.Eventually(t, func() bool { return strings.Contains(logLines.String(), "\n") }, 15*time.Second, 10*time.Millisecond)
	for name, text := range map[string]string{"webhook": string(hook.got()[0].body), "slack channel": slackBody,
		"nats": string(natsBody), "log sink": logLines.String(), "notifier log": logged.String()} {
		assert.NotRegexp(t, `/l/`, text, "%s carries a decision link", name)
	}

	// The link ada got works: the gateway that minted it decides as ada.
	srv := httptest.NewServer(gw)
	defer srv.Close()
	var approve string
	for _, u := range decisionLink.FindAllString(string(dm.got()[0].body), -1) {
		l, err := links.NewSigner([]byte(linkSecret))
		require.NoError(t, err)
		if got, _ := l.Verify(strings.TrimPrefix(u, "https://gw.example.test/l/"), time.Now()); got.Interrupt == "int-1" &&
			got.Action == links.Approve {
			approve = strings.Replace(u, "https://gw.example.test", srv.URL, 1)
		}
	}
	require.NotEmpty(t, approve)
	resp, err := http.PostForm(approve, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	rec, err := processor.NewClient(e.admin).Run(ctx(t), body.Suspension.RunID)
	require.NoError(t, err)
	require.NotNil(t, rec.Interrupts[0].Decision)
	assert.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
}

func TestPersonalSinkConfig(t *testing.T) {
	t.Parallel()
	const head = "gateway_url: https://gw.example.test\nsinks:\n"
	for want, yaml := range map[string]string{
		`x.yaml:3: sink "a": a log sink is a shared channel; it cannot carry ada's personal links`:  head + "  a: {type: log, personal: ada}\n",
		`x.yaml:3: sink "a": a nats sink is a shared channel; it cannot carry ada's personal links`: head + "  a: {type: nats, subject: x, personal: ada}\n",
		`x.yaml:3: sink "a": personal links go to ada alone: to must list one address, not 2`: head +
			"  a: {type: email, smtp: {host: h}, from: i@x.test, to: [a@x.test, b@x.test], personal: ada}\n",
		`x.yaml:3: sink "a": invalid subject token: personal "a.b"`: head + "  a: {type: slack, url: 'https://x', personal: 'a.b'}\n",
		`x.yaml:2: sink "a": personal needs gateway_url`:            "sinks:\n  a: {type: slack, url: 'https://x', personal: ada}\n",
		`x.yaml:1: links: the notifier signs no links any more; the gateway mints them`: "links: {secret_env: TEST_SMTP_PASSWORD}\n" + head +
			"  a: {type: slack, url: 'https://x', personal: ada}\n",
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

// The coordinator lags (restarting, or behind on a burst) past the
// gateway's wait for the record when the notifier reads a suspension: the
// link service answers unavailable (the notifier only asks about
// suspensions it read from the stream, so a run or interrupt not recorded
// is one not recorded yet), the notifier retries rather than sending ada's
// notification without her links for good, and once the coordinator
// catches up it arrives with them.
func TestPersonalLinksAfterCoordinatorLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.linkService(linkIdentities, true) // no coordinator records anything yet
	dm := newReceiver(t, nil)
	n := e.start(fmt.Sprintf(`
gateway_url: https://gw.example.test/
sinks:
  ada-dm: {type: slack, url: %s, personal: ada}
routes:
  - {match: "true", sinks: [ada-dm]}
`+fastRetry, dm.URL), nil)
	e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: "confirmation", Approvers: []string{"ada"}})
	require.Eventually(t, func() bool {
		return n.Count("ada-dm", OutcomeRetried)+n.Count("ada-dm", OutcomeDelivered) >= 1
	}, 20*time.Second, 10*time.Millisecond, "the first attempt ends")
	require.Zero(t, n.Count("ada-dm", OutcomeDelivered), "sent without the links of a run not recorded yet")
	co := coordinator.New(e.admin, coordinator.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, co.Start(ctx(t)))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	require.Eventually(t, func() bool { return n.Count("ada-dm", OutcomeDelivered) == 1 }, 20*time.Second, 10*time.Millisecond)
	got := dm.got()
	require.Len(t, got, 1)
	assert.ElementsMatch(t, []string{"int-1 approve ada", "int-1 deny ada"}, linksIn(t, string(got[0].body)))
	assert.Zero(t, n.Count("ada-dm", OutcomeDeadLettered))
}

// No gateway serves the link service (none runs, or none holds a link
// secret): a personal notification goes at once without links, as it
// would on every retry.
func TestPersonalLinksWithoutLinkService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dm := newReceiver(t, nil)
	n := e.start(fmt.Sprintf(`
gateway_url: https://gw.example.test/
sinks:
  ada-dm: {type: slack, url: %s, personal: ada}
routes:
  - {match: "true", sinks: [ada-dm]}
`+fastRetry, dm.URL), nil)
	e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: "confirmation", Approvers: []string{"ada"}})
	require.Eventually(t, func() bool { return n.Count("ada-dm", OutcomeDelivered) == 1 }, 15*time.Second, 10*time.Millisecond)
	assert.Zero(t, n.Count("ada-dm", OutcomeRetried), "no link service to wait for")
	assert.Contains(t, string(dm.got()[0].body), "Open in inbox")
	assert.Empty(t, linksIn(t, string(dm.got()[0].body)))
}
