package slacktest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/interlockhq/interlock/processor/chat/slack"
)

// socketPath is where the fake's Socket Mode WebSocket is served.
const socketPath = "/socket"

// AckDeadline is how long Slack waits for an envelope's ack.
const AckDeadline = 3 * time.Second

// Acked is an acknowledgement the fake received: the envelope's id, the
// payload that came with it (raw JSON; empty: none) and how long after
// the envelope was last sent it came.
type Acked struct {
	EnvelopeID string
	Payload    json.RawMessage
	Delay      time.Duration
}

// socketMode is the fake's Socket Mode side, as Slack publishes it: an
// app-level token opens a connection (apps.connections.open, a URL with a
// one-use ticket); each connection gets hello; an envelope goes out on one
// live connection and is sent again, with retry_attempt counted up, while
// no ack names its envelope_id; disconnect asks the app to open another
// connection before this one closes.
type socketMode struct {
	appToken string
	// redeliver is how long an envelope waits for its ack before it is
	// sent again.
	redeliver time.Duration
	tickets   map[string]bool
	conns     []*socketConn
	next      int
	seq       int
	opened    int
	pending   map[string]*pendingEnvelope
	order     []string
	acks      map[string][]Acked
	drop      int
	stop      chan struct{}
	wg        sync.WaitGroup
}

type socketConn struct {
	c       *websocket.Conn
	leaving bool
}

type pendingEnvelope struct {
	env    slack.Envelope
	sentAt time.Time // zero: not sent yet
	on     *socketConn
}

// EnableSocketMode turns on the fake's Socket Mode for the app-level token
// appToken: an envelope not acknowledged within redeliver is sent again.
func (s *Server) EnableSocketMode(t testing.TB, appToken string, redeliver time.Duration) {
	s.mu.Lock()
	sm := &socketMode{appToken: appToken, redeliver: redeliver, tickets: map[string]bool{},
		pending: map[string]*pendingEnvelope{}, acks: map[string][]Acked{}, stop: make(chan struct{})}
	s.socket = sm
	s.mu.Unlock()
	sm.wg.Add(1)
	go func() {
		defer sm.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sm.stop:
				return
			case <-tick.C:
				s.flush()
			}
		}
	}()
	t.Cleanup(func() {
		close(sm.stop)
		s.mu.Lock()
		conns := sm.conns
		sm.conns = nil
		s.mu.Unlock()
		for _, c := range conns {
			c.c.CloseNow()
		}
		sm.wg.Wait()
	})
}

func (s *Server) openConnection(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sm := s.socket
	if sm == nil || r.Header.Get("Authorization") != "Bearer "+sm.appToken {
		// A bot token is not an app-level token.
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	s.calls = append(s.calls, Call{Method: "apps.connections.open", Body: map[string]any{}})
	if code, ok := s.fail["apps.connections.open"]; ok {
		delete(s.fail, "apps.connections.open")
		answer(w, map[string]any{"ok": false, "error": code})
		return
	}
	sm.opened++
	ticket := fmt.Sprintf("ticket-%d-%d", sm.opened, time.Now().UnixNano())
	sm.tickets[ticket] = true
	answer(w, map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.URL, "http") + socketPath + "?ticket=" + ticket})
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sm := s.socket
	ticket := r.URL.Query().Get("ticket")
	ok := sm != nil && sm.tickets[ticket]
	if ok {
		delete(sm.tickets, ticket) // one use
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "invalid ticket", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	conn := &socketConn{c: c}
	s.mu.Lock()
	select {
	case <-sm.stop:
		s.mu.Unlock()
		c.CloseNow()
		return
	default:
	}
	sm.conns = append(sm.conns, conn)
	n := len(sm.conns)
	s.mu.Unlock()
	hello, _ := json.Marshal(slack.Envelope{Type: slack.EnvelopeHello, NumConnections: n})
	_ = c.Write(r.Context(), websocket.MessageText, hello)
	defer s.dropConn(conn)
	for {
		_, data, err := c.Read(context.Background())
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		if sm.drop > 0 {
			sm.drop-- // lost on the way
			s.mu.Unlock()
			continue
		}
		if p, ok := sm.pending[ack.EnvelopeID]; ok {
			sm.acks[ack.EnvelopeID] = append(sm.acks[ack.EnvelopeID], Acked{EnvelopeID: ack.EnvelopeID,
				Payload: ack.Payload, Delay: time.Since(p.sentAt)})
			delete(sm.pending, ack.EnvelopeID)
		} else {
			sm.acks[ack.EnvelopeID] = append(sm.acks[ack.EnvelopeID], Acked{EnvelopeID: ack.EnvelopeID, Payload: ack.Payload})
		}
		s.mu.Unlock()
	}
}

