package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/agui"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// props are the test agents' knobs, sent in forwardedProps.
type props struct {
	Two       bool
	Timeout   string
	Approvers []string // who may decide the second interrupt
}

func propsOf(raw json.RawMessage) props {
	var in agui.RunAgentInput
	_ = json.Unmarshal(raw, &in)
	var p props
	_ = json.Unmarshal(in.ForwardedProps, &p)
	return p
}

// assistant emits a message and a tool call, asks before running the tool,
// and reports the tool's result against the original tool call.
func assistant(ctx context.Context, raw json.RawMessage) (any, error) {
	p := propsOf(raw)
	_ = processor.EmitText(ctx, "m1", "Let me check that refund.")
	_ = processor.EmitToolCall(ctx, "call_1", "issue_refund", `{"amount":40}`)
	req := processor.Request{Reason: subjects.ReasonToolCall, Message: "Refund 40?",
		ResponseSchema: map[string]any{"type": "boolean"}, Metadata: map[string]any{"arguments": map[string]any{"amount": 40}}}
	if p.Timeout != "" {
		req.Timeout, _ = time.ParseDuration(p.Timeout)
	}
	d, err := processor.Interrupt(processor.WithToolCall(ctx, "call_1"), req)
	var second error
	if p.Two {
		_, second = processor.Interrupt(processor.WithToolCall(ctx, "call_2"), processor.Request{Message: "Also email?",
			Approvers: p.Approvers})
	}
	switch {
	case errors.Is(err, processor.ErrCancelled):
		_ = processor.EmitToolResult(ctx, "m2", "call_1", "not refunded")
		return map[string]any{"refunded": false}, nil
	case err != nil:
		return nil, err
	case second != nil:
		return nil, second
	}
	_ = processor.EmitToolResult(ctx, "m2", "call_1", "refunded")
	_ = processor.EmitText(ctx, "m3", "Done.")
	return map[string]any{"refunded": true, "payload": d.Payload}, nil
}

// gated makes two parallel tool calls, each gate → act → report: on the
// replay the first tool's result is emitted between decided interrupts.
func gated(ctx context.Context, _ json.RawMessage) (any, error) {
	_ = processor.EmitText(ctx, "g1", "Two tools.")
	_ = processor.EmitToolCall(ctx, "tool_a", "a", `{}`)
	_ = processor.EmitToolCall(ctx, "tool_b", "b", `{}`)
	var suspended error
	for _, tool := range []string{"tool_a", "tool_b"} {
		_, err := processor.Interrupt(processor.WithToolCall(ctx, tool), processor.Request{Message: "run " + tool + "?"})
		if errors.Is(err, processor.ErrSuspended) {
			suspended = err
			continue
		}
		_ = processor.EmitToolResult(ctx, "res_"+tool, tool, tool+" done")
	}
	if suspended != nil {
		return nil, suspended
	}
	_ = processor.EmitText(ctx, "g2", "Both done.")
	return "ok", nil
}

// sequential makes two tool calls, each gate → act → report, one after
// the other: each pass asks one question.
func sequential(ctx context.Context, _ json.RawMessage) (any, error) {
	_ = processor.EmitText(ctx, "s1", "One, then the other.")
	_ = processor.EmitToolCall(ctx, "tool_a", "a", `{}`)
	_ = processor.EmitToolCall(ctx, "tool_b", "b", `{}`)
	for _, tool := range []string{"tool_a", "tool_b"} {
		if _, err := processor.Interrupt(processor.WithToolCall(ctx, tool), processor.Request{Message: "run " + tool + "?"}); err != nil {
			return nil, err
		}
		_ = processor.EmitToolResult(ctx, "res_"+tool, tool, tool+" done")
	}
	return "ok", nil
}

// stepwise makes three tool calls in turn, each announced, gated, acted
// on and reported before the next is announced: each pass asks one
// question, and a replay runs through the earlier, decided ones.
func stepwise(ctx context.Context, _ json.RawMessage) (any, error) {
	for _, tool := range []string{"tool_a", "tool_b", "tool_c"} {
		_ = processor.EmitToolCall(ctx, tool, tool, `{}`)
		if _, err := processor.Interrupt(processor.WithToolCall(ctx, tool), processor.Request{Message: "run " + tool + "?"}); err != nil {
			return nil, err
		}
		_ = processor.EmitToolResult(ctx, "res_"+tool, tool, tool+" done")
	}
	return "ok", nil
}

