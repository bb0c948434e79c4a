package notifier

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// testEnv are the secrets the test configurations name by environment
// variable. They are set once for the whole binary, not with t.Setenv,
// which would forbid t.Parallel; no test changes them.
var testEnv = map[string]string{
	"TEST_SMTP_PASSWORD": "secret",
	"OPS_WEBHOOK_SECRET": "ops-secret", // the shipped configs' names
	"SMTP_PASSWORD":      "smtp-secret",
	"TEST_SLACK_TOKEN":   "xoxb-test",
}

func TestMain(m *testing.M) {
	for k, v := range testEnv {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// receiver is a real HTTP server recording what it is sent. fail, when set,
// decides the status of the n-th request (from 1).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
	fail func(n int) int
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, fail func(n int) int) *receiver {
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, received{req.Header.Clone(), body})
		n := len(r.reqs)
		r.mu.Unlock()
		status := http.StatusOK
		if r.fail != nil {
			status = r.fail(n)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "status %d", status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

func (r *receiver) waitN(t *testing.T, n int) []received {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.got()) >= n }, 30*time.Second, 10*time.Millisecond,
		"receiver expected %d requests", n)
	return r.got()
}

// mailbox is a real SMTP server recording messages.
type mailbox struct {
	addr string
	// user and pass, with auth, are the credentials AUTH PLAIN accepts;
	// default user and secret.
	user, pass string
	mu         sync.Mutex
	msgs       []string
	froms      []string // envelope senders, as MAIL FROM gave them
	auth       bool     // require AUTH PLAIN user/secret
	cert       []byte   // the server's certificate (DER), with TLS
}

func (mb *mailbox) NewSession(*smtp.Conn) (smtp.Session, error) { return &mailSession{mb: mb}, nil }

type mailSession struct {
	mb     *mailbox
	authed bool
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.mb.user || pass != s.mb.pass {
			return errors.New("bad credentials")
		}
		s.authed = true
		return nil
	}), nil
}
func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.mb.auth && !s.authed {
		return smtp.ErrAuthRequired
	}
	if err := bareMailbox(from); err != nil {
		return err
	}
	s.mb.mu.Lock()
	s.mb.froms = append(s.mb.froms, from)
	s.mb.mu.Unlock()
	return nil
}
func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error { return bareMailbox(to) }

// bareMailbox refuses what RFC 5321 does not allow in MAIL FROM or RCPT TO:
// anything but a bare local-part@domain (no display name, no brackets).
func bareMailbox(addr string) error {
	if !rfc5321Mailbox.MatchString(addr) {
		return &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 7}, Message: "bad address syntax: " + addr}
	}
	return nil
}

