package notifier

import (
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
	"net"
	"net/http"
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
		return &email{cfg: sc.SMTP, from: sc.From, to: sc.To, tls: tlsCfg, timeout: timeout}, nil
	case "log":
		var w io.Writer = os.Stdout
		if sc.Output == "stderr" {
			w = os.Stderr
		}
		return &logSink{w: w}, nil
	case "nats":
		return &natsSink{client: nc, subject: sc.Subject, stored: sc.JetStream}, nil
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
// 5xx are worth retrying; other 4xx are not.
func post(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		// Name the host only: a webhook's path or query is often its secret
		// (a Slack webhook URL is), and this error reaches logs and dead letters.
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("%s %s: %w", ue.Op, req.URL.Host, ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("%s answered %s: %s", req.URL.Host, resp.Status, strings.TrimSpace(string(snippet)))
	if resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return err
	}
	return &permanent{err}
}

// ---- Slack ----

type slack struct {
	url    string
	client *http.Client
}

func mrkdwnEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackMessage builds a Block Kit message.
func slackMessage(n *Notification) map[string]any {
	s := n.Suspension
	blocks := []map[string]any{
		{"type": "header", "text": map[string]any{"type": "plain_text", "text": "Agent " + s.Agent + " is waiting for a decision"}},
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
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}},
			map[string]any{"type": "context", "elements": []map[string]any{
				{"type": "mrkdwn", "text": "Approve: `" + mrkdwnEscape(d.ApproveCommand) + "`"},
				{"type": "mrkdwn", "text": "Deny: `" + mrkdwnEscape(d.DenyCommand) + "`"},
			}})
		var buttons []map[string]any
		for _, l := range d.Links {
			suffix := ""
			if l.Approver != "" {
				suffix = " (" + l.Approver + ")"
			}
			buttons = append(buttons,
				map[string]any{"type": "button", "style": "primary", "url": l.ApproveURL,
					"text": map[string]any{"type": "plain_text", "text": "Approve" + suffix}},
				map[string]any{"type": "button", "style": "danger", "url": l.DenyURL,
					"text": map[string]any{"type": "plain_text", "text": "Deny" + suffix}})
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
	cfg     SMTPConfig
	from    string
	to      []string
	tls     *tls.Config
	timeout time.Duration
}

// message renders a multipart/alternative message with a plain-text and an
// HTML part. Its Message-ID is derived from the idempotency key, so a repeat
// can be recognised by the receiving mail system.
func (e *email) message(n *Notification) []byte {
	const boundary = "interlock-alternative-boundary"
	var b strings.Builder
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", e.from)
	h("To", strings.Join(e.to, ", "))
	h("Subject", mimeHeader(n.Subject))
	h("Date", time.Now().UTC().Format(time.RFC1123Z))
	h("Message-ID", "<"+n.Key+"@interlock>")
	h("MIME-Version", "1.0")
	h("Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
	b.WriteString("\r\n--" + boundary + "\r\n")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n" + crlf(n.Text) + "\r\n--" + boundary + "\r\n")
	h("Content-Type", "text/html; charset=utf-8")
	h("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n" + crlf(n.HTML) + "\r\n--" + boundary + "--\r\n")
	return []byte(b.String())
}

func crlf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

// mimeHeader encodes non-ASCII header text (RFC 2047).
func mimeHeader(s string) string {
	for _, r := range s {
		if r > 126 {
			return "=?utf-8?q?" + strings.NewReplacer("=", "=3D", "?", "=3F", "_", "=5F", " ", "_").Replace(s) + "?="
		}
	}
	return s
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
	if err := c.SendMail(e.from, e.to, strings.NewReader(string(e.message(n)))); err != nil {
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

func (l *logSink) Deliver(_ context.Context, n *Notification) error {
	line, err := json.Marshal(map[string]any{"notification": n.Key, "route": n.Route, "agent": n.Suspension.Agent,
		"runId": n.Suspension.RunID, "subject": n.Subject, "text": n.Text})
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
}

// Deliver publishes the webhook body on the subject: to a stream, waiting
// for its ack and deduplicated by the idempotency key, when the sink is
// configured with jetstream; as a plain core NATS message otherwise.
func (s *natsSink) Deliver(ctx context.Context, n *Notification) error {
	body, err := json.Marshal(WebhookBody{Version: 1, Notification: n})
	if err != nil {
		return &permanent{err}
	}
	if !s.stored {
		return s.client.Notify(s.subject, body)
	}
	_, err = s.client.Publish(ctx, s.subject, body, n.Key, nil)
	return err
}