// fanout makes three tool calls in turn, each announced, gated, acted on
// and reported before the next is announced; an undecided gate does not
// stop it, so the first pass asks all three questions, and the replay
// emits each result between interrupts the first pass raised.
func fanout(ctx context.Context, _ json.RawMessage) (any, error) {
	var suspended error
	for _, tool := range []string{"tool_a", "tool_b", "tool_c"} {
		_ = processor.EmitToolCall(ctx, tool, tool, `{}`)
		if _, err := processor.Interrupt(processor.WithToolCall(ctx, tool), processor.Request{Message: "run " + tool + "?"}); err != nil {
			if !errors.Is(err, processor.ErrSuspended) {
				return nil, err
			}
			suspended = err
			continue
		}
		_ = processor.EmitToolResult(ctx, "res_"+tool, tool, tool+" done")
	}
	if suspended != nil {
		return nil, suspended
	}
	_ = processor.EmitText(ctx, "f_end", "All three done.")
	return "ok", nil
}

// Tokens of the test identities: ada may start any agent, eve the
// assistant, gated and sequential, mal only echo.
const (
	adaToken = "ada-token"
	eveToken = "eve-token"
	malToken = "mal-token"
)

type env struct {
	t        *testing.T
	srv      *embedded.Server
	nc       *jetstream.Client
	co       *coordinator.Coordinator
	client   *processor.Client
	gateways []*httptest.Server
}

func newEnv(t *testing.T, gateways int) *env {
	t.Parallel()
	e := &env{t: t, srv: jstest.Server(t)}
	dir, err := approvers.Parse("test", []byte(fmt.Sprintf(`
identities:
  ada: {tokens: ["%s"], agents: ["*"]}
  eve: {tokens: ["%s"], agents: [assistant, gated, sequential, quorum, strict]}
  mal: {tokens: ["%s"], agents: [echo]}
`, approvers.Digest(adaToken), approvers.Digest(eveToken), approvers.Digest(malToken))))
	require.NoError(t, err)
	e.nc = jstest.Client(t, e.srv)
	e.client = processor.NewClient(e.nc)
	e.co = coordinator.New(jstest.Client(t, e.srv), coordinator.Config{Logger: quiet, Groups: dir.Groups})
	require.NoError(t, e.co.Start(context.Background()))
	t.Cleanup(func() { _ = e.co.Stop(context.Background()) })
	w := processor.NewWorker(jstest.Client(t, e.srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("assistant", assistant))
	require.NoError(t, w.Register("gated", gated))
	require.NoError(t, w.Register("sequential", sequential))
	require.NoError(t, w.Register("stepwise", stepwise))
	require.NoError(t, w.Register("fanout", fanout))
	require.NoError(t, w.Register("quorum", quorum(true)))
	require.NoError(t, w.Register("strict", quorum(false)))
	require.NoError(t, w.Register("echo", func(ctx context.Context, raw json.RawMessage) (any, error) {
		_ = processor.EmitText(ctx, "e1", "hello")
		return "plain", nil
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	for range gateways { // several gateway processes, each its own connection
		gw, err := gateway.New(context.Background(), jstest.Client(t, e.srv), gateway.Config{Directory: dir, Logger: quiet})
		require.NoError(t, err)
		hs := httptest.NewServer(gw)
		t.Cleanup(hs.Close)
		e.gateways = append(e.gateways, hs)
	}
	return e
}

// post sends a RunAgentInput to gateway i as token's identity.
func (e *env) post(i int, token, agent string, in map[string]any) *http.Response {
	e.t.Helper()
	if _, ok := in["messages"]; !ok {
		in["messages"] = []any{map[string]any{"id": "u1", "role": "user", "content": "refund my order"}}
	}
	body, _ := json.Marshal(in)
	req, err := http.NewRequest(http.MethodPost, e.gateways[i].URL+"/agui/"+agent, bytes.NewReader(body))
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// Every answer comes at once or after one pass: never a hang.
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	require.NoError(e.t, err)
	return resp
}

// run posts as eve and returns the events received.
func (e *env) run(i int, agent string, in map[string]any) []map[string]any {
	e.t.Helper()
	return e.runAs(i, eveToken, agent, in)
}

func (e *env) runAs(i int, token, agent string, in map[string]any) []map[string]any {
	e.t.Helper()
	resp := e.post(i, token, agent, in)
	defer resp.Body.Close()
	require.Equal(e.t, "text/event-stream", resp.Header.Get("Content-Type"))
	var events []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		require.NoError(e.t, json.Unmarshal([]byte(line), &ev), line)
		events = append(events, ev)
	}
	require.NoError(e.t, sc.Err())
	return events
}

// runOf returns the Interlock run that raised an interrupt.
func (e *env) runOf(interruptID string) *subjects.Run {
	e.t.Helper()
	ctx := context.Background()
	runs, err := e.client.Runs(ctx)
	require.NoError(e.t, err)
	for _, rec := range runs {
		for _, in := range rec.Interrupts {
			if in.ID == interruptID {
				return rec
			}
		}
	}
	e.t.Fatalf("no run raised interrupt %s", interruptID)
	return nil
}

func types(evs []map[string]any) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev["type"].(string))
	}
	return out
}

