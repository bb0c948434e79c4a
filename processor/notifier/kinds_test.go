package notifier

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/subjects"
)

// notice publishes a notice about s as the coordinator would.
func (e *env) notice(s subjects.Suspension, kind Kind, timer string, at time.Time, status subjects.Status) {
	e.t.Helper()
	n := subjects.Notice{PassRef: s.PassRef, Kind: subjects.Kind(kind), Seq: 1, Timer: timer, Interrupts: s.Interrupts, At: at,
		Detail: "deadline " + s.Interrupts[0].ExpiresAt.Format(time.RFC3339), Status: status}
	subject, err := e.admin.Namespace().Notice(subjects.Kind(kind), s.Agent, s.RunID)
	require.NoError(e.t, err)
	data, err := json.Marshal(n)
	require.NoError(e.t, err)
	_, err = e.admin.Publish(ctx(e.t), subject, data, s.RunID+":"+string(kind)+":"+timer, nil)
	require.NoError(e.t, err)
}

// Each kind of notification (new, reminder, escalated, expired) reads
// differently on every sink, and one about a closed interrupt offers no
// way to decide it: no commands, no links, no buttons.
func TestEachKindRendersDifferentlyOnEverySink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.linkService("identities:\n  ada: {links: [ada-dm, mail]}\n", false)
	hook, chat, dm := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	var logLines syncbuf.Buffer
	bus := make(chan []byte, 8)
	sub, err := e.admin.Subscribe("team.notifications", func(_ string, data []byte) { bus <- data })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	e.start(fmt.Sprintf(`
gateway_url: https://gw.example.test
sinks:
  hook: {type: webhook, url: %s}
  chat: {type: slack, url: %s}
  ada-dm: {type: slack, url: %s, personal: ada}
  audit: {type: log}
  bus: {type: nats, subject: team.notifications}
  mail:
    type: email
    smtp: {host: %s, port: %s}
    from: interlock@example.test
    to: [ada@example.test]
    personal: ada
routes:
  - {match: "true", sinks: [hook, chat, ada-dm, audit, bus, mail]}
`, hook.URL, chat.URL, dm.URL, host, port), nil, Options{Sinks: map[string]Sink{"audit": &logSink{w: &logLines}}})

	deadline := time.Date(2030, 1, 2, 12, 52, 0, 0, time.UTC)
	s := e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: "confirmation", Message: "Refund 40 to Ada?",
		Approvers: []string{"ada"}, ExpiresAt: &deadline})
	kinds := []Kind{KindNew, KindReminder, KindEscalated, KindExpired}
	headlines := map[Kind]string{
		KindReminder:  "reminder: 10 minutes left",
		KindEscalated: "escalated: deadline moved to 13:22 UTC, 30 minutes left",
		KindExpired:   "expired: cancelled at 12:52 UTC, nothing to decide",
	}
	// Each step waits for the one before, so every sink sees them in order.
	waitAll := func(n int) {
		hook.waitN(t, n)
		chat.waitN(t, n)
		dm.waitN(t, n)
		require.Eventually(t, func() bool {
			return len(mb.got()) == n && strings.Count(logLines.String(), "\n") == n
		}, 15*time.Second, 10*time.Millisecond)
	}
	waitAll(1)
	e.notice(s, KindReminder, "remind-1", deadline.Add(-10*time.Minute), "")
	waitAll(2)
	escalated := s
	later := deadline.Add(30 * time.Minute)
	escalated.Interrupts = []subjects.Interrupt{s.Interrupts[0]}
	escalated.Interrupts[0].ExpiresAt = &later
	escalated.Interrupts[0].Approvers = []string{"ada", "boss"}
	e.notice(escalated, KindEscalated, "expire-1", deadline, "")
	waitAll(3)
	e.notice(s, KindExpired, "expire-2", deadline, subjects.StatusCancelled)
	waitAll(4)

	natsBodies := make([][]byte, 0, 4)
	for range kinds {
		select {
		case b := <-bus:
			natsBodies = append(natsBodies, b)
		case <-time.After(15 * time.Second):
			t.Fatal("nats sink: missing notification")
		}
	}
	lines := strings.Split(strings.TrimSpace(logLines.String()), "\n")
	seen := map[string]map[string]bool{}
	distinct := func(sink, rendering string) {
		if seen[sink] == nil {
			seen[sink] = map[string]bool{}
		}
		assert.False(t, seen[sink][rendering], "%s renders two kinds alike: %s", sink, rendering)
		seen[sink][rendering] = true
	}
	for i, kind := range kinds {
		closed := kind == KindExpired
		// Webhook and NATS: the same JSON body.
		for sink, raw := range map[string][]byte{"hook": hook.got()[i].body, "bus": natsBodies[i]} {
			var body WebhookBody
			require.NoError(t, json.Unmarshal(raw, &body))
			assert.Equal(t, kind, body.Kind, sink)
			if want, ok := headlines[kind]; ok {
				assert.Equal(t, want, body.Headline, sink)
				require.NotNil(t, body.Notice, sink)
				assert.Equal(t, []string{"", "remind-1", "expire-1", "expire-2"}[i], body.Notice.Timer, sink)
			} else {
				assert.Nil(t, body.Notice, sink)
			}
			var generic struct {
				Decide []map[string]any `json:"decide"`
			}
			require.NoError(t, json.Unmarshal(raw, &generic))
			require.Len(t, generic.Decide, 1)
			for _, field := range []string{"approveCommand", "denyCommand", "inboxUrl"} {
				_, has := generic.Decide[0][field]
				assert.Equal(t, !closed, has, "%s %s: %s", sink, kind, field)
			}
			distinct(sink, body.Headline)
		}
		// Slack, in a channel and in a direct message.
		for sink, raw := range map[string][]byte{"chat": chat.got()[i].body, "ada-dm": dm.got()[i].body} {
			var msg struct {
				Blocks json.RawMessage `json:"blocks"`
			}
			require.NoError(t, json.Unmarshal(raw, &msg))
			blocks := string(msg.Blocks)
			if want, ok := headlines[kind]; ok {
				assert.Contains(t, blocks, want, sink)
			}
			for _, decide := range []string{`"actions"`, "Open in inbox", "interlock approve", "interlock deny", "/inbox#"} {
				assert.Equal(t, !closed, strings.Contains(blocks, decide), "%s %s: %s", sink, kind, decide)
			}
			assert.Equal(t, !closed && sink == "ada-dm", strings.Contains(blocks, "/l/"), "%s %s: a link", sink, kind)
			distinct(sink, blocks)
		}
		// E-mail: subject and both parts.
		m := parseMail(t, mb.got()[i])
		if want, ok := headlines[kind]; ok {
			assert.Contains(t, m.header.Get("Subject"), want)
			assert.Contains(t, m.text(), want)
			assert.Contains(t, m.html(), want)
		}
		for _, part := range []string{m.text(), m.html()} {
			for _, decide := range []string{"interlock approve", "interlock deny", "/inbox#", "/l/"} {
				assert.Equal(t, !closed, strings.Contains(part, decide), "mail %s: %s", kind, decide)
			}
		}
		distinct("mail", m.header.Get("Subject"))
		// The log line.
		var line LogLine
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &line))
		assert.Equal(t, kind, line.Kind)
		distinct("audit", line.Headline)
	}
}