var rfc5321Mailbox = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+/=?^_{|}~.-]+@[A-Za-z0-9.-]+$`)

func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	s.mb.mu.Lock()
	s.mb.msgs = append(s.mb.msgs, string(b))
	s.mb.mu.Unlock()
	return err
}
func (s *mailSession) Reset()        {}
func (s *mailSession) Logout() error { return nil }

func (mb *mailbox) got() []string {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return append([]string(nil), mb.msgs...)
}

func newMailbox(t *testing.T, withTLS, auth bool) *mailbox {
	mb := &mailbox{auth: auth, user: "user", pass: "secret"}
	srv := smtp.NewServer(mb)
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = !withTLS
	if withTLS {
		srv.TLSConfig = selfSigned(t)
		mb.cert = srv.TLSConfig.Certificates[0].Certificate[0]
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mb.addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return mb
}

func selfSigned(t *testing.T) *tls.Config {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

type env struct {
	t      *testing.T
	srv    *embedded.Server
	admin  *jetstream.Client
	runSeq int
}

func newEnv(t *testing.T) *env {
	srv := jstest.Server(t)
	return &env{t: t, srv: srv, admin: jstest.Client(t, srv)}
}

// start runs a notifier on its own connection, as its own process would.
func (e *env) start(yaml string, fault func(string) bool, opts ...Options) *Notifier {
	e.t.Helper()
	cfg, err := ParseConfig("test.yaml", []byte(yaml))
	require.NoError(e.t, err)
	return e.startConfig(cfg, fault, opts...)
}

func (e *env) startConfig(cfg *Config, fault func(string) bool, opts ...Options) *Notifier {
	e.t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n, err := New(jstest.Client(e.t, e.srv), cfg, o)
	require.NoError(e.t, err)
	n.fault = fault
	require.NoError(e.t, n.Start(ctx(e.t)))
	e.t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}

// suspend publishes a suspension as a worker would.
func (e *env) suspend(agent string, interrupts ...subjects.Interrupt) subjects.Suspension {
	e.t.Helper()
	e.runSeq++
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: fmt.Sprintf("run-%d", e.runSeq), Agent: agent},
		Interrupts: interrupts}
	if len(s.Interrupts) == 0 {
		s.Interrupts = []subjects.Interrupt{{ID: "int-1", Reason: subjects.ReasonToolCall, Message: "Refund 40 to Ada?",
			ToolCallID: "call_1", ResponseSchema: json.RawMessage(`{"type":"object"}`), Metadata: json.RawMessage(`{"team":"finance"}`)}}
	}
	subject, err := e.admin.Namespace().Suspended(agent, s.RunID)
	require.NoError(e.t, err)
	data, err := json.Marshal(subjects.Versioned(&s))
	require.NoError(e.t, err)
	_, err = e.admin.Publish(ctx(e.t), subject, data, s.RunID+":0", nil)
	require.NoError(e.t, err)
	return s
}

// failedEvents waits for n notification_failed observations of run (the
// coordinator, which these tests do not run, records them in the trail).
func (e *env) failedEvents(run string, n int) []jetstream.StoredMsg {
	e.t.Helper()
	subject, err := e.admin.Namespace().Observed(run, subjects.EventNotificationFailed)
	require.NoError(e.t, err)
	var evs []jetstream.StoredMsg
	require.Eventually(e.t, func() bool {
		evs, _ = e.admin.Messages(ctx(e.t), jetstream.StreamObserved, subject, 0, 10)
		return len(evs) == n
	}, 15*time.Second, 10*time.Millisecond, "%d notification_failed events", n)
	return evs
}

const fastRetry = `
retry:
  attempts: 3
  backoff: [10ms]
`

func TestFanOutToThreeSinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook, slackRecv := newReceiver(t, nil), newReceiver(t, nil)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	e.start(fmt.Sprintf(`
gateway_url: https://interlock.example.test
nats_url: nats://127.0.0.1:4222
sinks:
  ops:
    type: webhook
    url: %s
    secret: s3cret
    headers: {X-Team: ops}
  chat:
    type: slack
    url: %s
  mail:
    type: email
    smtp: {host: %s, port: %s}
    from: interlock@example.test
    to: [ada@example.test]
routes:
  - name: refunds
    match: agent == "refunds" && any(interrupts, .reason == "tool_call")
    sinks: [ops, chat, mail]
`+fastRetry, hook.URL, slackRecv.URL, host, port), nil)
	s := e.suspend("refunds")

	w := hook.waitN(t, 1)[0]
	assert.Equal(t, "ops", w.header.Get("X-Team"))
	assert.Equal(t, "ops."+s.RunID+".0", w.header.Get(HeaderIdempotencyKey))
	require.NoError(t, VerifySignature([]byte("s3cret"), w.header.Get(HeaderTimestamp), w.header.Get(HeaderSignature),
		w.body, time.Minute, time.Now()))
	var body WebhookBody
	require.NoError(t, json.Unmarshal(w.body, &body))
	assert.Equal(t, s.RunID, body.Suspension.RunID)
	assert.Equal(t, "refunds", body.Route)
	require.Len(t, body.Decide, 1)
	assert.Equal(t, "interlock --nats-url nats://127.0.0.1:4222 approve "+s.RunID+" int-1 --payload '{}'", body.Decide[0].ApproveCommand)
	assert.Contains(t, body.Decide[0].DenyCommand, "deny "+s.RunID+" int-1")
	assert.Equal(t, "https://interlock.example.test/inbox#"+s.RunID+"/int-1", body.Decide[0].InboxURL)
	assert.Contains(t, body.Text, "Refund 40 to Ada?")

	sl := slackRecv.waitN(t, 1)[0]
	var msg struct {
		Text   string           `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	require.NoError(t, json.Unmarshal(sl.body, &msg))
	assert.Contains(t, msg.Text, "refunds is waiting")
	assert.Equal(t, "header", msg.Blocks[0]["type"])
	assert.Contains(t, string(sl.body), "Refund 40 to Ada?")
	assert.Contains(t, string(sl.body), "interlock --nats-url nats://127.0.0.1:4222 approve")
	assert.Contains(t, string(sl.body), `"url":"https://interlock.example.test/inbox#`)

	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	mail := parseMail(t, mb.got()[0])
	assert.Equal(t, "[interlock] refunds is waiting for a decision on run "+s.RunID, mail.header.Get("Subject"))
	assert.Equal(t, "<mail."+s.RunID+".0@interlock>", mail.header.Get("Message-ID"))
	require.Len(t, mail.parts, 2)
	assert.Contains(t, mail.text(), "approve: interlock --nats-url nats://127.0.0.1:4222 approve "+s.RunID)
	assert.Contains(t, mail.html(), "Refund 40 to Ada?")

	// Exactly once each: a later suspension arrives after everything of the
	// first, so by then any repeat would have arrived too.
	s2 := e.suspend("refunds")
	got := hook.waitN(t, 2)
	assert.Len(t, got, 2)
	assert.Contains(t, string(got[1].body), s2.RunID)
	assert.Len(t, slackRecv.waitN(t, 2), 2)
}

func TestRouteThatDoesNotMatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, nil)
	e.start(fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - match: agent == "payments" && "finance" == metadata.team
    sinks: [ops]
`, hook.URL), nil)
	e.suspend("refunds")
	s := e.suspend("payments")
	got := hook.waitN(t, 1)
	require.Len(t, got, 1, "the refunds suspension, earlier in the stream, was not sent")
	assert.Contains(t, string(got[0].body), s.RunID)
}

func TestSinkFailsTwiceThenSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	n := e.start(fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [ops]}
`+fastRetry, hook.URL), nil)
	e.suspend("refunds")
	got := hook.waitN(t, 3)
	keys := map[string]bool{}
	for _, r := range got {
		keys[r.header.Get(HeaderIdempotencyKey)] = true
	}
	assert.Len(t, keys, 1, "the idempotency key is stable across retries")
	require.Eventually(t, func() bool { return n.Count("ops", OutcomeDelivered) == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, float64(2), n.Count("ops", OutcomeRetried))
	// Nothing more is sent for it.
	e.suspend("refunds")
	assert.Len(t, hook.waitN(t, 4), 4)
}

func TestSinkThatAlwaysFailsIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := newReceiver(t, func(int) int { return http.StatusBadGateway })
	fine := newReceiver(t, nil)
	n := e.start(fmt.Sprintf(`
sinks:
  broken: {type: webhook, url: %s}
  fine: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [broken, fine]}
`+fastRetry, broken.URL, fine.URL), nil)
	s := e.suspend("refunds")
	assert.Len(t, fine.waitN(t, 1), 1, "a failing sink does not hold back another")
	broken.waitN(t, 3)

	dlq, _ := e.admin.Namespace().DeadLetter("notifier_broken")
	var msgs []jetstream.StoredMsg
	require.Eventually(t, func() bool {
		msgs, _ = e.admin.Messages(ctx(t), jetstream.StreamDLQ, dlq, 0, 10)
		return len(msgs) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, msgs[0].Header.Get(jetstream.HeaderDLQReason), "502")
	assert.Contains(t, msgs[0].Header.Get(jetstream.HeaderDLQReason), "sink broken")
	assert.Equal(t, "3", msgs[0].Header.Get(jetstream.HeaderDLQDeliveries))

	evs := e.failedEvents(s.RunID, 1)
	var ev subjects.Event
	require.NoError(t, json.Unmarshal(evs[0].Data, &ev))
	assert.Equal(t, "broken", ev.Sink)
	assert.Equal(t, 3, ev.Attempts)
	assert.Contains(t, ev.Detail, "502")
	assert.Equal(t, []string{"int-1"}, ev.InterruptIDs)
	assert.Equal(t, float64(1), n.Count("broken", OutcomeDeadLettered))
	assert.Len(t, broken.got(), 3, "no attempt past the limit")
}

func TestPermanentFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, func(int) int { return http.StatusUnauthorized })
	n := e.start(fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [ops]}
