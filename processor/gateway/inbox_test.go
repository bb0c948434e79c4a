package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/e2e"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// screenshots is where the browser tests save their screenshots: the
// INTERLOCK_SCREENSHOTS directory, or e2e/screenshots (git-ignored).
func screenshots() string {
	if dir := os.Getenv("INTERLOCK_SCREENSHOTS"); dir != "" {
		return dir
	}
	return filepath.Join(e2e.Dir(), "screenshots")
}

// TestApproverInBrowser: approvers at phone and desktop sizes in headless
// Chromium (e2e/approver.mjs), every screen checked with axe-core. In the
// inbox: / leads there; a deep link opens its card; the form starts from the
// tool's arguments with typed choices; a refusal stays next to its field
// and keeps what was typed; edit-arguments shows the diff; deny asks for a
// reason; new interrupts arrive by themselves; logout; an auditor's
// controls are disabled. On a link page: whom one decides as, a refusal
// next to its field, a success page repeating the answer.
func TestApproverInBrowser(t *testing.T) {
	t.Parallel()
	node := e2e.Require(t, true, "playwright-core", "axe-core")
	e := newEnv(t)
	pay := map[string]any{"type": "object", "required": []string{"amount", "currency"}, "properties": map[string]any{
		"amount":   map[string]any{"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.5},
		"currency": map[string]any{"type": "string", "enum": []string{"USD", "EUR"}}}}
	tiered := map[string]any{"type": "object", "required": []string{"tier", "amount"}, "properties": map[string]any{
		"tier":   map[string]any{"type": "integer", "enum": []int{1, 2, 3}},
		"amount": map[string]any{"type": "number", "multipleOf": 0.5}}}
	type ref struct {
		Run string `json:"run"`
		ID  string `json:"id"`
	}
	plan := map[string]any{"url": e.srv.URL, "shots": screenshots(),
		"tokens": map[string]string{"ada": "ada-token", "erin": "erin-token"}}
	interrupts, linkPages, live := map[string]ref{}, map[string]map[string]string{}, map[string]string{}
	for _, size := range []string{"phone", "desktop"} {
		run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Refund 12.50 to Lin (" + size + ")?",
			"Schema": pay, "Timeout": 2 * time.Hour, "Metadata": map[string]any{"tool": "issue_refund",
				"arguments": map[string]any{"amount": 12.5, "currency": "EUR", "order": "A-7"}}})
		interrupts[size+"-pay"] = ref{run, id}
		run, id = e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Send the mail (" + size + ")?",
			"Metadata": map[string]any{"tool": "send_mail", "arguments": map[string]any{"to": "ops@example.test", "subject": "hi"}}})
		interrupts[size+"-mail"] = ref{run, id}
		run, id = e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Drop the table (" + size + ")?"})
		interrupts[size+"-drop"] = ref{run, id}
		run, id = e.suspend(map[string]any{"Approvers": []string{"bob"}, "Message": "Bob's refund (" + size + ")?",
			"Schema": pay, "Metadata": map[string]any{"tool": "issue_refund", "arguments": map[string]any{"amount": 3}}})
		interrupts[size+"-bob"] = ref{run, id}
		run, id = e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "Raise the tier (" + size + ")?",
			"Schema": tiered})
		interrupts[size+"-link"] = ref{run, id}
		linkPages[size] = map[string]string{"approve": e.linkFor(run, id, links.Approve, "ada", time.Hour)}
		live[size] = "Arrived live (" + size + ")"
	}
	plan["interrupts"], plan["links"], plan["live"] = interrupts, linkPages, live
	arg, err := json.Marshal(plan)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := filepath.Join(e2e.Dir(), "approver.mjs")
	cmd := exec.CommandContext(ctx, node, script, string(arg))
	cmd.Dir = filepath.Dir(script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		t.Log(line)
		if size, ok := strings.CutSuffix(strings.TrimPrefix(line, "WAIT "), " live"); ok && strings.HasPrefix(line, "WAIT ") {
			_, err := e.client.Start(ctx, "gate", map[string]any{"Approvers": []string{"ada"}, "Message": live[size]})
			require.NoError(t, err)
			_, err = stdin.Write([]byte("go\n"))
			require.NoError(t, err)
		}
	}
	require.NoError(t, cmd.Wait(), stderr.String())

	result := func(r ref) *subjects.Run {
		rec, err := e.client.Wait(ctx, r.Run, processor.Finished)
		require.NoError(t, err)
		return rec
	}
	for _, size := range []string{"phone", "desktop"} {
		assert.JSONEq(t, `{"payload":{"amount":12.5,"currency":"EUR"},"by":"ada"}`, string(result(interrupts[size+"-pay"]).Result),
			"the choice is sent as its JSON value, not quoted")
		assert.JSONEq(t, `{"payload":{"to":"ops@example.test","subject":"hello"},"by":"ada"}`,
			string(result(interrupts[size+"-mail"]).Result), "the edited arguments are the answer")
		dropped := result(interrupts[size+"-drop"]).Interrupts[0].Decision
		assert.Equal(t, subjects.StatusCancelled, dropped.Status)
		assert.Equal(t, "not this week", dropped.Comment)
		assert.JSONEq(t, `{"payload":{"tier":2,"amount":3.5},"by":"ada"}`, string(result(interrupts[size+"-link"]).Result),
			"an integer choice stays an integer")
		rec, err := e.client.Run(ctx, interrupts[size+"-bob"].Run)
		require.NoError(t, err)
		assert.Len(t, rec.Pending(), 1, "the auditor decided nothing")
	}
	for _, shot := range []string{"login", "inbox-card", "inbox-refused", "inbox-edit", "inbox-deny", "inbox-auditor",
		"link", "link-refused", "link-done", "link-error"} {
		for _, size := range []string{"phone", "desktop"} {
			info, err := os.Stat(filepath.Join(screenshots(), shot+"-"+size+".png"))
			if assert.NoError(t, err) {
				assert.Positive(t, info.Size())
			}
		}
	}
}

