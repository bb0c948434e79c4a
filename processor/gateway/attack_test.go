package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// The attacks of docs/security.md, "Gateway, reads and schemas", each tried
// against a real gateway on a real JetStream server.

// refusals waits for n access_refused events with code on run's trail and
// returns them.
func (e *env) refusals(run string, code subjects.Code, n int) []subjects.Event {
	e.t.Helper()
	var got []subjects.Event
	require.Eventually(e.t, func() bool {
		evs, err := e.client.Events(context.Background(), run)
		require.NoError(e.t, err)
		got = got[:0]
		for _, ev := range evs {
			if ev.Type == subjects.EventAccessRefused && ev.Code == code {
				got = append(got, ev)
			}
		}
		return len(got) >= n
	}, 10*time.Second, 20*time.Millisecond, "%d access_refused %s on %s", n, code, run)
	for _, ev := range got {
		data, _ := json.Marshal(ev)
		assert.NoError(e.t, wireschema.Validate("event", data), "the event matches docs/schema")
	}
	return got
}

func (e *env) do(req *http.Request) (*http.Response, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// Attack: bob reads ada's run, its history, its interrupt in the listing
// and its events on the live stream. All refused (403 not_allowed, audited)
// or filtered; an auditor sees everything.
func TestAttackReadAnotherApproversRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	adaStream := e.openStream("ada-token")
	bobStream := e.openStream("bob-token")
	erinStream := e.openStream("erin-token")
	adaRun, _ := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "for ada"})
	adaStream.waitFor(adaRun)
	erinStream.waitFor(adaRun) // the auditor's stream has every event

	for _, path := range []string{"/v1/runs/" + adaRun, "/v1/runs/" + adaRun + "/history"} {
		status, out := e.call("GET", path, "bob-token", nil)
		assert.Equal(t, http.StatusForbidden, status, path)
		assert.Equal(t, string(subjects.CodeNotAllowed), out["code"], path)
		assert.NotContains(t, out["message"], "for ada")
		status, _ = e.call("GET", path, "ada-token", nil)
		assert.Equal(t, http.StatusOK, status, path)
		status, _ = e.call("GET", path, "erin-token", nil)
		assert.Equal(t, http.StatusOK, status, "an auditor reads %s", path)
	}
	refused := e.refusals(adaRun, subjects.CodeNotAllowed, 2)
	assert.Equal(t, "bob", refused[0].Identity)

	_, out := e.call("GET", "/v1/interrupts", "bob-token", nil)
	assert.Empty(t, out["interrupts"], "bob's listing leaves out what he may not decide")
	_, out = e.call("GET", "/v1/interrupts?approver=ada", "bob-token", nil)
	assert.Empty(t, out["interrupts"], "nor can he ask for ada's view")

	// bob's stream: the next event he may read is an open run's; ada's
	// run's events, published before it, never reached him.
	openRun, _ := e.suspend(map[string]any{"Message": "for anyone"})
	seen := bobStream.waitFor(openRun)
	assert.NotContains(t, seen, adaRun)
}

// waitWithin is waitFor bounded by d: the test fails rather than hang.
func (s *sse) waitWithin(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		var read strings.Builder
		for s.lines.Scan() {
			read.WriteString(s.lines.Text() + "\n")
			if strings.Contains(s.lines.Text(), want) {
				break
			}
		}
		got <- read.String()
	}()
	select {
	case r := <-got:
		require.Contains(t, r, want)
		return r
	case <-time.After(d):
		t.Fatalf("no %q on the stream within %s", want, d)
		return ""
	}
}

type sse struct {
	t     *testing.T
	lines *bufio.Scanner
}

// openStream opens /v1/stream as token and waits for it to be connected.
func (e *env) openStream(token string) *sse {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	e.t.Cleanup(func() { cancel(); resp.Body.Close() })
	s := &sse{t: e.t, lines: bufio.NewScanner(resp.Body)}
	s.waitFor(": connected")
	return s
}

