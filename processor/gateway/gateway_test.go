package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// A check abandoned at its budget runs to its end on purpose (bounded by
// schema.MaxChecks); TestSlowAnswerDoesNotRefuseOthers leaves one.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/interlockhq/interlock/processor/schema.(*Cache).Validate.func1"))
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	t       *testing.T
	natsURL string // the NATS server's
	nc      *jetstream.Client
	client  *processor.Client
	srv     *httptest.Server
	dir     *approvers.Directory
	signer  *links.Signer
	gw      *Gateway
}

// newEnv runs a coordinator, a worker whose agent "gate" asks with the
// request it is given in the run's input, and the gateway on a real HTTP
// server.
func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the gateway's config changed by set.
func newEnvWith(t *testing.T, set func(*Config)) *env { return newEnvCo(t, set, nil) }

// newEnvCo is newEnvWith with the coordinator's config changed by co.
func newEnvCo(t *testing.T, set func(*Config), co func(*coordinator.Config)) *env {
	srv := jstest.Server(t)
	nc := jstest.Client(t, srv)
	dir, err := approvers.Parse("test", []byte(fmt.Sprintf(`
identities:
  ada: {groups: [finance], tokens: ["%s"], links: [ada-mail], slack: {team: T0TEAM, user: U0ADA}}
  bob: {groups: [ops], tokens: ["%s"], slack: {team: T0TEAM, user: U0BOB}}
  carol: {groups: [finance], tokens: ["%s"], links: [carol-dm], email: carol@example.com}
  erin: {roles: [auditor], tokens: ["%s"]}
`, approvers.Digest("ada-token"), approvers.Digest("bob-token"), approvers.Digest("carol-token"), approvers.Digest("erin-token"))))
	require.NoError(t, err)
	cc := coordinator.Config{Logger: quiet, Groups: dir.Groups}
	if co != nil {
		co(&cc)
	}
	coord := coordinator.New(jstest.Client(t, srv), cc)
	require.NoError(t, coord.Start(context.Background()))
	t.Cleanup(func() { _ = coord.Stop(context.Background()) })
	w := processor.NewWorker(jstest.Client(t, srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("gate", func(ctx context.Context, input json.RawMessage) (any, error) {
		var req struct {
			Approvers, Groups []string
			Schema            map[string]any
			Message, Reason   string
			Metadata          map[string]any
			Timeout           time.Duration
			// Quiet: the agent keeps the answer to itself.
			Quiet bool
			// NoLinks turns one-click links off for the interrupt.
			NoLinks bool
			// NoChat forbids chat decisions of the interrupt.
			NoChat bool
			// Approvals asks for a quorum; Tool and Args make the
			// interrupt gate that call (protocol version 2).
			Approvals   int
			AllowChange bool
			Tool        string
			Args        map[string]any
			// Second raises a second interrupt in the same pass, which
			// these approvers decide.
			Second []string
			// Votes: the result also lists the votes the replay received.
			Votes bool
		}
		_ = json.Unmarshal(input, &req)
		r := processor.Request{Message: req.Message, Approvers: req.Approvers,
			ApproverGroups: req.Groups, ResponseSchema: req.Schema, Reason: req.Reason, Metadata: req.Metadata,
			Timeout: req.Timeout}
		if req.NoLinks {
			r.OneClickLinks = new(bool)
		}
		if req.NoChat {
			r.ChatDecisions = new(bool)
		}
		if req.Approvals > 0 {
			r.Policy = &subjects.Policy{Approvals: req.Approvals, AllowChange: req.AllowChange}
		}
		if req.Tool != "" {
			r.Call = &processor.ToolCall{Tool: req.Tool, Arguments: req.Args}
		}
		if len(req.Second) > 0 {
			_, err1 := processor.Interrupt(processor.WithToolCall(ctx, "first"), r)
			_, err2 := processor.Interrupt(processor.WithToolCall(ctx, "second"), processor.Request{Message: "second?", Approvers: req.Second})
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			return "both", nil
		}
		d, err := processor.Interrupt(ctx, r)
		if err != nil {
			return nil, err
		}
		if req.Quiet {
			return map[string]any{"by": d.Approver}, nil
		}
		if req.Votes {
			return map[string]any{"payload": d.Payload, "by": d.Approver, "votes": d.Votes}, nil
		}
		return map[string]any{"payload": d.Payload, "by": d.Approver}, nil
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	signer, err := links.NewSigner([]byte("test-link-secret-0123"))
	require.NoError(t, err)
	cfg := Config{Directory: dir, Logger: quiet, Links: signer}
	if set != nil {
		set(&cfg)
	}
	gw, hs := serveGateway(t, jstest.Client(t, srv), cfg)
	return &env{t: t, natsURL: srv.URL(), nc: nc, client: processor.NewClient(nc), srv: hs, dir: dir, signer: signer, gw: gw}
}

// serveGateway starts a gateway of cfg on a real HTTP server; both stop
// with the test.
func serveGateway(t *testing.T, nc *jetstream.Client, cfg Config) (*Gateway, *httptest.Server) {
	t.Helper()
	gw, err := New(context.Background(), nc, cfg)
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	hs := httptest.NewUnstartedServer(gw)
	hs.Config = gw.Server()
	hs.Start()
	t.Cleanup(hs.Close)
	return gw, hs
}

func (e *env) suspend(input map[string]any, opts ...processor.StartOption) (string, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	run, err := e.client.Start(ctx, "gate", input, opts...)
	require.NoError(e.t, err)
	rec, err := e.client.Wait(ctx, run, processor.Suspended)
	require.NoError(e.t, err)
	id := rec.Pending()[0].ID
	// The pending index is written just after the record.
	require.Eventually(e.t, func() bool {
		list, err := e.client.Pending(ctx)
		require.NoError(e.t, err)
		for _, p := range list {
			if p.RunID == run {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	return run, id
}

func (e *env) call(method, path, token string, body []byte) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	require.NoError(e.t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

func decisionPath(run, id string) string {
	return "/v1/runs/" + run + "/interrupts/" + id + "/decision"
}

func TestDecideThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "ship?"})
	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","payload":{"ok":true},"comment":"go"}`))
	require.Equal(t, http.StatusOK, status, out)
	assert.Equal(t, "accepted", out["verdict"].(map[string]any)["outcome"])
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.JSONEq(t, `{"payload":{"ok":true},"by":"ada"}`, string(rec.Result), "the identity is the token's, recorded by the coordinator")

	status, out = e.call("GET", "/v1/runs/"+run, "ada-token", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "completed", out["run"].(map[string]any)["status"])
	status, out = e.call("GET", "/v1/runs/"+run+"/history", "erin-token", nil)
	require.Equal(t, http.StatusOK, status)
	var types []string
	for _, ev := range out["events"].([]any) {
		m := ev.(map[string]any)
		types = append(types, m["type"].(string))
		if m["type"] == "decision_accepted" {
			v := m["verdict"].(map[string]any)
			assert.Equal(t, "ada", v["approver"], "who")
			assert.Equal(t, "gateway", v["via"], "through which path")
		}
	}
	assert.Contains(t, types, "decision_accepted")
	status, out = e.call("GET", "/v1/runs/nope", "ada-token", nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, string(subjects.CodeNotFound), out["code"])
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	// Every refusal below counts against the test's one address.
	e := newEnvWith(t, func(c *Config) { c.DecisionRefusals = Limit{Burst: 100, Every: time.Second} })
	adaOnly, adaID := e.suspend(map[string]any{"Approvers": []string{"ada"}})
	finance, finID := e.suspend(map[string]any{"Groups": []string{"finance"}})
	schema, schemaID := e.suspend(map[string]any{"Schema": map[string]any{"type": "object", "required": []string{"amount"}}})
	other, _ := e.suspend(map[string]any{})
	ok := []byte(`{"status":"resolved","payload":1}`)

	cases := []struct {
		name, path, token string
		body              []byte
		status            int
		code              subjects.Code
	}{
		{"unauthenticated", decisionPath(adaOnly, adaID), "", ok, 401, subjects.CodeUnauthenticated},
		{"unknown token", decisionPath(adaOnly, adaID), "forged", ok, 401, subjects.CodeUnauthenticated},
		{"wrong approver", decisionPath(adaOnly, adaID), "bob-token", ok, 403, "not_allowed"},
		{"wrong group", decisionPath(finance, finID), "bob-token", ok, 403, "not_allowed"},
		{"someone else's interrupt", decisionPath(other, adaID), "ada-token", ok, 404, "unknown_interrupt"},
		{"oversized body", decisionPath(adaOnly, adaID), "ada-token",
			[]byte(`{"status":"resolved","payload":"` + strings.Repeat("x", 70<<10) + `"}`), 413, subjects.CodeTooLarge},
		{"invalid JSON", decisionPath(adaOnly, adaID), "ada-token", []byte(`{"status":`), 400, subjects.CodeInvalidJSON},
		{"unknown field", decisionPath(adaOnly, adaID), "ada-token", []byte(`{"status":"resolved","approver":"ada"}`), 400, subjects.CodeInvalidJSON},
		{"bad status", decisionPath(adaOnly, adaID), "ada-token", []byte(`{"status":"approved"}`), 400, "malformed"},
		{"payload failing responseSchema", decisionPath(schema, schemaID), "bob-token", []byte(`{"status":"resolved","payload":{}}`), 422, "schema_mismatch"},
		{"bad run id", decisionPath("a.b", "x"), "ada-token", ok, 400, subjects.CodeBadRequest},
		{"unknown run", decisionPath("no-such-run", "int-x"), "ada-token", ok, 404, subjects.CodeUnknownRun},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := e.call("POST", c.path, c.token, c.body)
			assert.Equal(t, c.status, status, out)
			assert.Equal(t, string(c.code), out["code"], out)
			assert.NotEmpty(t, out["message"])
		})
	}
	// Each refusal is audited: the coordinator's as decision_rejected, the
	// gateway's own (bad input it never forwards) as access_refused.
	e.refusals(adaOnly, subjects.CodeInvalidJSON, 2)
	e.refusals(adaOnly, subjects.CodeTooLarge, 1)
	e.refusals(adaOnly, subjects.CodeMalformed, 1)
	e.refusals(subjects.NoRun, subjects.CodeBadRequest, 1)
	// A decision for a run that does not exist is audited under the no-run
	// token, never on an events subject of the id it names.
	evs, err := e.client.Events(context.Background(), "no-such-run")
	require.NoError(t, err)
	assert.Empty(t, evs)
	evs, err = e.client.Events(context.Background(), subjects.NoRun)
	require.NoError(t, err)
	unknown := 0
	for _, ev := range evs {
		if ev.Type == subjects.EventDecisionRejected && ev.Code == subjects.CodeUnknownRun && ev.Verdict.RunID == "no-such-run" {
			unknown++
		}
	}
	assert.Equal(t, 1, unknown)
	// The group member may; nothing above changed anything.
	status, out := e.call("POST", decisionPath(finance, finID), "carol-token", ok)
	assert.Equal(t, 200, status, out)
	status, out = e.call("POST", decisionPath(adaOnly, adaID), "ada-token", ok)
	assert.Equal(t, 200, status, out)
	status, out = e.call("POST", decisionPath(adaOnly, adaID), "ada-token", []byte(`{"status":"cancelled"}`))
	assert.Equal(t, 409, status, out)
	assert.Equal(t, "already_decided", out["code"])
}

func TestListPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 {
		e.suspend(map[string]any{"Groups": []string{"finance"}})
	}
	e.suspend(map[string]any{"Approvers": []string{"bob"}})
	status, out := e.call("GET", "/v1/interrupts?mine=true", "bob-token", nil)
	require.Equal(t, 200, status, out)
	assert.Len(t, out["interrupts"], 1)
	status, out = e.call("GET", "/v1/interrupts?mine=true", "ada-token", nil)
	require.Equal(t, 200, status)
	assert.Len(t, out["interrupts"], 3)

	// Pages of two.
	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		status, out = e.call("GET", "/v1/interrupts?limit=2&cursor="+cursor, "ada-token", nil)
		require.Equal(t, 200, status, out)
		for _, it := range out["interrupts"].([]any) {
			m := it.(map[string]any)
			seen = append(seen, m["runId"].(string))
			assert.NotNil(t, m["approverGroups"], "ada sees the finance ones only")
			assert.Equal(t, true, m["canDecide"])
		}
		next, _ := out["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	assert.Len(t, seen, 3, "every interrupt ada may see, once across pages")
	status, out = e.call("GET", "/v1/interrupts", "erin-token", nil)
	require.Equal(t, 200, status)
	assert.Len(t, out["interrupts"], 4, "an auditor sees every interrupt")
	status, out = e.call("GET", "/v1/interrupts?agent=other", "ada-token", nil)
	require.Equal(t, 200, status)
	assert.Empty(t, out["interrupts"])
	status, out = e.call("GET", "/v1/interrupts?olderThan=1h", "ada-token", nil)
	require.Equal(t, 200, status)
	assert.Empty(t, out["interrupts"])
	status, out = e.call("GET", "/v1/interrupts?limit=0", "ada-token", nil)
	assert.Equal(t, 400, status)
	assert.Equal(t, string(subjects.CodeBadRequest), out["code"])
	status, _ = e.call("GET", "/v1/interrupts", "", nil)
	assert.Equal(t, 401, status)
}

// BenchmarkDecisions measures decisions per second through the gateway and,
// in the same run, published directly with the Go client.
//
//	go test -run '^$' -bench BenchmarkDecisions -benchtime 300x ./processor/gateway
func BenchmarkDecisions(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Client(b, srv)
	dir, _ := approvers.Parse("b", []byte(`identities: {ada: {tokens: ["`+approvers.Digest("tok")+`"]}}`))
	co := coordinator.New(jstest.Client(b, srv), coordinator.Config{Logger: quiet})
	if err := co.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer co.Stop(context.Background())
	gw, err := New(context.Background(), jstest.Client(b, srv), Config{Directory: dir, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	defer hs.Close()
	client := processor.NewClient(nc)
	ctx := context.Background()
	// Suspensions published as a worker would, 2 per iteration.
	for i := 0; i < 2*b.N; i++ {
		run := fmt.Sprintf("b%d", i)
		s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "b"},
			Interrupts: []subjects.Interrupt{{ID: "i", Reason: "confirmation"}}}
		data, _ := json.Marshal(s)
		subject, _ := nc.Namespace().Suspended("b", run)
		if _, err := nc.Publish(ctx, subject, data, "", nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 2*b.N; i++ {
		if _, err := client.Wait(ctx, fmt.Sprintf("b%d", i), processor.Suspended); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := client.Decide(ctx, processor.DecisionRequest{RunID: fmt.Sprintf("b%d", i), InterruptID: "i",
			Status: subjects.StatusResolved, Approver: "ada"}); err != nil {
			b.Fatal(err)
		}
	}
	direct := time.Since(start)
	start = time.Now()
	hc := &http.Client{}
	for i := b.N; i < 2*b.N; i++ {
		req, _ := http.NewRequest("POST", hs.URL+decisionPath(fmt.Sprintf("b%d", i), "i"), strings.NewReader(`{"status":"resolved"}`))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("decision %d: %v %v", i, err, resp)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	viaGateway := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/direct.Seconds(), "direct-decisions/s")
	b.ReportMetric(float64(b.N)/viaGateway.Seconds(), "gateway-decisions/s")
	b.ReportMetric(direct.Seconds()/viaGateway.Seconds(), "ratio")
}

func (e *env) page(method, path string, form url.Values) (int, string) {
	e.t.Helper()
	var resp *http.Response
	var err error
	if method == "GET" {
		resp, err = http.Get(e.srv.URL + path)
	} else {
		resp, err = http.PostForm(e.srv.URL+path, form)
	}
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) linkFor(run, id, action, approver string, ttl time.Duration) string {
	sink := map[string]string{"ada": "ada-mail", "carol": "carol-dm"}[approver] // bob's links go nowhere
	return "/l/" + e.signer.Sign(links.Link{Run: run, Interrupt: id, Action: action, Approver: approver,
		Sink: cmp.Or(sink, "bob-mail"), Expires: time.Now().Add(ttl).Unix()})
}

func TestOneClickLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Deploy to production?"})
	approve := e.linkFor(run, id, links.Approve, "ada", time.Hour)

	// A GET only shows what the link would do.
	status, body := e.page("GET", approve, nil)
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, "Deploy to production?")
	assert.Contains(t, body, `<form method="post">`)
	assert.Contains(t, body, `name="viewport"`, "fits a phone")
	assert.Contains(t, body, "You are deciding as <b>ada</b>")
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Len(t, rec.Pending(), 1, "a GET never decides")

	// Tampered, expired, and for the wrong approver.
	tampered := approve[:len(approve)-3] + "abc"
	status, body = e.page("GET", tampered, nil)
	assert.Equal(t, 400, status)
	assert.Contains(t, body, "This link is not valid")
	status, body = e.page("POST", tampered, nil)
	assert.Equal(t, 400, status)
	expired := e.linkFor(run, id, links.Approve, "ada", -time.Minute)
	status, body = e.page("POST", expired, nil)
	assert.Equal(t, 410, status)
	assert.Contains(t, body, "This link has expired")
	status, body = e.page("POST", e.linkFor(run, id, links.Approve, "bob", time.Hour), nil)
	assert.Equal(t, 403, status)
	assert.Contains(t, body, "This link no longer works", "in words, not a code")
	status, body = e.page("POST", e.linkFor(run, id, links.Approve, "carol", time.Hour), nil)
	assert.Equal(t, 403, status)
	assert.Contains(t, body, "You may not decide this request", "in words, not a code")
	assert.Contains(t, body, `href="/inbox"`, "a way back")

	// Used once.
	status, body = e.page("POST", approve, nil)
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, "Approved")
	status, body = e.page("POST", approve, nil)
	assert.Equal(t, 409, status)
	assert.Contains(t, body, "already used")
	status, body = e.page("GET", approve, nil)
	assert.Equal(t, 409, status)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err = e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.JSONEq(t, `{"payload":null,"by":"ada"}`, string(rec.Result))
	assert.Equal(t, "link-"+links.ID(strings.TrimPrefix(approve, "/l/")), rec.Interrupts[0].Decision.DecisionID)

	// A deny link with a comment, and an approve link with an answer, to
	// interrupts anyone may decide: a link still names whom it decides as.
	run2, id2 := e.suspend(map[string]any{})
	status, body = e.page("POST", e.linkFor(run2, id2, links.Deny, "carol", time.Hour), url.Values{"comment": {"not now"}})
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, "Denied")
	run3, id3 := e.suspend(map[string]any{"Schema": map[string]any{"type": "object", "required": []string{"amount"}}})
	link3 := e.linkFor(run3, id3, links.Approve, "carol", time.Hour)
	status, body = e.page("GET", link3, nil)
	require.Equal(t, 200, status)
	assert.Contains(t, body, `name="payload"`)
	status, body = e.page("POST", link3, url.Values{"payload": {`{"amount": 5}`}})
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, "You approved as carol. The run continues.")
	assert.Regexp(t, `<th scope="row">amount</th><td>5</td>`, body, "the page repeats what was decided")
	assert.Contains(t, body, `href="/inbox#`+run3+`/`+id3+`"`, "and links to the run")
}

// A rejected attempt never burns the decision id of a later one: through
// the API with the caller's own decisionId, and through a link, whose
// decision id is fixed, the corrected answer is accepted at once.
func TestRetryAfterRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schema := map[string]any{"type": "object", "required": []string{"amount"},
		"properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Schema": schema})
	status, out := e.call("POST", decisionPath(run, id), "ada-token",
		[]byte(`{"status":"resolved","payload":{"amount":"x"},"decisionId":"api-1"}`))
	require.Equal(t, 422, status, out)
	status, out = e.call("POST", decisionPath(run, id), "ada-token",
		[]byte(`{"status":"resolved","payload":{"amount":3},"decisionId":"api-1"}`))
	require.Equal(t, 200, status, out)
	assert.Equal(t, "accepted", out["verdict"].(map[string]any)["outcome"])

	run, id = e.suspend(map[string]any{"Approvers": []string{"ada"}, "Schema": schema})
	link := e.linkFor(run, id, links.Approve, "ada", time.Hour)
	status, body := e.page("POST", link, url.Values{"payload": {`{}`}})
	require.Equal(t, 422, status, body)
	status, body = e.page("POST", link, url.Values{"payload": {`{"amount": 4}`}})
	require.Equal(t, 200, status, body)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.JSONEq(t, `{"payload":{"amount":4},"by":"ada"}`, string(rec.Result))
}

