package agui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// assistant emits a message and a tool call, asks before running the tool,
// and reports the tool's result against the original tool call.
func assistant(ctx context.Context, raw json.RawMessage) (any, error) {
	var in RunAgentInput
	_ = json.Unmarshal(raw, &in)
	var props struct {
		Two     bool
		Timeout string
	}
	_ = json.Unmarshal(in.ForwardedProps, &props)
	_ = processor.EmitText(ctx, "m1", "Let me check that refund.")
	_ = processor.EmitToolCall(ctx, "call_1", "issue_refund", `{"amount":40}`)
	req := processor.Request{Reason: subjects.ReasonToolCall, Message: "Refund 40?",
		ResponseSchema: map[string]any{"type": "boolean"}, Metadata: map[string]any{"arguments": map[string]any{"amount": 40}}}
	if props.Timeout != "" {
		req.Timeout, _ = time.ParseDuration(props.Timeout)
	}
	d, err := processor.Interrupt(processor.WithToolCall(ctx, "call_1"), req)
	var second error
	if props.Two {
		_, second = processor.Interrupt(processor.WithToolCall(ctx, "call_2"), processor.Request{Message: "Also email?"})
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

type env struct {
	co      *processor.Coordinator
	t       *testing.T
	srv     *embedded.Server
	bridges []*httptest.Server
	client  *processor.Client
}

func newEnv(t *testing.T, bridges int) *env {
	e := &env{t: t, srv: jstest.Server(t)}
	nc := jstest.Client(t, e.srv)
	e.client = processor.NewClient(nc)
	co := processor.NewCoordinator(jstest.Client(t, e.srv), processor.CoordinatorConfig{Logger: quiet})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(co.Stop)
	e.co = co
	w := processor.NewWorker(jstest.Client(t, e.srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("assistant", assistant))
	require.NoError(t, w.Register("echo", func(ctx context.Context, raw json.RawMessage) (any, error) {
		_ = processor.EmitText(ctx, "e1", "hello")
		return "plain", nil
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	for range bridges { // several gateway processes, each its own connection
		b, err := New(context.Background(), jstest.Client(t, e.srv), quiet)
		require.NoError(t, err)
		b.Wait = 20 * time.Second
		mux := http.NewServeMux()
		mux.Handle("POST /agui/{agent}", b)
		hs := httptest.NewServer(mux)
		t.Cleanup(hs.Close)
		e.bridges = append(e.bridges, hs)
	}
	return e
}

// run posts a RunAgentInput to bridge i and returns the events received.
func (e *env) run(i int, agent string, in map[string]any) []map[string]any {
	e.t.Helper()
	if _, ok := in["messages"]; !ok {
		in["messages"] = []any{map[string]any{"id": "u1", "role": "user", "content": "refund my order"}}
	}
	body, _ := json.Marshal(in)
	resp, err := http.Post(e.bridges[i].URL+"/agui/"+agent, "application/json", bytes.NewReader(body))
	require.NoError(e.t, err)
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
	return events
}

func types(evs []map[string]any) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev["type"].(string))
	}
	return out
}

func last(evs []map[string]any) map[string]any { return evs[len(evs)-1] }

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
		"resume": []any{map[string]any{"interruptId": ins[0]["id"], "status": "resolved", "payload": false}}})
	assert.Equal(t, []string{"RUN_STARTED", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
		"TEXT_MESSAGE_END", "RUN_FINISHED"}, types(evs), "the replay does not send the first pass's events again")
	assert.Equal(t, "call_1", evs[1]["toolCallId"], "the result goes to the original tool call")
	fin := last(evs)
	assert.Equal(t, map[string]any{"type": "success"}, fin["outcome"])
	assert.Equal(t, map[string]any{"refunded": true, "payload": false}, fin["result"])
	assert.Equal(t, "r2", fin["runId"])
}

func TestResumeCancelled(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "t", "runId": "a"}))[0]["id"]
	evs := e.run(0, "assistant", map[string]any{"threadId": "t", "runId": "b",
		"resume": []any{map[string]any{"interruptId": id, "status": "cancelled"}}})
	assert.Equal(t, map[string]any{"refunded": false}, last(evs)["result"])
	assert.Equal(t, "TOOL_CALL_RESULT", evs[1]["type"])
}

func TestPlainRunFinishesAsBefore(t *testing.T) {
	e := newEnv(t, 1)
	evs := e.run(0, "echo", map[string]any{"threadId": "p", "runId": "p1"})
	assert.Equal(t, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}, types(evs))
	assert.Equal(t, "plain", last(evs)["result"])
}