// waitFor reads until a line containing want, returning what it read.
func (s *sse) waitFor(want string) string {
	s.t.Helper()
	var read strings.Builder
	for s.lines.Scan() {
		read.WriteString(s.lines.Text() + "\n")
		if strings.Contains(s.lines.Text(), want) {
			return read.String()
		}
	}
	s.t.Fatalf("stream ended before %q: %s", want, read.String())
	return ""
}

// Attack: the answer to a question that asks for a credential is read back
// from the run record by the approver, an auditor, and in the history.
func TestAttackReadSensitiveAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Reason": subjects.ReasonInputRequired,
		"Message": "Your PIN?", "Quiet": true})
	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","payload":"pin-8642","comment":"it is pin-8642"}`))
	require.Equal(t, http.StatusOK, status, out)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	for _, token := range []string{"ada-token", "erin-token"} {
		for _, path := range []string{"/v1/runs/" + run, "/v1/runs/" + run + "/history"} {
			req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, body := e.do(req)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			assert.NotContains(t, body, "pin-8642", "%s reading %s", token, path)
		}
	}
	status, out = e.call("GET", "/v1/runs/"+run, "erin-token", nil)
	require.Equal(t, http.StatusOK, status)
	in := out["run"].(map[string]any)["interrupts"].([]any)[0].(map[string]any)
	assert.Equal(t, true, in["answerWithheld"])
	assert.Equal(t, "resolved", in["decision"].(map[string]any)["status"], "that it was answered is shown")
}

// Attack: login CSRF. A cross-site page posts the attacker's token to
// /inbox/login (a text/plain form needs no preflight), or a cookie-carrying
// decision. Refused with cross_origin, audited, no session made.
func TestAttackCrossSiteLoginAndDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}})
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Content-Type": "text/plain"},
		{"Origin": "https://evil.example", "Content-Type": "text/plain"},
		{"Content-Type": "text/plain"}, // no Origin, but no inbox header either
	} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/inbox/login", strings.NewReader(`{"token":"bob-token"}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, body := e.do(req)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%v: %s", h, body)
		assert.Contains(t, body, subjects.CodeCrossOrigin)
		assert.Empty(t, resp.Cookies(), "no session")
	}
	cookie := e.login("ada-token")
	req, _ := http.NewRequest("POST", e.srv.URL+decisionPath(run, id), strings.NewReader(`{"status":"resolved"}`))
	req.AddCookie(cookie)
	req.Header.Set("X-Interlock-Request", "1")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, body := e.do(req)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, body)
	e.refusals(subjects.NoRun, subjects.CodeCrossOrigin, 4)
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status, "nothing changed")
}

// login logs in from the inbox page and returns the session cookie.
func (e *env) login(token string) *http.Cookie {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+"/inbox/login", strings.NewReader(`{"token":"`+token+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Interlock-Request", "1")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, body := e.do(req)
	require.Equal(e.t, http.StatusOK, resp.StatusCode, body)
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	e.t.Fatal("no session cookie")
	return nil
}

// Attack: the session cookie is stolen from a log or a plain-HTTP hop. It
// used to be the API token itself, never Secure. Now it is a random id, and
// a cookie holding a token is no session.
func TestAttackSessionCookieIsNotTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.login("ada-token")
	assert.NotContains(t, c.Value, "ada-token")
	assert.GreaterOrEqual(t, len(c.Value), 43, "256 random bits")
	assert.True(t, c.Secure, "Secure")
	assert.True(t, c.HttpOnly, "HttpOnly")
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)

	get := func(value string) int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/interrupts", nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: value})
		resp, _ := e.do(req)
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get(c.Value), "the session works")
	assert.Equal(t, http.StatusUnauthorized, get("ada-token"), "a token in the cookie is no session")
	assert.Equal(t, http.StatusUnauthorized, get(c.Value+"x"))
	e.refusals(subjects.NoRun, subjects.CodeUnauthenticated, 2)
}

