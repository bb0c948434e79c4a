package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Socket Mode envelope types.
const (
	EnvelopeHello       = "hello"
	EnvelopeDisconnect  = "disconnect"
	EnvelopeInteractive = "interactive"
	// DisconnectLinkDisabled is the reason of a disconnect when Socket
	// Mode is turned off in the app's settings.
	DisconnectLinkDisabled = "link_disabled"
)

// ErrSocket is matched by every error of a Socket Mode connection (opening
// it, dialing, reading an envelope).
var ErrSocket = errors.New("slack socket mode")

// Envelope is one message Slack sends over a Socket Mode connection:
// hello, disconnect, or a payload (interactive, events_api,
// slash_commands) to acknowledge by its EnvelopeID.
type Envelope struct {
	Type       string `json:"type"`
	EnvelopeID string `json:"envelope_id,omitempty"`
	// Payload is the interaction (for interactive envelopes), as the
	// HTTP endpoint's payload form field carries it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// AcceptsResponsePayload says Slack reads a payload in the ack (a
	// view_submission's response_action).
	AcceptsResponsePayload bool   `json:"accepts_response_payload,omitempty"`
	RetryAttempt           int    `json:"retry_attempt,omitempty"`
	RetryReason            string `json:"retry_reason,omitempty"`
	// Reason is why Slack asks to disconnect (refresh_requested,
	// warning, link_disabled).
	Reason string `json:"reason,omitempty"`
	// NumConnections is, on hello, how many connections the app has open.
	NumConnections int `json:"num_connections,omitempty"`
}

// Ack is the acknowledgement of an envelope: its id and, where Slack reads
// one, a response payload.
type Ack struct {
	EnvelopeID string `json:"envelope_id"`
	Payload    any    `json:"payload,omitempty"`
}

// OpenConnection is apps.connections.open: the WebSocket URL of a new
// Socket Mode connection, with c.Token the app-level token (xapp-..., scope
// connections:write). The URL carries a one-use ticket: a credential, not
// to be logged.
func (c *Client) OpenConnection(ctx context.Context) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	if err := c.callForm(ctx, "apps.connections.open", url.Values{}, &out); err != nil {
		return "", err
	}
	if out.URL == "" {
		return "", &APIError{Method: "apps.connections.open", Code: "no_url", Status: http.StatusOK}
	}
	return out.URL, nil
}

// Socket runs Socket Mode connections: each opened with
// apps.connections.open and the app-level token, read envelope by
// envelope; each envelope with an id is handed to Handle and acknowledged
// with what Handle returns. On a disconnect envelope a new connection is
// opened and the old one is read until Slack closes it (or DrainTimeout),
// so an envelope sent on it still counts; a failed connection is opened
// again with exponential backoff.
type Socket struct {
	// AppToken is the app-level token (xapp-...). Required.
	AppToken string
	// APIURL is the Web API's base; default DefaultAPIURL. The WebSocket
	// URL Slack returns must be wss://, or ws:// when APIURL is http://
	// (a local fake).
	APIURL string
	// Connections is how many connections are kept open (Slack delivers
	// each envelope on any one of them); default 2, at most 10.
	Connections int
	// Handle handles an envelope and returns the payload of its ack (nil:
	// none). It must return within Slack's three seconds; work that takes
	// longer goes on after it returns. An error leaves the envelope
	// unacknowledged: Slack sends it again.
	Handle func(ctx context.Context, env Envelope) (any, error)
	// MinBackoff and MaxBackoff bound the wait before opening a
	// connection again after a failure; defaults 1s and 30s.
	MinBackoff, MaxBackoff time.Duration
	// DrainTimeout bounds how long a connection Slack asked to leave is
	// still read; default 15s.
	DrainTimeout time.Duration
	Logger       *slog.Logger
	HTTP         *http.Client

	wg sync.WaitGroup
}

// maxConnections is the most Socket Mode connections Slack allows an app.
const maxConnections = 10

// Check reports what is wrong with the configuration, if anything.
func (s *Socket) Check() error {
	switch {
	case !strings.HasPrefix(s.AppToken, "xapp-"):
		return fmt.Errorf("%w: the app-level token must be an xapp- token", ErrSocket)
	case s.Connections < 0 || s.Connections > maxConnections:
		return fmt.Errorf("%w: %d connections: between 1 and %d", ErrSocket, s.Connections, maxConnections)
	case s.Handle == nil:
		return fmt.Errorf("%w: no handler", ErrSocket)
	}
	return nil
}

// Run keeps the connections open until ctx ends, then closes them and
// returns once every connection and every Handle call it started has
// returned. Call it once per Socket.
func (s *Socket) Run(ctx context.Context) error {
	if err := s.Check(); err != nil {
		return err
	}
	n := s.Connections
	if n == 0 {
		n = 2
	}
	for i := range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.keep(ctx, i)
		}()
	}
	s.wg.Wait()
	return nil
}