// TestForeignRecordReadAuditedOncePerRun: a read that meets an answer the
// server stored over a run's record is audited on the run (which has the
// coordinator put the record back from its copy), but once per run every
// foreignReadEvery: each such observation has the coordinator read the
// run's whole trail and adds an entry to it, so reloading a page of a run
// that stays stopped cost work that grew with every reload. Found by the
// third review of record copies on disk.
func TestForeignRecordReadAuditedOncePerRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A key holding an answer and no record ever: nothing to put back.
	ctx := context.Background()
	_, err := e.nc.Publish(ctx, "$KV."+e.nc.BucketName(jetstream.RunsBucket)+".ghost", []byte(`{}`), "", nil)
	require.NoError(t, err)
	// The gateway's observations, as they are published.
	nc, err := nats.Connect(e.natsURL)
	require.NoError(t, err)
	defer nc.Close()
	observed, err := e.nc.Namespace().Observed("ghost", subjects.EventAccessRefused)
	require.NoError(t, err)
	sub, err := nc.SubscribeSync(observed)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	for range 5 {
		status, out := e.call("GET", "/v1/runs/ghost", "erin-token", nil)
		require.Equal(t, http.StatusServiceUnavailable, status, out)
	}
	// Each audit is stored before its GET answers, so it reached this
	// connection before the answer to its flush.
	require.NoError(t, nc.Flush())
	n, _, err := sub.Pending()
	require.NoError(t, err)
	require.Equal(t, 1, n, "reads of the run audited")
}