func (s *Server) dropConn(conn *socketConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sm := s.socket
	for i, c := range sm.conns {
		if c == conn {
			sm.conns = append(sm.conns[:i], sm.conns[i+1:]...)
			break
		}
	}
	for _, p := range sm.pending {
		if p.on == conn {
			p.sentAt, p.on = time.Time{}, nil // send it again on another
		}
	}
	conn.c.CloseNow()
}

// flush sends each envelope not sent yet, and again each one whose ack is
// late, on a live connection (round robin, another than last time where
// there is one).
func (s *Server) flush() {
	type send struct {
		to   *socketConn
		data []byte
	}
	var out []send
	s.mu.Lock()
	sm := s.socket
	for _, id := range sm.order {
		p, ok := sm.pending[id]
		if !ok || (!p.sentAt.IsZero() && time.Since(p.sentAt) < sm.redeliver) {
			continue
		}
		to := sm.pick(p.on)
		if to == nil {
			continue
		}
		if !p.sentAt.IsZero() {
			p.env.RetryAttempt++
			p.env.RetryReason = "timeout"
		}
		p.sentAt, p.on = time.Now(), to
		data, _ := json.Marshal(p.env)
		out = append(out, send{to, data})
	}
	s.mu.Unlock()
	for _, o := range out {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = o.to.c.Write(ctx, websocket.MessageText, o.data)
		cancel()
	}
}

// pick is the next live connection, other than not where there is one.
func (sm *socketMode) pick(not *socketConn) *socketConn {
	var live []*socketConn
	for _, c := range sm.conns {
		if !c.leaving {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return nil
	}
	for range live {
		sm.next++
		if c := live[sm.next%len(live)]; c != not || len(live) == 1 {
			return c
		}
	}
	return live[0]
}

// Deliver sends payload (an interaction: Click, Submit) in an interactive
// envelope on a live connection, as soon as there is one, and again until
// it is acknowledged. It returns the envelope's id.
func (s *Server) Deliver(payload map[string]any) string {
	raw, _ := json.Marshal(payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	sm := s.socket
	sm.seq++
	id := fmt.Sprintf("env-%d-%d", sm.seq, time.Now().UnixNano())
	sm.pending[id] = &pendingEnvelope{env: slack.Envelope{Type: slack.EnvelopeInteractive, EnvelopeID: id,
		Payload: raw, AcceptsResponsePayload: payload["type"] == slack.TypeViewSubmission}}
	sm.order = append(sm.order, id)
	return id
}

// LoseAcks makes the next n acks the fake receives lost on the way: the
// envelopes are sent again.
func (s *Server) LoseAcks(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socket.drop += n
}

// Acks are the acks received for the envelope id.
func (s *Server) Acks(id string) []Acked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Acked(nil), s.socket.acks[id]...)
}

// Sends is how many times the envelope id was sent (1 + redeliveries),
// while it waits for its ack.
func (s *Server) Sends(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.socket.pending[id]; ok {
		if p.sentAt.IsZero() {
			return p.env.RetryAttempt
		}
		return p.env.RetryAttempt + 1
	}
	return -1
}

// Connections is how many connections are open and not asked to leave.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.socket.conns {
		if !c.leaving {
			n++
		}
	}
	return n
}

// Opened is how many connections apps.connections.open has given.
func (s *Server) Opened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.socket.opened
}

// Disconnect asks every open connection to leave (a disconnect envelope,
// reason refresh_requested), sends nothing more on them, and closes them
// after grace, as Slack does when it refreshes its connections.
func (s *Server) Disconnect(grace time.Duration) {
	s.mu.Lock()
	sm := s.socket
	var leaving []*socketConn
	for _, c := range sm.conns {
		if !c.leaving {
			c.leaving = true
			leaving = append(leaving, c)
		}
	}
	s.mu.Unlock()
	msg, _ := json.Marshal(slack.Envelope{Type: slack.EnvelopeDisconnect, Reason: "refresh_requested"})
	for _, c := range leaving {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.c.Write(ctx, websocket.MessageText, msg)
		cancel()
	}
	sm.wg.Add(1)
	go func() {
		defer sm.wg.Done()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-sm.stop:
		}
		for _, c := range leaving {
			_ = c.c.Close(websocket.StatusNormalClosure, "refresh")
		}
	}()
}

// Kill drops every connection at once, with no disconnect envelope (a
// network failure); envelopes waiting for their acks on them are sent
// again on the next.
func (s *Server) Kill() {
	s.mu.Lock()
	conns := append([]*socketConn(nil), s.socket.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		c.c.CloseNow()
	}
}