`+fastRetry, hook.URL), nil)
	e.suspend("refunds")
	require.Eventually(t, func() bool { return n.Count("ops", OutcomeDeadLettered) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Len(t, hook.got(), 1)
}

// A notifier killed mid-delivery and restarted: after the sink accepted and
// the delivery was recorded, nothing is sent again; killed between the
// sink's acceptance and the record, the repeat carries the same
// idempotency key, so the receiver can drop it.
func TestNotifierKilledMidDelivery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		point string
		sends int
	}{{"after-record", 1}, {"after-accept", 2}} {
		t.Run(c.point, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hook := newReceiver(t, nil)
			cfg := fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [ops]}
`+fastRetry, hook.URL)
			crash, crashed := fault.Once(c.point)
			e.start(cfg, crash)
			e.suspend("refunds")
			<-crashed
			restarted := e.start(cfg, nil)
			require.Eventually(t, func() bool {
				return restarted.Count("ops", OutcomeDuplicate)+restarted.Count("ops", OutcomeDelivered) == 1
			},
				15*time.Second, 10*time.Millisecond, "the redelivery is handled")
			e.suspend("refunds") // a marker: handled after the redelivery
			got := hook.waitN(t, c.sends+1)
			require.Len(t, got, c.sends+1)
			for _, r := range got[:c.sends] {
				assert.Equal(t, got[0].header.Get(HeaderIdempotencyKey), r.header.Get(HeaderIdempotencyKey))
			}
		})
	}
}

func TestTwoNotifiersShareTheLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, nil)
	cfg := fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - {match: "true", sinks: [ops]}
`, hook.URL)
	// One notification in flight per process, so both must take part.
	slow := func(inner Sink) Sink {
		return SinkFunc(func(ctx context.Context, n *Notification) error {
			time.Sleep(20 * time.Millisecond) // a sink that takes a while
			return inner.Deliver(ctx, n)
		})
	}
	sinkCfg, _ := ParseConfig("x", []byte(cfg))
	real, _ := newSink(sinkCfg.Sinks[0], nil)
	a := e.start(cfg, nil, Options{MaxInFlight: 1, Sinks: map[string]Sink{"ops": slow(real)}})
	b := e.start(cfg, nil, Options{MaxInFlight: 1, Sinks: map[string]Sink{"ops": slow(real)}})
	const total = 20
	for range total {
		e.suspend("refunds")
	}
	got := hook.waitN(t, total)
	require.Eventually(t, func() bool {
		return a.Count("ops", OutcomeDelivered)+b.Count("ops", OutcomeDelivered) == total
	}, 15*time.Second, 10*time.Millisecond)
	keys := map[string]bool{}
	for _, r := range got {
		keys[r.header.Get(HeaderIdempotencyKey)] = true
	}
	assert.Len(t, keys, total, "each delivered once")
	assert.Positive(t, a.Count("ops", OutcomeDelivered))
	assert.Positive(t, b.Count("ops", OutcomeDelivered))
}

func TestSignatureVerification(t *testing.T) {
	t.Parallel()
	secret := []byte("k")
	body := []byte(`{"a":1}`)
	now := time.Unix(1_700_000_000, 0)
	sig := Sign(secret, now.Unix(), body)
	ts := fmt.Sprint(now.Unix())
	require.NoError(t, VerifySignature(secret, ts, sig, body, time.Minute, now))
	assert.ErrorIs(t, VerifySignature(secret, ts, sig, []byte(`{"a":2}`), time.Minute, now), ErrSignature)
	assert.ErrorIs(t, VerifySignature([]byte("other"), ts, sig, body, time.Minute, now), ErrSignature)
	assert.ErrorIs(t, VerifySignature(secret, ts, sig, body, time.Minute, now.Add(time.Hour)), ErrSignature, "replayed later")
	assert.ErrorIs(t, VerifySignature(secret, "yesterday", sig, body, time.Minute, now), ErrSignature)
	// The documented algorithm, spelled out.
	assert.Equal(t, "sha256=", sig[:7])
}

func TestEmailWithStartTLSAndAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mb := newMailbox(t, true, true)
	host, port, _ := net.SplitHostPort(mb.addr)
	e.start(fmt.Sprintf(`
sinks:
  mail:
    type: email
    smtp: {host: %s, port: %s, starttls: true, insecure_skip_verify: true, username: user, password_env: TEST_SMTP_PASSWORD}
    from: interlock@example.test
    to: [ada@example.test, bo@example.test]
routes:
  - {match: "true", sinks: [mail]}
`+fastRetry, host, port), nil)
	s := e.suspend("refunds")
	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	assert.Contains(t, mb.got()[0], s.RunID)
	assert.Contains(t, mb.got()[0], "To: <ada@example.test>, <bo@example.test>")
}

func TestEmailWrongPasswordIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mb := newMailbox(t, false, true)
	host, port, _ := net.SplitHostPort(mb.addr)
	n := e.start(fmt.Sprintf(`
sinks:
  mail:
    type: email
    smtp: {host: %s, port: %s, username: user, password: wrong}
    from: interlock@example.test
    to: [ada@example.test]