// Every resume rule refuses the whole batch with one RUN_ERROR before the
// run starts, and changes nothing.
func TestResumeRules(t *testing.T) {
	e := newEnv(t, 1)
	two := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "two", "runId": "x1", "forwardedProps": map[string]any{"Two": true}}))
	require.Len(t, two, 2)
	a, b := two[0]["id"], two[1]["id"]
	ok := func(id any) map[string]any {
		return map[string]any{"interruptId": id, "status": "resolved", "payload": true}
	}
	cases := []struct {
		name   string
		thread string
		resume []any
		code   string
	}{
		{"duplicate entry", "two", []any{ok(a), ok(a), ok(b)}, CodeDuplicateEntry},
		{"unknown entry", "two", []any{ok(a), ok(b), ok("int-nope")}, CodeUnknownInterrupt},
		{"missing entry", "two", []any{ok(a)}, CodeMissingEntry},
		{"payload failing responseSchema", "two", []any{map[string]any{"interruptId": a, "status": "resolved", "payload": "yes"}, ok(b)}, CodeSchemaMismatch},
		{"bad status", "two", []any{map[string]any{"interruptId": a, "status": "approved"}, ok(b)}, CodeBadInput},
		{"lost state", "never-seen", []any{ok(a)}, CodeLostState},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := e.run(0, "assistant", map[string]any{"threadId": c.thread, "runId": "x2", "resume": c.resume})
			require.Equal(t, []string{"RUN_ERROR"}, types(evs), "one RUN_ERROR before the run starts")
			assert.Equal(t, c.code, evs[0]["code"])
			assert.NotEmpty(t, evs[0]["message"])
		})
	}
	rec, err := e.client.Run(context.Background(), "x1")
	require.NoError(t, err)
	assert.Len(t, rec.Pending(), 2, "no state changed")

	// Expired: it can be cancelled, not resolved.
	exp := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "exp", "runId": "y1",
		"forwardedProps": map[string]any{"Timeout": "1s"}}))[0]
	deadline, err := time.Parse(time.RFC3339Nano, exp["expiresAt"].(string))
	require.NoError(t, err)
	// Hold the expiry timer back (no coordinator), so the interrupt is
	// past its deadline but still open.
	e.co.Stop()
	require.Eventually(t, func() bool { return time.Now().After(deadline) }, 5*time.Second, 20*time.Millisecond)
	evs := e.run(0, "assistant", map[string]any{"threadId": "exp", "runId": "y2", "resume": []any{ok(exp["id"])}})
	require.Equal(t, []string{"RUN_ERROR"}, types(evs))
	assert.Equal(t, CodeExpired, evs[0]["code"])
}

// Decided on another path while the AG-UI client was away: the next run on
// the thread (without resume) shows where the run got to; a resume is
// refused because nothing waits.
func TestDecidedElsewhere(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w1"}))[0]["id"].(string)
	// Without resume while it waits: the same interrupt again, never abandoned.
	again := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w1b"}))
	assert.Equal(t, id, again[0]["id"])

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := e.client.Decide(ctx, processor.DecisionRequest{RunID: "w1", InterruptID: id, Status: subjects.StatusResolved, Payload: true})
	require.NoError(t, err)
	_, err = e.client.Wait(ctx, "w1", processor.Finished)
	require.NoError(t, err)

	evs := e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w2",
		"resume": []any{map[string]any{"interruptId": id, "status": "resolved", "payload": true}}})
	assert.Equal(t, CodeNotInterrupted, evs[0]["code"])
	// A new run on the thread starts afresh.
	evs = e.run(0, "assistant", map[string]any{"threadId": "away", "runId": "w3"})
	assert.Len(t, interrupts(t, evs), 1)
}

// A resume can land on any gateway: the state is in JetStream.
func TestResumeOnAnotherGateway(t *testing.T) {
	e := newEnv(t, 2)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "lb", "runId": "l1"}))[0]["id"]
	evs := e.run(1, "assistant", map[string]any{"threadId": "lb", "runId": "l2",
		"resume": []any{map[string]any{"interruptId": id, "status": "resolved", "payload": true}}})
	assert.Equal(t, map[string]any{"type": "success"}, last(evs)["outcome"])
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, 1)
	resp, err := http.Post(e.bridges[0].URL+"/agui/assistant", "application/json", strings.NewReader(`{"threadId":`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `"code":"bad_input"`)
	evs := e.run(0, "bad.agent", map[string]any{"threadId": "t", "runId": "r"})
	assert.Equal(t, CodeBadInput, evs[0]["code"])
}