// Attack: a page frames the inbox or a link page (clickjacking). Every
// response forbids framing and loading from elsewhere.
func TestAttackFramingAndContentPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/inbox", "/l/not-a-link", "/healthz", "/v1/interrupts", "/nope"} {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		resp, _ := e.do(req)
		csp := resp.Header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "frame-ancestors 'none'", path)
		assert.Contains(t, csp, "default-src", path)
		assert.NotContains(t, csp, "script-src 'unsafe-inline'", path, "no inline script runs: an injected one neither")
		assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
	}
}

// Attack: slowloris. A client sends a body a byte at a time, or holds an
// idle connection open. The gateway cuts both off.
func TestAttackSlowBodyAndIdleConnection(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *Config) { c.ReadTimeout, c.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond })
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	closedWithin := func(conn net.Conn) {
		t.Helper()
		// The server must close the connection long before this deadline.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the gateway kept the connection open: %v", err)
	}
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "POST /v1/runs/r/interrupts/i/decision HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ada-token\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"status\"")
	require.NoError(t, err)
	closedWithin(slow)

	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	require.NoError(t, err)
	resp.Body.Close()
	closedWithin(idle)
}

// Attack: guessing tokens and links, and probing decisions. Failed logins
// and bad links count per address, refused decisions per identity and per
// address; past the budget the caller is refused (429 rate_limited, audited
// once) even with a good token.
func TestAttackBruteForce(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *Config) {
		c.LoginFailures = Limit{Burst: 3, Every: time.Hour}
	})
	for i := range 3 {
		status, out := e.call("GET", "/v1/interrupts", "guess-"+string(rune('a'+i)), nil)
		require.Equal(t, http.StatusUnauthorized, status, out)
	}
	status, out := e.call("GET", "/v1/interrupts", "ada-token", nil)
	assert.Equal(t, http.StatusTooManyRequests, status, "the address is out of failures, whatever token it sends")
	assert.Equal(t, string(subjects.CodeRateLimited), out["code"])
	status, _ = e.call("GET", "/v1/interrupts", "ada-token", nil)
	assert.Equal(t, http.StatusTooManyRequests, status)
	req, _ := http.NewRequest("GET", e.srv.URL+"/l/forged.link", nil)
	resp, _ := e.do(req)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "links too")
	e.refusals(subjects.NoRun, subjects.CodeUnauthenticated, 3)
	assert.Len(t, e.refusals(subjects.NoRun, subjects.CodeRateLimited, 1), 1, "one audit event per blocking episode")
}

func TestAttackProbingDecisions(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *Config) { c.DecisionRefusals = Limit{Burst: 2, Every: time.Hour} })
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}})
	for range 2 {
		status, _ := e.call("POST", decisionPath(run, id), "bob-token", []byte(`{"status":"resolved"}`))
		require.Equal(t, http.StatusForbidden, status)
	}
	status, out := e.call("POST", decisionPath(run, id), "bob-token", []byte(`{"status":"resolved"}`))
	assert.Equal(t, http.StatusTooManyRequests, status, out)
	assert.Equal(t, string(subjects.CodeRateLimited), out["code"])
	e.refusals(subjects.NoRun, subjects.CodeRateLimited, 1)
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status, "nothing changed")
	status, _ = e.call("GET", "/v1/runs/"+run, "bob-token", nil)
	assert.Equal(t, http.StatusTooManyRequests, status, "nor may bob go on probing reads")
}