func count(evs []map[string]any, typ, toolCall string) int {
	n := 0
	for _, ev := range evs {
		if ev["type"] == typ && (toolCall == "" || ev["toolCallId"] == toolCall) {
			n++
		}
	}
	return n
}

func last(evs []map[string]any) map[string]any { return evs[len(evs)-1] }

func find(evs []map[string]any, typ string) map[string]any {
	for _, ev := range evs {
		if ev["type"] == typ {
			return ev
		}
	}
	return nil
}

func interrupts(t *testing.T, evs []map[string]any) []map[string]any {
	t.Helper()
	fin := last(evs)
	require.Equal(t, "RUN_FINISHED", fin["type"], "%v", fin)
	out := fin["outcome"].(map[string]any)
	require.Equal(t, "interrupt", out["type"])
	var list []map[string]any
	for _, in := range out["interrupts"].([]any) {
		list = append(list, in.(map[string]any))
	}
	return list
}

func entry(id any, status string, payload any) map[string]any {
	e := map[string]any{"interruptId": id, "status": status}
	if payload != nil {
		e["payload"] = payload
	}
	return e
}

// consistent checks a transcript: every tool message follows an assistant
// message holding its tool call. It returns the tool call ids seen.
func consistent(t *testing.T, messages []any) []string {
	t.Helper()
	calls := map[string]bool{}
	var ids []string
	for _, raw := range messages {
		m := raw.(map[string]any)
		require.NotEmpty(t, m["id"], "every message has an id: %v", m)
		switch m["role"] {
		case "assistant":
			tcs, _ := m["toolCalls"].([]any)
			for _, tc := range tcs {
				id := tc.(map[string]any)["id"].(string)
				calls[id] = true
				ids = append(ids, id)
			}
		case "tool":
			assert.True(t, calls[m["toolCallId"].(string)], "tool result %v without its tool call in %v", m, messages)
		}
	}
	return ids
}

func TestInterruptAndResume(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.run(0, "assistant", map[string]any{"threadId": "t1", "runId": "r1", "state": map[string]any{"step": 1}})
	assert.Equal(t, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
		"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"}, types(evs),
		"snapshots come before an interrupting RUN_FINISHED")
	ins := interrupts(t, evs)
	require.Len(t, ins, 1)
	assert.Equal(t, "call_1", ins[0]["toolCallId"])
	assert.Equal(t, "tool_call", ins[0]["reason"])
	assert.Equal(t, map[string]any{"type": "boolean"}, ins[0]["responseSchema"])
	assert.Equal(t, map[string]any{"arguments": map[string]any{"amount": 40.0}}, ins[0]["metadata"])

	// Resume with a falsy answer: false is an answer.
	evs = e.run(0, "assistant", map[string]any{"threadId": "t1", "runId": "r2",
		"resume": []any{entry(ins[0]["id"], "resolved", false)}})
	assert.Equal(t, []string{"RUN_STARTED", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
		"TEXT_MESSAGE_END", "RUN_FINISHED"}, types(evs), "the replay does not send the first pass's events again")
	assert.Equal(t, "call_1", evs[1]["toolCallId"], "the result goes to the original tool call")
	fin := last(evs)
	assert.Equal(t, map[string]any{"type": "success"}, fin["outcome"])
	assert.Equal(t, map[string]any{"refunded": true, "payload": false}, fin["result"])
	assert.Equal(t, "r2", fin["runId"])
}

// Issue 12.1: the snapshot before an interrupting RUN_FINISHED holds the
// input's messages and the assistant messages and tool calls of every pass
// so far, so a client that replaces its transcript with it keeps them.
func TestTranscriptSnapshot(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.run(0, "assistant", map[string]any{"threadId": "tr", "runId": "a1", "forwardedProps": props{Two: true}})
	snap := find(evs, "MESSAGES_SNAPSHOT")
	require.NotNil(t, snap)
	msgs := snap["messages"].([]any)
	assert.Equal(t, "u1", msgs[0].(map[string]any)["id"], "the input's messages come first")
	assert.Equal(t, []string{"call_1"}, consistent(t, msgs), "the pass's tool call is in the snapshot")
	var text string
	for _, m := range msgs {
		if m.(map[string]any)["id"] == "m1" {
			text, _ = m.(map[string]any)["content"].(string)
		}
	}
	assert.Equal(t, "Let me check that refund.", text, "the pass's assistant message is in the snapshot")

}

