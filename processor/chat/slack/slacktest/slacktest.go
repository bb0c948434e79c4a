// Package slacktest is a local fake of the few Slack Web API methods
// Interlock calls (chat.postMessage, chat.update, chat.postEphemeral,
// views.open, conversations.history,
// conversations.replies), of interaction response URLs and of Socket Mode
// (apps.connections.open and its WebSocket: envelopes sent, acks checked,
// unacked envelopes sent again), and a signer of interaction requests,
// for tests without a network.
package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/interlockhq/interlock/processor/chat/slack"
)

// Posted is a message the fake holds, as posted and last updated.
type Posted struct {
	Channel  string
	TS       string
	Thread   string
	Message  slack.Message
	Metadata *slack.MessageMetadata
	Updates  int
}

// Call is one request the fake answered: its method and JSON body.
type Call struct {
	Method string
	Body   map[string]any
}

// Server is the fake Slack.
type Server struct {
	*httptest.Server
	Token string
	mu    sync.Mutex
	seq   int
	msgs  []*Posted
	calls []Call
	// responses holds what was posted to each response URL.
	responses map[string][]slack.Response
	fail      map[string]string
	users     map[string]slack.User
	socket    *socketMode
}

// AddUser makes users.lookupByEmail find user (of team) at email.
func (s *Server) AddUser(email, user, team string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[email] = slack.User{ID: user, TeamID: team}
}

// New starts a fake Slack that accepts token; it stops with the test.
func New(t testing.TB, token string) *Server {
	s := &Server{Token: token, responses: map[string][]slack.Response{}, fail: map[string]string{},
		users: map[string]slack.User{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// APIURL is the base of the fake's Web API.
func (s *Server) APIURL() string { return s.URL + "/api/" }

// ResponseURL is a response URL of the fake, named id.
func (s *Server) ResponseURL(id string) string { return s.URL + "/respond/" + id }

// Fail makes the next call of method answer with the error code.
func (s *Server) Fail(method, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[method] = code
}

func answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case socketPath:
		s.serveSocket(w, r)
		return
	case "/api/apps.connections.open":
		s.openConnection(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := strings.CutPrefix(r.URL.Path, "/respond/"); ok {
		var resp slack.Response
		if err := json.Unmarshal(raw, &resp); err != nil {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		s.responses[id] = append(s.responses[id], resp)
		_, _ = io.WriteString(w, "ok")
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	body := map[string]any{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &body); err != nil {
			answer(w, map[string]any{"ok": false, "error": "invalid_json"})
			return
		}
	} else {
		form, _ := url.ParseQuery(string(raw))
		for k := range form {
			body[k] = form.Get(k)
		}
	}
	s.calls = append(s.calls, Call{Method: method, Body: body})
	if code, ok := s.fail[method]; ok {
		delete(s.fail, method)
		answer(w, map[string]any{"ok": false, "error": code})
		return
	}
	str := func(k string) string { v, _ := body[k].(string); return v }
	switch method {
	case "chat.postMessage":
		s.seq++
		p := &Posted{Channel: str("channel"), Thread: str("thread_ts"), TS: fmt.Sprintf("%d.%06d", time.Now().Unix(), s.seq)}
		p.Message = decodeMessage(body)
		if md, ok := body["metadata"]; ok {
			b, _ := json.Marshal(md)
			p.Metadata = &slack.MessageMetadata{}
			_ = json.Unmarshal(b, p.Metadata)
		}
		s.msgs = append(s.msgs, p)
		answer(w, map[string]any{"ok": true, "channel": p.Channel, "ts": p.TS})
	case "chat.update":
		for _, p := range s.msgs {
			if p.Channel == str("channel") && p.TS == str("ts") {
				p.Message = decodeMessage(body)
				p.Updates++
				answer(w, map[string]any{"ok": true, "channel": p.Channel, "ts": p.TS})
				return
			}
		}
		answer(w, map[string]any{"ok": false, "error": "message_not_found"})
	case "chat.postEphemeral", "views.open":
		answer(w, map[string]any{"ok": true})
	case "conversations.history":
		oldest, _ := strconv.ParseFloat(str("oldest"), 64)
		var out []map[string]any
		for i := len(s.msgs) - 1; i >= 0; i-- {
			p := s.msgs[i]
			ts, _ := strconv.ParseFloat(p.TS, 64)
			if p.Channel != str("channel") || ts < oldest || p.Thread != "" {
				continue
			}
			m := map[string]any{"ts": p.TS, "text": p.Message.Text}
			if p.Metadata != nil {
				m["metadata"] = p.Metadata
			}
			out = append(out, m)
		}
		answer(w, map[string]any{"ok": true, "messages": out})
	case "conversations.replies":
		oldest, _ := strconv.ParseFloat(str("oldest"), 64)
		var out []map[string]any
		for _, p := range s.msgs {
			ts, _ := strconv.ParseFloat(p.TS, 64)
			if p.Channel != str("channel") || ts < oldest || (p.TS != str("ts") && p.Thread != str("ts")) {
				continue
			}
			m := map[string]any{"ts": p.TS, "text": p.Message.Text}
			if p.Thread != "" {
				m["thread_ts"] = p.Thread
			}
			if p.Metadata != nil {
				m["metadata"] = p.Metadata
			}
			out = append(out, m)
		}
		if len(out) == 0 {
			answer(w, map[string]any{"ok": false, "error": "thread_not_found"})
			return
		}
		answer(w, map[string]any{"ok": true, "messages": out})
	case "users.lookupByEmail":
		u, ok := s.users[str("email")]
		if !ok {
			answer(w, map[string]any{"ok": false, "error": "users_not_found"})
			return
		}
		answer(w, map[string]any{"ok": true, "user": u})
	default:
		answer(w, map[string]any{"ok": false, "error": "unknown_method"})
	}
}

func decodeMessage(body map[string]any) slack.Message {
	var m slack.Message
	b, _ := json.Marshal(map[string]any{"text": body["text"], "blocks": body["blocks"]})
	_ = json.Unmarshal(b, &m)
	return m
}

// Messages are the messages posted, in order.
func (s *Server) Messages() []Posted {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Posted, len(s.msgs))
	for i, p := range s.msgs {
		out[i] = *p
	}
	return out
}

// Calls are the Web API calls of method (all, when empty).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Responses are what was posted to the response URL id.
func (s *Server) Responses(id string) []slack.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]slack.Response(nil), s.responses[id]...)
}