// Attack: tampered, expired and reused links leave a trace in the audit
// trail (they used to leave none).
func TestAttackRefusedLinksAreAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}})
	get := func(token string) int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/l/"+token, nil)
		resp, _ := e.do(req)
		return resp.StatusCode
	}
	good := e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "ada", Sink: "ada-mail",
		Expires: time.Now().Add(time.Hour).Unix()})
	assert.Equal(t, http.StatusBadRequest, get(good[:len(good)-2]+"xx"))
	expired := e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "ada", Sink: "ada-mail",
		Expires: time.Now().Add(-time.Minute).Unix()})
	assert.Equal(t, http.StatusGone, get(expired))
	req, _ := http.NewRequest("POST", e.srv.URL+"/l/"+good, strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body := e.do(req)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, http.StatusConflict, get(good))

	invalid := e.refusals(subjects.NoRun, subjects.CodeLinkInvalid, 1)
	assert.NotContains(t, invalid[0].Request, good[:20], "the audit trail holds no link")
	e.refusals(run, subjects.CodeLinkExpired, 1)
	used := e.refusals(run, subjects.CodeLinkUsed, 1)
	assert.Equal(t, "GET /l/"+links.ID(good), used[0].Request)
	assert.Equal(t, "ada", used[0].Identity)
}

// Attack: a session cookie copied before its owner logged out. Logging out
// removes the session from the bucket, so the copy authenticates nothing;
// a logout from another site is refused.
func TestAttackCookieAfterLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.login("ada-token")
	get := func() int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/me", nil)
		req.AddCookie(c)
		resp, _ := e.do(req)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get())
	req, _ := http.NewRequest("POST", e.srv.URL+"/inbox/logout", nil)
	req.AddCookie(c)
	resp, _ := e.do(req)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "without X-Interlock-Request: a cross-site form")
	assert.Equal(t, http.StatusOK, get())
	req, _ = http.NewRequest("POST", e.srv.URL+"/inbox/logout", nil)
	req.AddCookie(c)
	req.Header.Set("X-Interlock-Request", "1")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, _ = e.do(req)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, http.StatusUnauthorized, get(), "the copied cookie is no session")
}

// Attack (security review): one approver's slow answer to their own interrupt makes
// every later answer to any interrupt with the same responseSchema -- other
// runs, other approvers -- refused with schema_budget, without a check.
// bob's correct, tiny answer to his own interrupt must be accepted.
func TestSlowAnswerDoesNotRefuseOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schema := map[string]any{"type": "string", "pattern": "[a-z]{1,500}x"}
	adaRun, adaID := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Schema": schema})
	bobRun, bobID := e.suspend(map[string]any{"Approvers": []string{"bob"}, "Schema": schema})

	slow, _ := json.Marshal(map[string]any{"status": "resolved", "payload": strings.Repeat("a", 60000)})
	status, out := e.call("POST", decisionPath(adaRun, adaID), "ada-token", slow)
	require.Equal(t, http.StatusUnprocessableEntity, status, out)
	require.Equal(t, "schema_budget", out["code"], out)

	status, out = e.call("POST", decisionPath(bobRun, bobID), "bob-token", []byte(`{"status":"resolved","payload":"abcx"}`))
	assert.Equal(t, http.StatusOK, status, "bob's valid answer to his own interrupt: %v", out)
	if status == http.StatusOK {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := e.client.Wait(ctx, bobRun, processor.Finished)
		require.NoError(t, err)
	}
}

// Attack (security review): ada mistypes the answer to a sensitive question (the
// secret as an object key). The rejection's detail names the key, and carol,
// who may read the run, reads it back from the history.
func TestRejectedAnswerKeysNotInHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Groups": []string{"finance"}, "Reason": "input_required", "Quiet": true,
		"Message": "Vault PIN per account?", "Schema": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "integer"}}})
	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","payload":{"pin-8642":"acct"}}`))
	require.Equal(t, http.StatusUnprocessableEntity, status, out)
	var raw []byte
	require.Eventually(t, func() bool {
		status, out = e.call("GET", "/v1/runs/"+run+"/history", "carol-token", nil)
		raw, _ = json.Marshal(out)
		return status == http.StatusOK && strings.Contains(string(raw), "decision_rejected")
	}, 10*time.Second, 20*time.Millisecond)
	assert.NotContains(t, string(raw), "pin-8642", "carol reads part of ada's answer") // not the digits alone: a timestamp may hold them
}