// Issue 12.1: a run that suspends again after a resume sends a snapshot
// with both passes' messages, and no tool result without its tool call.
func TestTranscriptAcrossPasses(t *testing.T) {
	e := newEnv(t, 2)
	first := e.run(0, "sequential", map[string]any{"threadId": "seq", "runId": "s1"})
	ins := interrupts(t, first)
	msgs := find(first, "MESSAGES_SNAPSHOT")["messages"].([]any)
	evs := e.run(1, "sequential", map[string]any{"threadId": "seq", "runId": "s2", "messages": msgs,
		"resume": []any{entry(ins[0]["id"], "resolved", nil)}})
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "tool_a"))
	assert.Equal(t, 0, count(evs, "TOOL_CALL_START", ""), "the replay sends no tool call twice")
	snap := find(evs, "MESSAGES_SNAPSHOT")
	require.NotNil(t, snap, "%v", types(evs))
	got := snap["messages"].([]any)
	assert.ElementsMatch(t, []string{"tool_a", "tool_b"}, consistent(t, got))
	roles := 0
	for _, m := range got {
		if m.(map[string]any)["role"] == "tool" {
			roles++
		}
	}
	assert.Equal(t, 1, roles, "tool_a's result is in the resumed run's snapshot")
}

func TestResumeCancelled(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "t", "runId": "a"}))[0]["id"]
	evs := e.run(0, "assistant", map[string]any{"threadId": "t", "runId": "b",
		"resume": []any{entry(id, "cancelled", nil)}})
	assert.Equal(t, map[string]any{"refunded": false}, last(evs)["result"])
	assert.Equal(t, "TOOL_CALL_RESULT", evs[1]["type"])
}

func TestPlainRunFinishesAsBefore(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.runAs(0, adaToken, "echo", map[string]any{"threadId": "p", "runId": "p1"})
	assert.Equal(t, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}, types(evs))
	assert.Equal(t, "plain", last(evs)["result"])
}

// Every resume rule refuses the whole batch with one RUN_ERROR before the
// run starts, and changes nothing.
func TestResumeRules(t *testing.T) {
	e := newEnv(t, 1)
	two := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "two", "runId": "x1", "forwardedProps": props{Two: true}}))
	require.Len(t, two, 2)
	a, b := two[0]["id"], two[1]["id"]
	ok := func(id any) map[string]any { return entry(id, "resolved", true) }
	cases := []struct {
		name   string
		thread string
		resume []any
		code   subjects.Code
	}{
		{"duplicate entry", "two", []any{ok(a), ok(a), ok(b)}, subjects.CodeDuplicateEntry},
		{"unknown entry", "two", []any{ok(a), ok(b), ok("int-nope")}, subjects.CodeUnknownInterrupt},
		{"missing entry", "two", []any{ok(a)}, subjects.CodeMissingEntry},
		{"payload failing responseSchema", "two", []any{entry(a, "resolved", "yes"), ok(b)}, subjects.CodeSchemaMismatch},
		{"bad status", "two", []any{entry(a, "approved", nil), ok(b)}, subjects.CodeBadInput},
		{"lost state", "never-seen", []any{ok(a)}, subjects.CodeLostState},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := e.run(0, "assistant", map[string]any{"threadId": c.thread, "runId": "x2-" + c.name, "resume": c.resume})
			require.Equal(t, []string{"RUN_ERROR"}, types(evs), "one RUN_ERROR before the run starts")
			assert.Equal(t, string(c.code), evs[0]["code"])
			assert.NotEmpty(t, evs[0]["message"])
		})
	}
	rec := e.runOf(a.(string))
	assert.Len(t, rec.Pending(), 2, "no state changed")

	// Expired but not yet closed (no coordinator to fire the timer): it can
	// be cancelled, not resolved.
	exp := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "exp", "runId": "y1",
		"forwardedProps": props{Timeout: "1s"}}))[0]
	deadline, err := time.Parse(time.RFC3339Nano, exp["expiresAt"].(string))
	require.NoError(t, err)
	_ = e.co.Stop(context.Background())
	require.Eventually(t, func() bool { return time.Now().After(deadline) }, 5*time.Second, 20*time.Millisecond)
	evs := e.run(0, "assistant", map[string]any{"threadId": "exp", "runId": "y2", "resume": []any{ok(exp["id"])}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeExpired), evs[0]["code"])
}

// Issue 12.2: once the expiry timer has closed an interrupt, resolving it
// is refused with expired before the run starts, and cancelling it is
// accepted: the replay the expiry started streams, with the events it
// emitted while no client listened.
func TestExpiredInterrupt(t *testing.T) {
	e := newEnv(t, 1)
	exp := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "exp2", "runId": "z1",
		"forwardedProps": props{Timeout: "1s"}}))[0]
	id := exp["id"].(string)
	run := e.runOf(id).RunID
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	require.Equal(t, subjects.RunCompleted, rec.Status, "the expiry cancelled the interrupt and the run went on")

	evs := e.run(0, "assistant", map[string]any{"threadId": "exp2", "runId": "z2", "resume": []any{entry(id, "resolved", true)}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeExpired), evs[0]["code"])

	evs = e.run(0, "assistant", map[string]any{"threadId": "exp2", "runId": "z3", "resume": []any{entry(id, "cancelled", nil)}})
	require.Equal(t, "RUN_STARTED", evs[0]["type"], "%v", evs)
	assert.Equal(t, map[string]any{"refunded": false}, last(evs)["result"])
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "call_1"), "the replay's event reaches the client: %v", types(evs))
}