routes:
  - {match: "true", sinks: [mail]}
`+fastRetry, host, port), nil)
	e.suspend("refunds")
	require.Eventually(t, func() bool { return n.Count("mail", OutcomeDeadLettered) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Empty(t, mb.got())
}

// The NATS sink's message carries the key in a header as well as in the
// body, and is on the server when the delivery counts.
func TestNATSSink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc, err := nats.Connect(e.srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	got := make(chan *nats.Msg, 1)
	sub, err := nc.Subscribe("team.notifications", func(m *nats.Msg) { got <- m })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())
	e.start(`
sinks:
  bus: {type: nats, subject: team.notifications}
routes:
  - {match: "true", sinks: [bus]}
`, nil)
	s := e.suspend("refunds")
	select {
	case m := <-got:
		require.NoError(t, wireschema.Validate("notification", m.Data))
		var body WebhookBody
		require.NoError(t, json.Unmarshal(m.Data, &body))
		assert.Equal(t, s.RunID, body.Suspension.RunID)
		assert.Equal(t, "bus."+s.RunID+".0", m.Header.Get(HeaderIdempotencyKey))
		assert.Equal(t, body.Key, m.Header.Get(HeaderIdempotencyKey))
		assert.Equal(t, "application/json", m.Header.Get("Content-Type"))
	case <-time.After(15 * time.Second):
		t.Fatal("nothing published")
	}
}

func TestRouteTemplatesOverride(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, nil)
	e.start(fmt.Sprintf(`
sinks:
  ops: {type: webhook, url: %s}
routes:
  - match: "true"
    sinks: [ops]
    templates:
      subject: "needs you: {{.Agent}}"
      text: "{{range .Interrupts}}{{.Message}} -> {{.ApproveCommand}}{{end}}"
`, hook.URL), nil)
	s := e.suspend("refunds")
	var body WebhookBody
	require.NoError(t, json.Unmarshal(hook.waitN(t, 1)[0].body, &body))
	assert.Equal(t, "needs you: refunds", body.Subject)
	assert.Equal(t, "Refund 40 to Ada? -> interlock approve "+s.RunID+" int-1 --payload '{}'", body.Text)
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		yaml, want string
	}{
		"not yaml":       {"sinks: [", "test.yaml:"},
		"empty":          {"", "empty configuration"},
		"unknown top":    {"sink: {}\n", `test.yaml:1: configuration: unknown field "sink"`},
		"no sinks":       {"routes: []\n", "sinks: at least one sink is required"},
		"no routes":      {"sinks:\n  a: {type: log}\n", "routes: at least one route is required"},
		"bad sink type":  {"sinks:\n  a: {type: pager}\nroutes: []\n", `test.yaml:2: sink "a": type "pager" is not webhook`},
		"no type":        {"sinks:\n  a: {url: x}\nroutes: []\n", `test.yaml:2: sink "a": type is required`},
		"bad sink name":  {"sinks:\n  a.b: {type: log}\nroutes: []\n", `test.yaml:2: sink "a.b"`},
		"unknown field":  {"sinks:\n  a:\n    type: webhook\n    url: http://x\n    retries: 3\nroutes: []\n", `test.yaml:5: sink "a": unknown field "retries"`},
		"missing url":    {"sinks:\n  a: {type: webhook}\nroutes: []\n", `test.yaml:2: sink "a": url is required`},
		"bad url":        {"sinks:\n  a: {type: slack, url: ftp://x}\nroutes: []\n", `sink "a": url "ftp://x" is not http`},
		"bad timeout":    {"sinks:\n  a: {type: webhook, url: http://x, timeout: soon}\nroutes: []\n", `test.yaml:2: sink "a": timeout`},
		"email no smtp":  {"sinks:\n  a: {type: email, from: x, to: [y]}\nroutes: []\n", "smtp.host is required"},
		"unset secret":   {"sinks:\n  a: {type: webhook, url: http://x, secret_env: NO_SUCH_VAR_XYZ}\nroutes: []\n", "NO_SUCH_VAR_XYZ is empty or unset"},
		"undefined sink": {"sinks:\n  a: {type: log}\nroutes:\n  - {name: r, match: 'true', sinks: [b]}\n", `test.yaml:4: routes[0] (r): sink "b" is not defined`},
		"bad expression": {"sinks:\n  a: {type: log}\nroutes:\n  - {match: 'agent ==', sinks: [a]}\n", "test.yaml:4: routes[0] (route-0): match:"},
		"non-bool match": {"sinks:\n  a: {type: log}\nroutes:\n  - {match: 'agent', sinks: [a]}\n", "expected bool"},
		"unknown var":    {"sinks:\n  a: {type: log}\nroutes:\n  - {match: 'agnt == \"x\"', sinks: [a]}\n", "unknown name agnt"},
		"bad template":   {"sinks:\n  a: {type: log}\nroutes:\n  - match: 'true'\n    sinks: [a]\n    templates: {text: '{{.Agent'}\n", "templates.text"},
		"bad attempts":   {"retry: {attempts: 0}\nsinks:\n  a: {type: log}\nroutes: []\n", "test.yaml:1: retry.attempts must be at least 1"},
		"no match":       {"sinks:\n  a: {type: log}\nroutes:\n  - {sinks: [a]}\n", "test.yaml:4: routes[0]: match is required"},
		"short ack_wait": {"retry: {ack_wait: 10ms}\nsinks:\n  a: {type: log}\nroutes: []\n", "test.yaml:1: retry.ack_wait must be at least 1s"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig("test.yaml", []byte(c.yaml))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err := LoadConfig("/no/such/file.yaml")
	assert.ErrorIs(t, err, ErrConfig)
	assert.True(t, strings.HasPrefix(err.Error(), "/no/such/file.yaml: "))
}

func TestWebhookCarriesTraceContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hook := newReceiver(t, nil)
	e.start(fmt.Sprintf("sinks:\n  ops: {type: webhook, url: %s}\nroutes:\n  - {match: 'true', sinks: [ops]}\n", hook.URL), nil)
	tp := trace.New()
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "traced", Agent: "a"},
		Interrupts: []subjects.Interrupt{{ID: "i", Reason: "confirmation"}}}
	data, _ := json.Marshal(s)
	subject, _ := e.admin.Namespace().Suspended("a", "traced")
	_, err := e.admin.Publish(ctx(t), subject, data, "traced:0", jetstream.Header{trace.Header: {tp}})
	require.NoError(t, err)
	got := hook.waitN(t, 1)[0].header.Get("traceparent")
	assert.Equal(t, trace.TraceID(tp), trace.TraceID(got))
}

// Three sinks give up on one suspension: three dead letters, one per
// consumer, none lost to deduplication.
func TestEverySinkThatGivesUpHasItsOwnDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := newReceiver(t, func(int) int { return http.StatusBadRequest })
	e.start(fmt.Sprintf(`