// Attack (security review): after ada's interrupt expired, bob (who may not decide it)
// cancels it. The coordinator answers "accepted" without asking the
// authorization rule, and the audit trail records bob's decision as
// accepted on ada's interrupt.
func TestCancelExpiredNeedsAuthority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := processor.NewWorker(e.nc, processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("timed", func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := processor.Interrupt(ctx, processor.Request{Message: "ada only", Approvers: []string{"ada"},
			Timeout: 300 * time.Millisecond})
		return "done", err
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	run, err := e.client.Start(ctx, "timed", map[string]any{})
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		rec, err := e.client.Run(ctx, run)
		if err != nil || len(rec.Interrupts) == 0 || rec.Interrupts[0].Decision == nil {
			return false
		}
		id = rec.Interrupts[0].ID
		return true
	}, 10*time.Second, 20*time.Millisecond, "the interrupt expires")

	status, out := e.call("POST", decisionPath(run, id), "bob-token", []byte(`{"status":"cancelled","comment":"bob was here"}`))
	assert.Equal(t, http.StatusForbidden, status, "bob may not decide ada's interrupt, expired or not: %v", out)
}

// Attack (security review): refused link decisions were counted against the link's
// identity but the link path never checked the refusals budget: whoever
// holds ada's link (a forwarded mail) submitted refused answers without
// limit, and each one locked ada herself out of deciding through the API.
// The link path is limited by address, and charges the address only.
func TestLinkRefusalsLimitedAndNotChargedToApprover(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *Config) { c.DecisionRefusals = Limit{Burst: 5, Every: time.Hour} })
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Schema": map[string]any{"type": "integer"}})
	approve := e.linkFor(run, id, "approve", "ada", time.Hour)
	for i := range 15 {
		status, body := e.page("POST", approve, map[string][]string{"payload": {`"x"`}})
		want := http.StatusUnprocessableEntity
		if i >= 5 {
			want = http.StatusTooManyRequests
		}
		require.Equal(t, want, status, "attempt %d: %s", i, body)
	}
	ev := e.refusals(run, subjects.CodeRateLimited, 1)
	assert.Len(t, ev, 1, "audited once per episode")
	assert.Equal(t, "127.0.0.1", ev[0].Address)
	assert.Empty(t, ev[0].Identity, "the link's holder is not known to be ada")
	// ada, from another address (127.0.0.2), with her own token.
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	req, _ := http.NewRequest("POST", e.srv.URL+decisionPath(run, id), strings.NewReader(`{"status":"resolved","payload":5}`))
	req.Header.Set("Authorization", "Bearer ada-token")
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "ada decides with her own token: %s", body)
	if resp.StatusCode == http.StatusTooManyRequests {
		ev := e.refusals(subjects.NoRun, subjects.CodeRateLimited, 1)[0]
		assert.Equal(t, "127.0.0.2", ev.Address, "the refusal was ada's identity's, not the link's address")
		assert.Equal(t, "ada", ev.Identity)
	}
}