// Issue 12.3: on a replay, events emitted between decided interrupts are
// sent (the replay suppresses exactly what the client was already sent).
func TestNoLostEventsBetweenInterrupts(t *testing.T) {
	e := newEnv(t, 1)
	first := e.run(0, "gated", map[string]any{"threadId": "gate", "runId": "g1"})
	ins := interrupts(t, first)
	require.Len(t, ins, 2)
	evs := e.run(0, "gated", map[string]any{"threadId": "gate", "runId": "g2",
		"resume": []any{entry(ins[0]["id"], "resolved", nil), entry(ins[1]["id"], "resolved", nil)}})
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "tool_a"), "the first tool's result is sent: %v", types(evs))
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "tool_b"))
	assert.Equal(t, 0, count(evs, "TOOL_CALL_START", ""), "nothing of the first pass is sent twice")
	assert.Equal(t, 0, count(evs, "TEXT_MESSAGE_START", "")-1, "only the closing text is new")
	assert.Equal(t, "ok", last(evs)["result"])
}

// Issue 27 (5.5): a body whose tool calls each gate, act and report in
// turn: every resume sends the result of the tool just decided and the
// next tool call, and the final transcript holds every result.
func TestStepwiseToolResultsOnReplay(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.runAs(0, adaToken, "stepwise", map[string]any{"threadId": "step", "runId": "s0"})
	seen := slices.Clone(evs)
	for i, tool := range []string{"tool_a", "tool_b", "tool_c"} {
		ins := interrupts(t, evs)
		require.Len(t, ins, 1, "step %d", i)
		assert.Equal(t, tool, ins[0]["toolCallId"])
		evs = e.runAs(0, adaToken, "stepwise", map[string]any{"threadId": "step", "runId": fmt.Sprintf("s%d", i+1),
			"resume": []any{entry(ins[0]["id"], "resolved", nil)}})
		seen = append(seen, evs...)
		assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", tool), "resume %d sends %s's result: %v", i+1, tool, types(evs))
	}
	assert.Equal(t, "ok", last(evs)["result"])
	for _, tool := range []string{"tool_a", "tool_b", "tool_c"} {
		assert.Equal(t, 1, count(seen, "TOOL_CALL_START", tool), "%s announced once", tool)
		assert.Equal(t, 1, count(seen, "TOOL_CALL_RESULT", tool), "%s reported once", tool)
	}
}

// Issue 27 (5.5): the first pass announces and gates three tool calls in
// turn; the replay acts and reports each between the interrupts decided
// before. Every result reaches the client, and no announcement twice.
func TestResultsBetweenDecidedInterrupts(t *testing.T) {
	e := newEnv(t, 1)
	first := e.runAs(0, adaToken, "fanout", map[string]any{"threadId": "fan", "runId": "f1"})
	ins := interrupts(t, first)
	require.Len(t, ins, 3)
	var resume []any
	for _, in := range ins {
		resume = append(resume, entry(in["id"], "resolved", nil))
	}
	evs := e.runAs(0, adaToken, "fanout", map[string]any{"threadId": "fan", "runId": "f2", "resume": resume})
	for _, tool := range []string{"tool_a", "tool_b", "tool_c"} {
		assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", tool), "%s's result is sent: %v", tool, types(evs))
		for _, typ := range []string{"TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"} {
			assert.Equal(t, 0, count(evs, typ, tool), "%s of %s is not sent again", typ, tool)
		}
	}
	assert.Equal(t, 1, count(evs, "TEXT_MESSAGE_START", ""))
	assert.Equal(t, "ok", last(evs)["result"])
}