// TestQuorumInBrowser: a two-of-three quorum on a gated tool call, decided
// in the inbox in headless Chromium (e2e/quorum.mjs) at phone and desktop
// sizes, each screen checked with axe-core. Approver ada sees the call's
// arguments and "0 of 2"; a vote sent with a stale digest (the call
// changed since the card was drawn) is not counted and the card says so;
// her approval keeps the card with "1 of 2" and her vote. Carol, who
// started the run, sees the interrupt with its controls disabled and why.
// Bob sees ada's vote and approves: the card goes, and the replay receives
// both votes, each on the call's digest.
func TestQuorumInBrowser(t *testing.T) {
	t.Parallel()
	node := e2e.Require(t, true, "playwright-core", "axe-core")
	e := newEnv(t)
	args := map[string]any{"amount": 12400, "to": "ACME", "memo": "Invoice 2026-114"}
	digest, err := subjects.CallDigest("pay_invoice", json.RawMessage(`{"amount":12400,"memo":"Invoice 2026-114","to":"ACME"}`))
	require.NoError(t, err)
	stale, err := subjects.CallDigest("pay_invoice", json.RawMessage(`{"amount":99,"memo":"Invoice 2026-114","to":"ACME"}`))
	require.NoError(t, err)
	type ref struct {
		Run string `json:"run"`
		ID  string `json:"id"`
	}
	interrupts := map[string]ref{}
	for _, size := range []string{"phone", "desktop"} {
		run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Approvals": 2,
			"Message": "Pay ACME 12,400 (" + size + ")?", "Tool": "pay_invoice", "Args": args, "Votes": true},
			processor.WithRequester("carol"))
		interrupts[size] = ref{run, id}
	}
	// The listing tells the requester why they may not vote.
	status, out := e.call("GET", "/v1/interrupts", "carol-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	for _, it := range out["interrupts"].([]any) {
		item := it.(map[string]any)
		assert.Equal(t, false, item["canDecide"], "the requester may not vote")
		assert.Equal(t, string(subjects.CodeRequesterExcluded), item["refusal"])
	}
	status, out = e.call("GET", "/v1/interrupts", "bob-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	for _, it := range out["interrupts"].([]any) {
		assert.Equal(t, true, it.(map[string]any)["canDecide"])
		assert.Nil(t, it.(map[string]any)["refusal"])
	}
	plan := map[string]any{"url": e.srv.URL, "shots": screenshots(), "interrupts": interrupts,
		"digest": digest, "stale": stale,
		"tokens": map[string]string{"ada": "ada-token", "bob": "bob-token", "carol": "carol-token"}}
	arg, err := json.Marshal(plan)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := filepath.Join(e2e.Dir(), "quorum.mjs")
	cmd := exec.CommandContext(ctx, node, script, string(arg))
	cmd.Dir = filepath.Dir(script)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Log(stdout.String())
	require.NoError(t, err, stderr.String())

	for _, size := range []string{"phone", "desktop"} {
		r := interrupts[size]
		rec, err := e.client.Wait(ctx, r.Run, processor.Finished)
		require.NoError(t, err)
		require.Equal(t, subjects.RunCompleted, rec.Status, string(rec.Error))
		var result struct {
			By    string          `json:"by"`
			Votes []subjects.Vote `json:"votes"`
		}
		require.NoError(t, json.Unmarshal(rec.Result, &result))
		assert.Equal(t, "bob", result.By, "the deciding vote")
		var got []string
		for _, v := range result.Votes {
			got = append(got, fmt.Sprintf("%s %s %t", v.Approver, v.Status, v.CallDigest == digest))
		}
		assert.Equal(t, []string{"ada resolved true", "bob resolved true"}, got, "the replay receives both votes, on the call's digest")
		// The stale vote reached the coordinator and was refused there.
		evs, err := e.client.Events(ctx, r.Run)
		require.NoError(t, err)
		mismatches := 0
		for _, ev := range evs {
			if ev.Verdict != nil && ev.Verdict.Code == subjects.CodeCallMismatch {
				mismatches++
			}
		}
		assert.Equal(t, 1, mismatches, "one vote on a stale digest, refused")
	}
	for _, shot := range []string{"quorum-first", "quorum-stale", "quorum-voted", "quorum-requester", "quorum-second"} {
		for _, size := range []string{"phone", "desktop"} {
			info, err := os.Stat(filepath.Join(screenshots(), shot+"-"+size+".png"))
			if assert.NoError(t, err) {
				assert.Positive(t, info.Size())
			}
		}
	}
}

// TestStreamEndsAtLogout: a live event stream opened with a session (a
// copied cookie, say) ends when the session does: after the owner logs
// out, the next event it may read is not sent and the stream closes.
func TestStreamEndsAtLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.login("ada-token")
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/stream", nil)
	require.NoError(t, err)
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	out, err := http.NewRequest(http.MethodPost, e.srv.URL+"/inbox/logout", nil)
	require.NoError(t, err)
	out.AddCookie(c)
	out.Header.Set("X-Interlock-Request", "1")
	out.Header.Set("Sec-Fetch-Site", "same-origin")
	r2, body := e.do(out)
	require.Equal(t, http.StatusOK, r2.StatusCode, body)

	run, _ := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "after logout: wire 9,000 EUR?"})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, open := <-lines:
			if !open {
				return // the stream ended with the session
			}
			require.NotContains(t, l, run, "an event after logout")
		case <-deadline:
			t.Fatal("the stream outlived its session")
		}
	}
}