// Attack (security review): the time budget covers checking an answer, not compiling
// the schema. A hostile agent's 32 KiB responseSchema of counted-repetition
// patterns took seconds to compile (10 s under -race, 2 s without), while
// the coordinator held its schema cache's lock: bob's decision on another
// run, with a one-line schema, waited for it. The agent publishes the
// suspension by hand (its SDK refuses such a schema, as the coordinator
// now does at once: schema_unsafe).
func TestSchemaCompileDoesNotStallDecisions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := 0; b.Len() < 32<<10-100; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"p%d":{"pattern":"[a-z]{1,1000}"}`, i)
	}
	b.WriteString(`}}`)

	bobRun, bobID := e.suspend(map[string]any{"Approvers": []string{"bob"}, "Schema": map[string]any{"type": "integer"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	published := time.Now()
	subject, err := e.nc.Namespace().Suspended("hostile", "run-hostile")
	require.NoError(t, err)
	body := `{"version":1,"runId":"run-hostile","agent":"hostile","pass":0,
		"interrupts":[{"id":"ask-1","reason":"confirmation","responseSchema":` + b.String() + `}]}`
	_, err = e.nc.Publish(ctx, subject, []byte(body), "run-hostile:0", nil)
	require.NoError(t, err)

	start := time.Now()
	status, out := e.call("POST", decisionPath(bobRun, bobID), "bob-token", []byte(`{"status":"resolved","payload":5}`))
	took := time.Since(start)
	t.Logf("bob's decision: %d in %v", status, took)
	assert.Equal(t, http.StatusOK, status, out)
	assert.Less(t, took, time.Second, "bob's decision waits for the hostile schema's compilation")
	require.Eventually(t, func() bool {
		evs, err := e.client.Events(ctx, "run-hostile")
		// Refused, and the run failed with the reason: both are audited.
		return err == nil && slices.ContainsFunc(evs, func(ev subjects.Event) bool {
			return ev.Type == subjects.EventInputRejected && ev.Code == subjects.CodeSchemaUnsafe
		})
	}, 30*time.Second, 5*time.Millisecond, "the hostile schema is refused")
	assert.Less(t, time.Since(published), 5*time.Second, "refused before it is compiled, not after seconds of compiling")
}

// Attack (issue 23, finding 5): carol may decide one interrupt of a run and
// so may read the run; another interrupt of it is ada's alone. Carol reads
// the run, its history, the listing and the live stream: of ada's
// interrupt she sees its id and whether it was decided, never its
// question, metadata (an IBAN), answer, comment or who answered. Ada and
// the auditor still see it (the auditor everything but sensitive answers).
func TestAttackReadAnotherApproversInterrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const iban = "DE89370400440532013000"
	carolStream := e.openStream("carol-token")
	run := "run-two-approvers"
	subject, err := e.nc.Namespace().Suspended("pair", run)
	require.NoError(t, err)
	susp := subjects.Suspension{PassRef: subjects.PassRef{Version: subjects.Version, RunID: run, Agent: "pair"},
		Interrupts: []subjects.Interrupt{
			{ID: "for-carol", Reason: subjects.ReasonConfirmation, Message: "ship the parcel?", Approvers: []string{"carol"}},
			{ID: "for-ada", Reason: subjects.ReasonConfirmation, Message: "pay " + iban + "?", Approvers: []string{"ada"},
				Metadata: json.RawMessage(`{"iban":"` + iban + `"}`)},
		}, SuspendedAt: time.Now().UTC()}
	data, _ := json.Marshal(susp)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err = e.nc.Publish(ctx, subject, data, run+":0:test", nil)
	require.NoError(t, err)
	_, err = e.client.Wait(ctx, run, processor.Suspended)
	require.NoError(t, err)
	status, out := e.call("POST", decisionPath(run, "for-ada"), "ada-token",
		[]byte(`{"status":"resolved","payload":{"to":"`+iban+`"},"comment":"paid to `+iban+`"}`))
	require.Equal(t, http.StatusOK, status, out)
	seen := carolStream.waitWithin(t, "decision_accepted", 15*time.Second)

	get := func(token, path string) string {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, body := e.do(req)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		return body
	}
	for _, path := range []string{"/v1/runs/" + run, "/v1/runs/" + run + "/history", "/v1/interrupts"} {
		body := get("carol-token", path)
		assert.NotContains(t, body, iban, "carol reading %s", path)
		assert.NotContains(t, body, `"ada"`, "carol reading %s: who decides or decided ada's interrupt", path)
		assert.NotContains(t, body, `.ada"`, "carol reading %s: the resume subject names the approver", path)
		assert.NotContains(t, body, "paid to", "carol reading %s: ada's comment", path)
	}
	assert.Contains(t, get("ada-token", "/v1/runs/"+run+"/history"), `"approver":"ada"`, "ada reads her own decision")
	assert.Contains(t, get("ada-token", "/v1/runs/"+run), iban, "ada reads her own interrupt")
	assert.Contains(t, get("erin-token", "/v1/runs/"+run), iban, "the auditor reads every interrupt")
	assert.Contains(t, get("erin-token", "/v1/runs/"+run+"/history"), `"approver":"ada"`, "and who decided")

	_, out = e.call("GET", "/v1/runs/"+run, "carol-token", nil)
	var mine, hers map[string]any
	for _, in := range out["run"].(map[string]any)["interrupts"].([]any) {
		m := in.(map[string]any)
		switch m["id"] {
		case "for-carol":
			mine = m
		case "for-ada":
			hers = m
		}
	}
	require.NotNil(t, mine)
	require.NotNil(t, hers, "the interrupt is there, reduced: the run waits on what it waits on")
	assert.Equal(t, "ship the parcel?", mine["message"], "carol's own interrupt is whole")
	assert.Equal(t, true, hers["withheld"])
	assert.Nil(t, hers["message"])
	assert.Nil(t, hers["metadata"])
	assert.Equal(t, "resolved", hers["decision"].(map[string]any)["status"], "that it was decided is shown")

	// The live stream: ada's decision reached carol's stream only reduced.
	assert.NotContains(t, seen, iban)
	assert.NotContains(t, seen, `"ada"`)
	assert.NotContains(t, seen, `.ada"`)
}