// Issue 12.3: events emitted while no client listened (decided from the
// CLI) reach the client on the next request on the thread.
func TestEventsWhileAwayReachNextRun(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w1"}))[0]["id"].(string)
	// Without resume while it waits: the same interrupt again, never abandoned.
	waiting := e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w1b"})
	assert.Equal(t, id, interrupts(t, waiting)[0]["id"])
	held := find(waiting, "MESSAGES_SNAPSHOT")["messages"] // what the client holds
	run := e.runOf(id).RunID

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved, Payload: true})
	require.NoError(t, err)
	_, err = e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)

	// Issue 12.6: a resume for interrupts that no longer wait.
	evs := e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w2", "resume": []any{entry(id, "resolved", true)}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeNotInterrupted), evs[0]["code"])

	// The next run on the thread first delivers what the replay emitted
	// while nobody listened, then starts afresh.
	evs = e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w3", "messages": held})
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "call_1"), "%v", types(evs))
	assert.Len(t, interrupts(t, evs), 1)
	consistent(t, find(evs, "MESSAGES_SNAPSHOT")["messages"].([]any))
	// Delivered once: the run after that does not send them again.
	next := interrupts(t, evs)[0]["id"]
	evs = e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w4", "resume": []any{entry(next, "cancelled", nil)}})
	assert.Equal(t, 1, count(evs, "TOOL_CALL_RESULT", "call_1"), "%v", evs)
	assert.Equal(t, "not refunded", find(evs, "TOOL_CALL_RESULT")["content"])
}

// Issue 12.6: a resume naming an interrupt decided elsewhere, while the run
// asks a new question, is not_interrupted, not unknown_interrupt.
func TestResumeDecidedWhileRunAsksAgain(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "sequential", map[string]any{"threadId": "again", "runId": "q1"}))[0]["id"].(string)
	run := e.runOf(id).RunID
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved})
	require.NoError(t, err)
	_, err = e.client.Wait(ctx, run, func(r *subjects.Run) bool { return len(r.Pending()) > 0 && r.Pass == 1 })
	require.NoError(t, err)
	evs := e.run(0, "sequential", map[string]any{"threadId": "again", "runId": "q2", "resume": []any{entry(id, "resolved", nil)}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeNotInterrupted), evs[0]["code"])
	assert.Contains(t, evs[0]["message"], "no longer waits")
}

// Issue 12.4: every entry is authorized before RUN_STARTED; one the caller
// may not decide refuses the batch and decides nothing.
func TestBatchAuthorization(t *testing.T) {
	e := newEnv(t, 1)
	ins := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "auth", "runId": "b1",
		"forwardedProps": props{Two: true, Approvers: []string{"ada"}}}))
	require.Len(t, ins, 2)
	assert.Equal(t, "Refund 40?", ins[0]["message"], "eve reads the interrupt she may decide")
	assert.Equal(t, map[string]any{"id": ins[1]["id"], "reason": "tool_call", "toolCallId": "call_2",
		"metadata": map[string]any{"interlock.withheld": true}}, ins[1], "and not ada's: its id, reason and tool call only")
	evs := e.run(0, "assistant", map[string]any{"threadId": "auth", "runId": "b2",
		"resume": []any{entry(ins[0]["id"], "resolved", true), entry(ins[1]["id"], "resolved", nil)}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs), "refused before the run starts")
	assert.Equal(t, string(subjects.CodeNotAllowed), evs[0]["code"])
	rec := e.runOf(ins[0]["id"].(string))
	assert.Len(t, rec.Pending(), 2, "the allowed entry was not applied either")

	// ada decides hers elsewhere; eve's batch of the one left goes through.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: rec.RunID, InterruptID: ins[1]["id"].(string),
		Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	evs = e.run(0, "assistant", map[string]any{"threadId": "auth", "runId": "b3",
		"resume": []any{entry(ins[0]["id"], "resolved", true)}})
	assert.Equal(t, map[string]any{"type": "success"}, last(evs)["outcome"], "%v", evs)
}

// Issue 12.5: the endpoint authenticates, each identity starts only its
// agents, a thread belongs to its creator, and the client's runId is never
// an Interlock run id.
func TestOwnership(t *testing.T) {
	e := newEnv(t, 1)
	for _, token := range []string{"", "not-a-token"} {
		resp := e.post(0, token, "assistant", map[string]any{"threadId": "o", "runId": "o1"})
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		assert.Contains(t, string(body), `"code":"unauthenticated"`)
	}
	evs := e.runAs(0, malToken, "assistant", map[string]any{"threadId": "o", "runId": "o1"})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeAgentNotAllowed), evs[0]["code"])

	first := e.run(0, "assistant", map[string]any{"threadId": "mine", "runId": "o1"})
	id := interrupts(t, first)[0]["id"].(string)
	run := e.runOf(id).RunID
	assert.NotEqual(t, "o1", run, "the server mints the run id")
	_, err := e.client.Run(context.Background(), "o1")
	assert.ErrorIs(t, err, processor.ErrRunNotFound)

	// Another identity can neither follow nor resume eve's thread.
	for _, in := range []map[string]any{
		{"threadId": "mine", "runId": "x1"},
		{"threadId": "mine", "runId": "x2", "resume": []any{entry(id, "cancelled", nil)}},
	} {
		evs := e.runAs(0, adaToken, "assistant", in)
		require.Equal(t, []string{"RUN_ERROR"}, types(evs))
		assert.Equal(t, string(subjects.CodeNotOwner), evs[0]["code"])
		assert.NotContains(t, fmt.Sprint(evs), "Refund 40", "nothing of the thread is shown")
	}
	// Each refusal of who may do what is in the audit trail, as the
	// gateway's other refusals are.
	refusals := func() map[subjects.Code][]string {
		evs, err := e.client.Events(context.Background(), subjects.NoRun)
		require.NoError(t, err)
		by := map[subjects.Code][]string{}
		for _, ev := range evs {
			if ev.Type == subjects.EventAccessRefused {
				by[ev.Code] = append(by[ev.Code], ev.Identity)
			}
		}
		return by
	}
	require.Eventually(t, func() bool { return len(refusals()[subjects.CodeNotOwner]) == 2 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, map[subjects.Code][]string{subjects.CodeUnauthenticated: {""}, // the bad token
		subjects.CodeAgentNotAllowed: {"mal"}, subjects.CodeNotOwner: {"ada", "ada"}}, refusals())
	// A new thread naming eve's Interlock run id as its runId gets a run
	// of its own; eve's run is untouched.
	evs = e.runAs(0, adaToken, "assistant", map[string]any{"threadId": "other", "runId": run})
	other := interrupts(t, evs)[0]["id"].(string)
	assert.NotEqual(t, id, other)
	assert.Len(t, e.runOf(id).Pending(), 1, "eve's interrupt still waits")
}