// Signer signs interaction requests as Slack does.
type Signer struct {
	Secret []byte
	// Now is the time requests are signed at; zero: time.Now.
	Now func() time.Time
}

// Request is an interaction POSTed to target: payload as the form field
// payload, signed at the signer's time.
func (g Signer) Request(t testing.TB, target string, payload any) *http.Request {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	body := url.Values{"payload": {string(raw)}}.Encode()
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(slack.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(slack.HeaderSignature, slack.Sign(g.Secret, now.Unix(), []byte(body)))
	return req
}

var triggers atomic.Int64

// trigger is a new trigger id for an interaction of user: Slack gives each
// click and submission its own.
func trigger(user string) string {
	return fmt.Sprintf("%d.%s.%d", time.Now().Unix(), user, triggers.Add(1))
}

// Click is a block_actions payload: user of team clicks the button
// actionID whose value is value, on the message channel/ts; Slack's answer
// goes to responseURL.
func Click(team, user, actionID, value, channel, ts, responseURL string) map[string]any {
	return map[string]any{
		"type":         slack.TypeBlockActions,
		"team":         map[string]any{"id": team, "domain": "example"},
		"user":         map[string]any{"id": user, "username": strings.ToLower(user), "team_id": team},
		"api_app_id":   "A0TEST",
		"trigger_id":   trigger(user),
		"response_url": responseURL,
		"container":    map[string]any{"type": "message", "channel_id": channel, "message_ts": ts},
		"channel":      map[string]any{"id": channel},
		"message":      map[string]any{"ts": ts},
		"actions":      []map[string]any{{"action_id": actionID, "block_id": "interlock_decide", "value": value, "type": "button"}},
	}
}

// Submit is a view_submission payload of the "Answer…" modal: values are
// by block id (the schema's property name), each a text input's value or a
// select's option.
func Submit(team, user, metadata string, values map[string]string, selects map[string]string) map[string]any {
	state := map[string]any{}
	for k, v := range values {
		state[k] = map[string]any{"value": map[string]any{"type": "plain_text_input", "value": v}}
	}
	for k, v := range selects {
		state[k] = map[string]any{"value": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": v}}}
	}
	return map[string]any{
		"type":       slack.TypeViewSubmission,
		"trigger_id": trigger(user),
		"team":       map[string]any{"id": team},
		"user":       map[string]any{"id": user, "team_id": team},
		"view": map[string]any{"id": "V1", "type": "modal", "callback_id": slack.CallbackAnswer,
			"private_metadata": metadata, "state": map[string]any{"values": state}},
	}
}