// TestLinkOfRemovedIdentityRefused: a link minted for dave (in the
// identities file then) stops deciding once dave is removed from it, as
// his API token and sessions do: refused 403 and audited, nothing decided.
func TestLinkOfRemovedIdentityRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, known := e.dir.Identity("dave")
	require.False(t, known, "dave is not (any more) in the identities file")
	run, id := e.suspend(map[string]any{"Approvers": []string{"dave", "ada"}, "Message": "Wire 9,000 EUR?"})
	link := e.linkFor(run, id, links.Approve, "dave", time.Hour)
	for _, method := range []string{"GET", "POST"} {
		status, body := e.page(method, link, nil)
		assert.Equal(t, http.StatusForbidden, status, body)
	}
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Nil(t, rec.Interrupts[0].Decision, "nothing decided")
	ev := e.refusals(run, subjects.CodeNotAllowed, 1)
	assert.Equal(t, "dave", ev[0].Identity)
}

// Attack: a link made for someone who may no longer decide its question
// (their groups changed since; here signed for carol on ada's question)
// shows nothing of it, and is audited. Before, its page showed the
// question, its arguments and who may decide, which bob's token may no
// longer read; only its POST was refused (by the coordinator).
func TestAttackLinkOfApproverWhoMayNoLongerDecide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Wire 9,000 EUR to DE89 3704 0044?",
		"Metadata": map[string]any{"arguments": map[string]any{"iban": "DE89370400440532013000"}}})
	link := e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "carol", Sink: "carol-dm",
		Expires: time.Now().Add(time.Hour).Unix()})
	req, _ := http.NewRequest("GET", e.srv.URL+"/l/"+link, nil)
	resp, body := e.do(req)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.NotContains(t, body, "DE89370400440532013000")
	assert.NotContains(t, body, "Wire 9,000")
	refused := e.refusals(run, subjects.CodeNotAllowed, 1)
	assert.Equal(t, "carol", refused[0].Identity)
	assert.Contains(t, refused[0].Detail, "may not decide")

	req, _ = http.NewRequest("POST", e.srv.URL+"/l/"+link, strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, _ = e.do(req)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	e.undecided(run)
}

