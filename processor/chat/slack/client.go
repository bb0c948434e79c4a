package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultAPIURL is the Slack Web API's base.
const DefaultAPIURL = "https://slack.com/api/"

// ErrAPI is matched by every error the Web API answers with (an APIError).
var ErrAPI = errors.New("slack web api")

// APIError is a Web API answer that was not ok: its method, its error code
// ("channel_not_found", "ratelimited", ...) and, for 429, when to retry.
type APIError struct {
	Method string
	Code   string
	Status int
	// RetryAfter is Slack's Retry-After on a 429.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("slack %s: %s (HTTP %d)", e.Method, e.Code, e.Status)
}

// Unwrap makes the error match ErrAPI.
func (e *APIError) Unwrap() error { return ErrAPI }

// Temporary reports whether trying again later may succeed: rate limited
// or Slack's side failed.
func (e *APIError) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 || e.Code == "ratelimited" ||
		e.Code == "internal_error" || e.Code == "fatal_error" || e.Code == "service_unavailable" || e.Code == "request_timeout"
}

// Client calls the Web API methods Interlock uses, with a bot token.
type Client struct {
	// Token is the bot token (xoxb-...). Required.
	Token string
	// APIURL is the Web API's base; default DefaultAPIURL (tests point it
	// at a fake).
	APIURL string
	HTTP   *http.Client
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// call posts a JSON body to a Web API method and decodes the answer into
// out (which must have an ok and an error field read by the caller too).
func (c *Client) call(ctx context.Context, method string, body any, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	base := c.APIURL
	if base == "" {
		base = DefaultAPIURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/"+method, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	return c.do(req, method, out)
}

func (c *Client) do(req *http.Request, method string, out any) error {
	resp, err := c.http().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// Name the host only: a response URL is a bearer credential.
			return fmt.Errorf("slack %s: %s %s://%s: %w", method, ue.Op, req.URL.Scheme, req.URL.Host, ue.Err)
		}
		return fmt.Errorf("slack %s: %w", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var status struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		e := &APIError{Method: method, Code: "ratelimited", Status: resp.StatusCode}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return e
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Method: method, Code: strings.TrimSpace(string(raw[:min(len(raw), 200)])), Status: resp.StatusCode}
	}
	if err := json.Unmarshal(raw, &status); err != nil {
		// A response URL answers "ok" in plain text.
		if strings.TrimSpace(string(raw)) == "ok" {
			return nil
		}
		return &APIError{Method: method, Code: "invalid_response", Status: resp.StatusCode}
	}
	if !status.OK {
		return &APIError{Method: method, Code: status.Error, Status: resp.StatusCode}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// Message is a message's content: the fallback text and its blocks.
type Message struct {
	Text   string  `json:"text"`
	Blocks []Block `json:"blocks,omitempty"`
}

// Block is one Block Kit block.
type Block = map[string]any

// Posted says where a message went.
type Posted struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// MessageMetadata is Slack's message metadata: an event type and a payload,
// attached to a message and read back with its history. The notifier marks
// each post with its delivery key, so after a crash it can find whether the
// post happened.
type MessageMetadata struct {
	EventType    string            `json:"event_type"`
	EventPayload map[string]string `json:"event_payload"`
}

// PostMessage is chat.postMessage: m to channel, with metadata (nil:
// none); thread, when set, is the ts of the message to reply under.
func (c *Client) PostMessage(ctx context.Context, channel, thread string, m Message, meta *MessageMetadata) (Posted, error) {
	body := map[string]any{"channel": channel, "text": m.Text, "blocks": m.Blocks, "unfurl_links": false}
	if thread != "" {
		body["thread_ts"] = thread
	}
	if meta != nil {
		body["metadata"] = meta
	}
	var out Posted
	err := c.call(ctx, "chat.postMessage", body, &out)
	return out, err
}

// Update is chat.update: the message at channel and ts becomes m.
func (c *Client) Update(ctx context.Context, channel, ts string, m Message) error {
	return c.call(ctx, "chat.update", map[string]any{"channel": channel, "ts": ts, "text": m.Text, "blocks": m.Blocks}, nil)
}

// PostEphemeral is chat.postEphemeral: text that only user sees, in channel.
func (c *Client) PostEphemeral(ctx context.Context, channel, user, text string) error {
	return c.call(ctx, "chat.postEphemeral", map[string]any{"channel": channel, "user": user, "text": text}, nil)
}

// OpenView is views.open: a modal, for the trigger of a click (valid three
// seconds).
func (c *Client) OpenView(ctx context.Context, triggerID string, view Block) error {
	return c.call(ctx, "views.open", map[string]any{"trigger_id": triggerID, "view": view}, nil)
}

// HistoryMessage is a message as conversations.history returns it.
type HistoryMessage struct {
	TS       string           `json:"ts"`
	Metadata *MessageMetadata `json:"metadata"`
}

// History is conversations.history of channel since oldest (a ts, or Unix
// seconds), with message metadata; up to 200 messages, newest first.
func (c *Client) History(ctx context.Context, channel, oldest string) ([]HistoryMessage, error) {
	var out struct {
		Messages []HistoryMessage `json:"messages"`
	}
	// Read methods take form-encoded arguments, not JSON.
	form := url.Values{"channel": {channel}, "oldest": {oldest}, "include_all_metadata": {"true"}, "limit": {"200"}}
	err := c.callForm(ctx, "conversations.history", form, &out)
	return out.Messages, err
}

// Replies is conversations.replies of the thread whose parent is ts in
// channel, since oldest (a ts, or Unix seconds), with message metadata; up
// to 200 messages, the parent first. Thread replies are not in
// conversations.history: this is where a reply is looked for.
func (c *Client) Replies(ctx context.Context, channel, ts, oldest string) ([]HistoryMessage, error) {
	var out struct {
		Messages []HistoryMessage `json:"messages"`
	}
	form := url.Values{"channel": {channel}, "ts": {ts}, "oldest": {oldest}, "include_all_metadata": {"true"}, "limit": {"200"}}
	err := c.callForm(ctx, "conversations.replies", form, &out)
	return out.Messages, err
}

// User is a Slack user as users.lookupByEmail returns it.
type User struct {
	ID      string `json:"id"`
	TeamID  string `json:"team_id"`
	Deleted bool   `json:"deleted"`
	IsBot   bool   `json:"is_bot"`
}

// LookupByEmail is users.lookupByEmail: the workspace's user with that
// e-mail address (scope users:read.email). Slack answers users_not_found
// for an address nobody has.
func (c *Client) LookupByEmail(ctx context.Context, email string) (User, error) {
	var out struct {
		User User `json:"user"`
	}
	err := c.callForm(ctx, "users.lookupByEmail", url.Values{"email": {email}}, &out)
	return out.User, err
}

// callForm calls a read method, which takes form-encoded arguments.
func (c *Client) callForm(ctx context.Context, method string, form url.Values, out any) error {
	base := c.APIURL
	if base == "" {
		base = DefaultAPIURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/"+method,
		strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	return c.do(req, method, out)
}

// Response is what is posted to an interaction's response_url.
type Response struct {
	// ResponseType "ephemeral" shows the text to the clicking user only.
	ResponseType    string  `json:"response_type,omitempty"`
	Text            string  `json:"text"`
	Blocks          []Block `json:"blocks,omitempty"`
	ReplaceOriginal bool    `json:"replace_original,omitempty"`
}

// Respond posts r to an interaction's response_url (no token: the URL is
// the credential, valid 30 minutes for five uses).
func (c *Client) Respond(ctx context.Context, responseURL string, r Response) error {
	data, _ := json.Marshal(r)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, responseURL, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, "response_url", nil)
}
