package notifier

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/interlockhq/interlock/jetstream"
)

// Sink delivers notifications to one destination. Deliver returns nil only
// once the destination has accepted the notification.
type Sink interface {
	Deliver(ctx context.Context, n *Notification) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, n *Notification) error

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, n *Notification) error { return f(ctx, n) }

func newSink(sc SinkConfig, nc *jetstream.Client) (Sink, error) {
	timeout := sc.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 32 // deliveries run in parallel; keep their connections
	client := &http.Client{Timeout: timeout, Transport: transport}
	switch sc.Type {
	case "webhook":
		return &webhook{url: sc.URL, secret: []byte(sc.Secret), headers: sc.Headers, client: client}, nil
	case "slack":
		if sc.Cards {
			return &slackCards{buttons: sc.Buttons == nil || *sc.Buttons}, nil
		}
		return &slack{url: sc.URL, client: client}, nil
	case "email":
		tlsCfg := &tls.Config{ServerName: sc.SMTP.Host, InsecureSkipVerify: sc.SMTP.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // opt-in, for tests
		if sc.SMTP.CAFile != "" {
			pem, err := os.ReadFile(sc.SMTP.CAFile)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificates", sc.SMTP.CAFile)
			}
			tlsCfg.RootCAs = pool
		}
		return newEmail(sc, tlsCfg, timeout)
	case "log":
		var w io.Writer = os.Stdout
		if sc.Output == "stderr" {
			w = os.Stderr
		}
		return &logSink{w: w}, nil
	case "nats":
		return &natsSink{client: nc, subject: sc.Subject, stored: sc.JetStream, timeout: timeout}, nil
	}
	return nil, fmt.Errorf("unknown sink type %q", sc.Type)
}

// ---- webhook ----

// Webhook headers.
const (
	HeaderSignature      = "X-Interlock-Signature"
	HeaderTimestamp      = "X-Interlock-Timestamp"
	HeaderIdempotencyKey = "Idempotency-Key"
)

type webhook struct {
	url     string
	secret  []byte
	headers map[string]string
	client  *http.Client
}