sinks:
  a: {type: webhook, url: %[1]s}
  b: {type: webhook, url: %[1]s}
  c: {type: slack, url: %[1]s}
routes:
  - {match: "true", sinks: [a, b, c]}
`+fastRetry, broken.URL), nil)
	s := e.suspend("refunds")
	e.failedEvents(s.RunID, 3)
	msgs, err := e.admin.Messages(ctx(t), jetstream.StreamDLQ, e.admin.Namespace().All(subjects.KindDLQ), 0, 10)
	require.NoError(t, err)
	var consumers []string
	for _, m := range msgs {
		consumers = append(consumers, m.Header.Get(jetstream.HeaderDLQConsumer))
	}
	assert.ElementsMatch(t, []string{"notifier_a", "notifier_b", "notifier_c"}, consumers)
}

// With jetstream: true the NATS sink stores the notification, deduplicated
// by its key (Nats-Msg-Id), with the same headers as a core message.
func TestNATSSinkToAStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc, err := nats.Connect(e.srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	st, err := js.CreateStream(ctx(t), natsjs.StreamConfig{Name: "TEAM", Subjects: []string{"team.stored"}})
	require.NoError(t, err)
	e.start(`
sinks:
  bus: {type: nats, subject: team.stored, jetstream: true}
routes:
  - {match: "true", sinks: [bus]}
`, nil)
	s := e.suspend("refunds")
	var m *natsjs.RawStreamMsg
	require.Eventually(t, func() bool {
		m, err = st.GetMsg(ctx(t), 1)
		return err == nil
	}, 15*time.Second, 10*time.Millisecond)
	require.NoError(t, wireschema.Validate("notification", m.Data))
	assert.Equal(t, "bus."+s.RunID+".0", m.Header.Get(jetstream.HeaderMsgID))
	assert.Equal(t, "bus."+s.RunID+".0", m.Header.Get(HeaderIdempotencyKey))
}