// A thread runs one agent: a request on it naming another is refused.
func TestThreadKeepsItsAgent(t *testing.T) {
	e := newEnv(t, 1)
	interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "one", "runId": "k1"}))
	evs := e.run(0, "gated", map[string]any{"threadId": "one", "runId": "k2"})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, string(subjects.CodeBadInput), evs[0]["code"])
}

// Issue 12.5: re-sending a request that already finished is answered at
// once, from where the run stands, and starts nothing.
func TestResentRequestAnsweredAtOnce(t *testing.T) {
	e := newEnv(t, 1)
	req1 := map[string]any{"threadId": "re", "runId": "r1"}
	id := interrupts(t, e.run(0, "assistant", req1))[0]["id"].(string)
	run := e.runOf(id).RunID
	req2 := map[string]any{"threadId": "re", "runId": "r2", "resume": []any{entry(id, "resolved", true)}}
	done := e.run(0, "assistant", req2)
	require.Equal(t, map[string]any{"type": "success"}, last(done)["outcome"])
	for _, in := range []map[string]any{req1, req2} {
		in["messages"] = nil
		delete(in, "messages")
		evs := e.run(0, "assistant", in)
		assert.Equal(t, "RUN_STARTED", evs[0]["type"])
		assert.Equal(t, map[string]any{"type": "success"}, last(evs)["outcome"], "%v", evs)
		assert.Equal(t, in["runId"], last(evs)["runId"])
		assert.Equal(t, 0, count(evs, "TOOL_CALL_RESULT", ""), "nothing is sent twice")
	}
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	assert.Equal(t, 1, rec.Pass, "no pass ran again")
}

// Concurrent requests on one thread lose none of each other's updates to
// the thread record (compare-and-set): every runId they were answered with
// is remembered, so each re-sent request is answered from its run and
// starts nothing.
func TestConcurrentRequestsOnAThread(t *testing.T) {
	e := newEnv(t, 2)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "busy", "runId": "c0"}))[0]["id"].(string)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			body, _ := json.Marshal(map[string]any{"threadId": "busy", "runId": fmt.Sprint("c", i+1), "messages": []any{}})
			req, _ := http.NewRequest(http.MethodPost, e.gateways[i%2].URL+"/agui/assistant", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+eveToken)
			resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
			if err == nil {
				var all []byte
				all, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && !strings.Contains(string(all), `"type":"interrupt"`) {
					err = fmt.Errorf("no interrupt outcome: %s", all)
				}
			}
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	run := e.runOf(id).RunID
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved, Payload: true})
	require.NoError(t, err)
	_, err = e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	for i := range n {
		evs := e.run(0, "assistant", map[string]any{"threadId": "busy", "runId": fmt.Sprint("c", i+1)})
		assert.Equal(t, map[string]any{"type": "success"}, last(evs)["outcome"], "c%d was forgotten: %v", i+1, types(evs))
	}
	runs, err := e.client.Runs(ctx)
	require.NoError(t, err)
	assert.Len(t, runs, 1, "no request started a run")
}