// Sign returns the X-Interlock-Signature value for body sent at timestamp
// (Unix seconds): "sha256=" and the hex HMAC-SHA256 of "<timestamp>.<body>".
func Sign(secret []byte, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature is what a webhook receiver runs: it checks the signature
// header against the body and refuses timestamps further than maxSkew from
// now, so a captured request cannot be replayed later. The error wraps
// ErrSignature.
func VerifySignature(secret []byte, timestampHeader, signatureHeader string, body []byte, maxSkew time.Duration, now time.Time) error {
	ts, err := strconv.ParseInt(timestampHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrSignature, timestampHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > maxSkew || d < -maxSkew {
		return fmt.Errorf("%w: timestamp is %s away from now", ErrSignature, d.Round(time.Second))
	}
	if !hmac.Equal([]byte(Sign(secret, ts, body)), []byte(signatureHeader)) {
		return fmt.Errorf("%w: signature does not match the body", ErrSignature)
	}
	return nil
}

// WebhookBody is the JSON a webhook sink posts.
type WebhookBody struct {
	Version int `json:"version"`
	*Notification
}

func (w *webhook) Deliver(ctx context.Context, n *Notification) error {
	body, err := json.Marshal(WebhookBody{Version: 1, Notification: n})
	if err != nil {
		return &permanent{err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader(string(body)))
	if err != nil {
		return &permanent{err}
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "interlock-notifier/1")
	req.Header.Set(HeaderIdempotencyKey, n.Key)
	if n.TraceParent != "" {
		req.Header.Set("traceparent", n.TraceParent)
	}
	if len(w.secret) > 0 {
		ts := time.Now().Unix()
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(HeaderSignature, Sign(w.secret, ts, body))
	}
	return post(w.client, req)
}

// post sends req and classifies the answer: 2xx is delivered; 408, 429 and
// 5xx are worth retrying (429 and 503 not before their Retry-After); other
// 4xx are not.
func post(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// A webhook URL's path can be its secret (Slack's are): errors,
			// which reach logs and events, name only the host.
			return fmt.Errorf("%s %s://%s: %w", ue.Op, req.URL.Scheme, req.URL.Host, ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("%s answered %s: %s", req.URL.Host, resp.Status, strings.TrimSpace(string(snippet)))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return &busy{after: after, err: err}
		}
	}
	if resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return err
	}
	return &permanent{err}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// ---- Slack ----

type slack struct {
	url    string
	client *http.Client
}

func mrkdwnEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackTitle is a Slack message's header, by kind.
func slackTitle(n *Notification) string {
	agent := n.Suspension.Agent
	switch n.Kind {
	case KindReminder:
		return "Reminder: agent " + agent + " is still waiting"
	case KindEscalated:
		return "Escalated: agent " + agent + " is still waiting"
	case KindExpired:
		return "Expired: agent " + agent + " no longer waits"
	}
	return "Agent " + agent + " is waiting for a decision"
}

// slackMessage builds a Block Kit message: what the notification is (its
// title and headline), then each question; with the commands and buttons to
// decide only while there is something to decide.
func slackMessage(n *Notification) map[string]any {
	s := n.Suspension
	blocks := []map[string]any{
		{"type": "header", "text": map[string]any{"type": "plain_text", "text": slackTitle(n)}},
		{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*" + mrkdwnEscape(n.Headline) + "*"}},
		{"type": "section", "fields": []map[string]any{
			{"type": "mrkdwn", "text": "*Agent*\n" + mrkdwnEscape(s.Agent)},
			{"type": "mrkdwn", "text": "*Run*\n`" + mrkdwnEscape(s.RunID) + "`"},
		}},
	}
	for _, d := range n.Decide {
		text := "*" + mrkdwnEscape(orDefault(d.Message, "(no message)")) + "*\nreason: " + mrkdwnEscape(d.Reason)
		if d.ToolCallID != "" {
			text += ", tool call `" + mrkdwnEscape(d.ToolCallID) + "`"
		}
		if len(d.Metadata) > 0 {
			text += "\n```" + mrkdwnEscape(string(d.Metadata)) + "```"
		}
		blocks = append(blocks,
			map[string]any{"type": "divider"},
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}})
		if !n.Open() {
			continue
		}
		blocks = append(blocks, map[string]any{"type": "context", "elements": []map[string]any{
			{"type": "mrkdwn", "text": "Approve: `" + mrkdwnEscape(d.ApproveCommand) + "`"},
			{"type": "mrkdwn", "text": "Deny: `" + mrkdwnEscape(d.DenyCommand) + "`"},
		}})
		var buttons []map[string]any
		for _, l := range d.Links {
			buttons = append(buttons,
				map[string]any{"type": "button", "style": "primary", "url": l.ApproveURL,
					"text": map[string]any{"type": "plain_text", "text": "Approve as " + l.Approver}},
				map[string]any{"type": "button", "style": "danger", "url": l.DenyURL,
					"text": map[string]any{"type": "plain_text", "text": "Deny as " + l.Approver}})
		}
		if d.InboxURL != "" {
			buttons = append(buttons, map[string]any{"type": "button", "url": d.InboxURL,
				"text": map[string]any{"type": "plain_text", "text": "Open in inbox"}})
		}
		if len(buttons) > 0 {
			blocks = append(blocks, map[string]any{"type": "actions", "elements": buttons})
		}
	}
	return map[string]any{"text": n.Subject, "blocks": blocks}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (s *slack) Deliver(ctx context.Context, n *Notification) error {
	body, err := json.Marshal(slackMessage(n))
	if err != nil {
		return &permanent{err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(string(body)))
	if err != nil {
		return &permanent{err}
	}
	req.Header.Set("Content-Type", "application/json")
	return post(s.client, req)
}

// ---- e-mail ----

type email struct {
	cfg SMTPConfig
	// from and to are parsed: the envelope (MAIL FROM, RCPT TO) carries
	// the bare addresses, the headers the display names as well.
	from    *mail.Address
	to      []*mail.Address
	tls     *tls.Config
	timeout time.Duration
}

func newEmail(sc SinkConfig, tlsCfg *tls.Config, timeout time.Duration) (*email, error) {
	e := &email{cfg: sc.SMTP, tls: tlsCfg, timeout: timeout}
	var err error
	if e.from, err = mail.ParseAddress(sc.From); err != nil {
		return nil, fmt.Errorf("from %q: %w", sc.From, err)
	}
	for _, s := range sc.To {
		a, err := mail.ParseAddress(s)
		if err != nil {
			return nil, fmt.Errorf("to %q: %w", s, err)
		}
		e.to = append(e.to, a)
	}
	return e, nil
}

// message renders a multipart/alternative message with a plain-text and an
// HTML part, quoted-printable, under a random boundary (so no text in the
// notification can close a part). Its Message-ID is derived from the
// idempotency key, so a repeat can be recognised by the receiving mail
// system.
func (e *email) message(n *Notification) ([]byte, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range []struct{ contentType, text string }{
		{"text/plain; charset=utf-8", n.Text}, {"text/html; charset=utf-8", n.HTML},
	} {
		w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {p.contentType},
			"Content-Transfer-Encoding": {"quoted-printable"}})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(w)
		if _, err := qp.Write([]byte(crlf(p.text))); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", e.from.String())
	to := make([]string, len(e.to))
	for i, a := range e.to {
		to[i] = a.String()
	}
	h("To", strings.Join(to, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", n.Subject))
	h("Date", time.Now().UTC().Format(time.RFC1123Z))
	h("Message-ID", "<"+n.Key+"@interlock>")
	h("MIME-Version", "1.0")
	h("Content-Type", mime.FormatMediaType("multipart/alternative", map[string]string{"boundary": mw.Boundary()}))
	b.WriteString("\r\n")
	b.Write(body.Bytes())
	return b.Bytes(), nil
}

func crlf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

func (e *email) Deliver(ctx context.Context, n *Notification) error {
	addr := net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.Port))
	d := net.Dialer{Timeout: e.timeout}
	var conn net.Conn
	var err error
	if e.cfg.TLS {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: e.tls}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	} else {
		_ = conn.SetDeadline(time.Now().Add(e.timeout))
	}
	var c *smtp.Client
	if e.cfg.StartTLS {
		if c, err = smtp.NewClientStartTLS(conn, e.tls); err != nil {
			conn.Close()
			return fmt.Errorf("STARTTLS with %s: %w", addr, err)
		}
	} else {
		c = smtp.NewClient(conn)
	}
	defer c.Close()
	if e.cfg.Username != "" {
		if err := c.Auth(sasl.NewPlainClient("", e.cfg.Username, e.cfg.Password)); err != nil {
			return smtpErr(err)
		}
	}
	msg, err := e.message(n)
	if err != nil {
		return &permanent{err}
	}
	to := make([]string, len(e.to))
	for i, a := range e.to {
		to[i] = a.Address
	}
	if err := c.SendMail(e.from.Address, to, bytes.NewReader(msg)); err != nil {
		return smtpErr(err)
	}
	return c.Quit()
}

// smtpErr marks 5xx answers (bad address, refused auth) permanent.
func smtpErr(err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 {
		return &permanent{err}
	}
	return err
}

// ---- log and NATS ----

type logSink struct{ w io.Writer }

// LogLine is the JSON line a log sink writes per notification. It carries
// no links: a log is a shared channel.
type LogLine struct {
	Version      int      `json:"version"`
	Key          string   `json:"notification"`
	Sink         string   `json:"sink"`
	Route        string   `json:"route"`
	Kind         Kind     `json:"kind"`
	Headline     string   `json:"headline"`
	Agent        string   `json:"agent"`
	RunID        string   `json:"runId"`
	Pass         int      `json:"pass"`
	InterruptIDs []string `json:"interruptIds"`
	Subject      string   `json:"subject"`
	Text         string   `json:"text"`
}

func (l *logSink) Deliver(_ context.Context, n *Notification) error {
	ll := LogLine{Version: 1, Key: n.Key, Sink: n.Sink, Route: n.Route, Kind: n.Kind, Headline: n.Headline,
		Agent: n.Suspension.Agent, RunID: n.Suspension.RunID, Pass: n.Suspension.Pass, InterruptIDs: []string{},
		Subject: n.Subject, Text: n.Text}
	for _, in := range n.Suspension.Interrupts {
		ll.InterruptIDs = append(ll.InterruptIDs, in.ID)
	}
	line, err := json.Marshal(ll)
	if err != nil {
		return &permanent{err}
	}
	_, err = l.w.Write(append(line, '\n'))
	return err
}

type natsSink struct {
	client  *jetstream.Client
	subject string
	stored  bool
	timeout time.Duration
}

// Deliver publishes the webhook body on the subject, with the webhook's
// Content-Type, Idempotency-Key and traceparent headers: to a stream,
// waiting for its ack and deduplicated by the idempotency key, when the sink
// is configured with jetstream; as a core NATS message otherwise, once the
// server has it.
func (s *natsSink) Deliver(ctx context.Context, n *Notification) error {
	body, err := json.Marshal(WebhookBody{Version: 1, Notification: n})
	if err != nil {
		return &permanent{err}
	}
	h := jetstream.Header{"Content-Type": {"application/json"}, HeaderIdempotencyKey: {n.Key}}
	if n.TraceParent != "" {
		h["traceparent"] = []string{n.TraceParent}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if !s.stored {
		return s.client.NotifyMsg(ctx, s.subject, body, h)
	}
	_, err = s.client.Publish(ctx, s.subject, body, n.Key, h)
	return err
}