func TestHeadlines(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 12, 42, 0, 0, time.UTC)
	deadline := at.Add(10 * time.Minute)
	s := &subjects.Suspension{PassRef: subjects.PassRef{Agent: "refunds"}, SuspendedAt: at.Add(-20 * time.Minute),
		Interrupts: []subjects.Interrupt{{ID: "a", ExpiresAt: &deadline}, {ID: "b"}}}
	far := at.Add(50 * time.Hour)
	for _, c := range []struct {
		kind   Kind
		notice *NoticeRef
		want   string
	}{
		{KindNew, nil, "refunds is waiting for a decision, 30 minutes left"},
		{KindReminder, &NoticeRef{At: at}, "reminder: 10 minutes left"},
		{KindReminder, &NoticeRef{At: deadline.Add(-time.Minute)}, "reminder: 1 minute left"},
		{KindReminder, &NoticeRef{At: deadline.Add(-30 * time.Second)}, "reminder: 30 seconds left"},
		{KindEscalated, &NoticeRef{At: deadline.Add(-3 * time.Hour)}, "escalated: deadline moved to 12:52 UTC, 3 hours left"},
		{KindExpired, &NoticeRef{At: deadline, Status: subjects.StatusCancelled}, "expired: cancelled at 12:52 UTC, nothing to decide"},
		{KindExpired, &NoticeRef{At: deadline, Status: subjects.StatusResolved},
			"expired: resolved with the agent's default at 12:52 UTC, nothing to decide"},
		{KindExpired, &NoticeRef{At: deadline}, "expired: closed at 12:52 UTC, nothing to decide"},
	} {
		assert.Equal(t, c.want, headline(c.kind, s, c.notice, time.Now()), "%s %+v", c.kind, c.notice)
	}
	s.Interrupts[0].ExpiresAt = &far
	assert.Equal(t, "escalated: deadline moved to 2030-01-04 14:42 UTC, 2 days left",
		headline(KindEscalated, s, &NoticeRef{At: at}, time.Now()))
	assert.Equal(t, "refunds is waiting for a decision", headline(KindNew, &subjects.Suspension{PassRef: subjects.PassRef{Agent: "refunds"}}, nil, time.Now()))
}
