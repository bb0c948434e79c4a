package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/processor"
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
		assert.Contains(t, body, string(subjects.CodeCrossOrigin))
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
	good := e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "ada",
		Expires: time.Now().Add(time.Hour).Unix()})
	assert.Equal(t, http.StatusBadRequest, get(good[:len(good)-2]+"xx"))
	expired := e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "ada",
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