// Attack: ada's mailbox is compromised, and the operator turns its links
// off (removes `links: [ada-mail]`, restarts the gateway). A link already
// in that mailbox decides nothing: a link names the sink it was minted
// for, and decides only while that sink carries its approver's links.
// Before, it approved as ada until it expired (up to 30 days).
func TestAttackLinkOfSinkTurnedOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Wire 9,000 EUR?"})
	reply := e.mintLinks(run, id, "ada-mail")
	require.Empty(t, reply.Code, reply.Detail)
	approve := "/l/" + reply.Links[0].Approve

	dir, err := approvers.Parse("test", []byte(fmt.Sprintf(`
identities:
  ada: {groups: [finance], tokens: ["%s"]}
`, approvers.Digest("ada-token"))))
	require.NoError(t, err)
	_, restarted := serveGateway(t, e.nc, Config{Directory: dir, Logger: quiet, Links: e.signer})

	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, restarted.URL+approve, strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, body := e.do(req)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, method)
		assert.NotContains(t, body, "Wire 9,000", method)
	}
	e.undecided(run)
	refused := e.refusals(run, subjects.CodeNotAllowed, 2)
	assert.Equal(t, "ada", refused[0].Identity)
}

// An approver asking the listing for another identity's view learned that
// identity's groups: ada (finance) saw the finance questions listed for
// carol and not for bob. Only an auditor names someone else; an approver
// may name themself.
func TestAttackListingForAnotherApprover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.suspend(map[string]any{"Groups": []string{"finance"}, "Message": "finance only"})
	for _, who := range []string{"bob", "carol"} {
		status, out := e.call("GET", "/v1/interrupts?approver="+who, "ada-token", nil)
		assert.Equal(t, http.StatusForbidden, status, "ada lists approver=%s", who)
		assert.Equal(t, string(subjects.CodeNotAllowed), out["code"])
		assert.Nil(t, out["interrupts"], "nothing is listed")
	}
	refused := e.refusals(subjects.NoRun, subjects.CodeNotAllowed, 2)
	assert.Equal(t, "ada", refused[0].Identity)
	assert.Contains(t, refused[0].Detail, "approver=")

	status, out := e.call("GET", "/v1/interrupts?approver=ada", "ada-token", nil)
	require.Equal(t, http.StatusOK, status, "ada may name herself")
	assert.Len(t, out["interrupts"], 1)
	status, out = e.call("GET", "/v1/interrupts?approver=carol", "erin-token", nil)
	require.Equal(t, http.StatusOK, status, "an auditor may name anyone")
	assert.Len(t, out["interrupts"], 1)
	_, out = e.call("GET", "/v1/interrupts?approver=bob", "erin-token", nil)
	assert.Empty(t, out["interrupts"])
}

// The JSON behind the inbox carries questions, arguments and answers under
// the session cookie: no response of the API may be stored by a browser or
// a shared cache, as no page is.
func TestAttackPrivateReadsNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, _ := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Wire 9,000 EUR to DE89370400440532013000?"})
	c := e.login("ada-token")
	for _, path := range []string{"/v1/runs/" + run, "/v1/runs/" + run + "/history", "/v1/interrupts", "/v1/me", "/v1/runs/nope", "/inbox"} {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		req.AddCookie(c)
		resp, _ := e.do(req)
		assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "GET %s (%d)", path, resp.StatusCode)
	}
}

// The session cookie is a __Host- cookie: a sibling subdomain cannot plant
// one of its own (for a longer path, sent first) that runs the victim's
// inbox as the planter.
func TestAttackSessionCookieIsHostOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.login("ada-token")
	assert.True(t, strings.HasPrefix(c.Name, "__Host-"), "cookie %q", c.Name)
	assert.True(t, c.Secure)
	assert.Equal(t, "/", c.Path)
	assert.Empty(t, c.Domain)
}