// A resume can land on any gateway: the state is in JetStream.
func TestResumeOnAnotherGateway(t *testing.T) {
	e := newEnv(t, 2)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "lb", "runId": "l1"}))[0]["id"]
	evs := e.run(1, "assistant", map[string]any{"threadId": "lb", "runId": "l2",
		"resume": []any{entry(id, "resolved", true)}})
	assert.Equal(t, map[string]any{"type": "success"}, last(evs)["outcome"])
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, 1)
	req, _ := http.NewRequest(http.MethodPost, e.gateways[0].URL+"/agui/assistant", strings.NewReader(`{"threadId":`))
	req.Header.Set("Authorization", "Bearer "+eveToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `"code":"bad_input"`)
	evs := e.runAs(0, adaToken, "bad.agent", map[string]any{"threadId": "t", "runId": "r"})
	assert.Equal(t, string(subjects.CodeBadInput), evs[0]["code"])
}

// Attack (security review): "Nothing is decided unless every entry passes." A batch
// whose second entry passes the bridge's check (a resolve without payload,
// which the bridge checks as null, against a schema that accepts null) but
// that the coordinator refuses (a resolve of an interrupt with a
// responseSchema needs a payload) leaves the first entry decided.
func TestBatchNeverDecidedInPart(t *testing.T) {
	e := newEnv(t, 1)
	w := processor.NewWorker(jstest.Client(t, e.srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("nullable", func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, errA := processor.Interrupt(processor.WithToolCall(ctx, "a"), processor.Request{Message: "first?"})
		_, errB := processor.Interrupt(processor.WithToolCall(ctx, "b"), processor.Request{Message: "second?",
			ResponseSchema: map[string]any{"type": []string{"boolean", "null"}}})
		if errA != nil {
			return nil, errA
		}
		return nil, errB
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	ins := interrupts(t, e.runAs(0, adaToken, "nullable", map[string]any{"threadId": "partial", "runId": "p1"}))
	require.Len(t, ins, 2)
	evs := e.runAs(0, adaToken, "nullable", map[string]any{"threadId": "partial", "runId": "p2",
		"resume": []any{entry(ins[0]["id"], "resolved", nil), entry(ins[1]["id"], "resolved", nil)}})
	t.Logf("events: %v", evs)
	rec := e.runOf(ins[0]["id"].(string))
	decided := 0
	for _, in := range rec.Interrupts {
		if in.Decision != nil {
			decided++
		}
	}
	assert.Contains(t, []int{0, 2}, decided, "a batch is decided whole or not at all: %v", rec.Interrupts)
}

// Attack (security review): the bridge shows the thread owner the run's interrupts, their
// messages and metadata, without the one authorization rule: ada may not
// read this run on the gateway (403: it asks nothing she may decide), but
// the bridge's RUN_FINISHED hands her eve's interrupt in full.
func TestBridgeShowsOnlyWhatAuthzLetsRead(t *testing.T) {
	e := newEnv(t, 1)
	w := processor.NewWorker(jstest.Client(t, e.srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("foreve", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return processor.Interrupt(ctx, processor.Request{Message: "eve: wire 9000 to account 12-345?",
			Approvers: []string{"eve"}, Metadata: map[string]any{"account": "12-345"}})
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	evs := e.runAs(0, adaToken, "foreve", map[string]any{"threadId": "t-read", "runId": "r1"})
	ins := interrupts(t, evs)
	require.Len(t, ins, 1)
	run := e.runOf(ins[0]["id"].(string)).RunID

	req, _ := http.NewRequest(http.MethodGet, e.gateways[0].URL+"/v1/runs/"+run, nil)
	req.Header.Set("Authorization", "Bearer "+adaToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the gateway: ada may not read the run")
	assert.NotContains(t, fmt.Sprint(evs), "12-345", "the bridge: nor should it show her the run's interrupt")
}

// Attack (security review): after eve's interrupt expired, ada, who started
// the run but may not decide it, cancels it in a resume batch. The bridge
// checked the expiry before authorization and passed the batch on. It asks
// the authorization rule first: not_allowed, before the run starts.
func TestCancelExpiredNeedsAuthority(t *testing.T) {
	e := newEnv(t, 1)
	w := processor.NewWorker(jstest.Client(t, e.srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("timed", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return processor.Interrupt(ctx, processor.Request{Message: "eve only", Approvers: []string{"eve"},
			Timeout: 300 * time.Millisecond})
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	ins := interrupts(t, e.runAs(0, adaToken, "timed", map[string]any{"threadId": "expired", "runId": "t1"}))
	require.Len(t, ins, 1)
	id := ins[0]["id"].(string)
	require.Eventually(t, func() bool {
		for _, in := range e.runOf(id).Interrupts {
			if in.ID == id && in.Decision != nil {
				return in.Decision.Approver == subjects.ExpiryApprover
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the interrupt expires")

	evs := e.runAs(0, adaToken, "timed", map[string]any{"threadId": "expired", "runId": "t2",
		"resume": []any{entry(id, "cancelled", nil)}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs), "refused before the run starts: %v", evs)
	assert.Equal(t, string(subjects.CodeNotAllowed), evs[0]["code"])
}