func (s *Socket) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// keep keeps connection slot i open until ctx ends.
func (s *Socket) keep(ctx context.Context, i int) {
	minB, maxB := s.MinBackoff, s.MaxBackoff
	if minB <= 0 {
		minB = time.Second
	}
	if maxB < minB {
		maxB = max(30*time.Second, minB)
	}
	wait := minB
	for ctx.Err() == nil {
		conn, err := s.connect(ctx)
		if err == nil {
			wait = minB
			err = s.serve(ctx, conn)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue // Slack asked for a new connection: open it now
		}
		s.logger().Warn("slack socket mode connection failed; opening again", "connection", i, "in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, maxB)
	}
}

// connect opens a connection: apps.connections.open, then the WebSocket.
func (s *Socket) connect(ctx context.Context) (*websocket.Conn, error) {
	client := &Client{Token: s.AppToken, APIURL: s.APIURL, HTTP: s.HTTP}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := client.OpenConnection(octx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSocket, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: apps.connections.open returned no URL", ErrSocket)
	}
	local := strings.HasPrefix(s.APIURL, "http://")
	if u.Scheme != "wss" && (u.Scheme != "ws" || !local) {
		return nil, fmt.Errorf("%w: apps.connections.open returned a %s:// URL, not wss://", ErrSocket, u.Scheme)
	}
	conn, _, err := websocket.Dial(octx, raw, &websocket.DialOptions{HTTPClient: s.HTTP})
	if err != nil {
		// The URL's ticket is a credential: name the host alone.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: dialing %s: %s", ErrSocket, u.Host, strings.ReplaceAll(err.Error(), raw, u.Host))
	}
	conn.SetReadLimit(1 << 20)
	return conn, nil
}

// serve reads conn until it fails (the error) or Slack asks to disconnect
// (nil: the old connection is drained in the background).
func (s *Socket) serve(ctx context.Context, conn *websocket.Conn) error {
	for {
		env, err := s.read(ctx, conn)
		if err != nil {
			conn.CloseNow()
			return err
		}
		if env.Type == EnvelopeDisconnect && env.Reason == DisconnectLinkDisabled {
			// Socket Mode was turned off for the app: ask again with backoff,
			// not at once.
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return fmt.Errorf("%w: Slack turned Socket Mode off for the app (link_disabled)", ErrSocket)
		}
		if env.Type == EnvelopeDisconnect {
			s.logger().Info("slack socket mode: Slack asked for a new connection", "reason", env.Reason)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.drain(ctx, conn)
			}()
			return nil
		}
		s.dispatch(ctx, conn, env)
	}
}

// drain reads a connection Slack asked to leave until Slack closes it, ctx
// ends or DrainTimeout passes, handling what still comes on it.
func (s *Socket) drain(ctx context.Context, conn *websocket.Conn) {
	d := s.DrainTimeout
	if d <= 0 {
		d = 15 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		env, err := s.read(dctx, conn)
		if err != nil {
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return
		}
		if env.Type != EnvelopeDisconnect {
			s.dispatch(ctx, conn, env)
		}
	}
}

// read reads one envelope; when ctx ends the connection is closed.
func (s *Socket) read(ctx context.Context, conn *websocket.Conn) (Envelope, error) {
	typ, data, err := conn.Read(ctx)
	if err != nil {
		if ctx.Err() != nil {
			_ = conn.Close(websocket.StatusNormalClosure, "")
		}
		return Envelope{}, fmt.Errorf("%w: reading: %w", ErrSocket, err)
	}
	var env Envelope
	if typ != websocket.MessageText || json.Unmarshal(data, &env) != nil {
		s.logger().Warn("slack socket mode: a message that is not an envelope; ignored")
		return Envelope{Type: "unreadable"}, nil
	}
	return env, nil
}

// dispatch hands an envelope with an id to Handle, in its own goroutine
// (one slow envelope holds up no other), and acknowledges it.
func (s *Socket) dispatch(ctx context.Context, conn *websocket.Conn, env Envelope) {
	if env.EnvelopeID == "" {
		return // hello, or nothing to acknowledge
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ack := Ack{EnvelopeID: env.EnvelopeID}
		p, err := s.Handle(ctx, env)
		if err != nil {
			s.logger().Warn("slack socket mode: envelope not handled; Slack sends it again", "envelope", env.EnvelopeID, "error", err)
			return
		}
		if p != nil && env.AcceptsResponsePayload {
			ack.Payload = p
		}
		data, _ := json.Marshal(ack)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		if err := conn.Write(wctx, websocket.MessageText, data); err != nil {
			// Slack sends it again, on this connection or another.
			s.logger().Warn("slack socket mode: ack not sent", "envelope", env.EnvelopeID, "error", err)
		}
	}()
}
