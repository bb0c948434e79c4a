package agui

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decode(t testing.TB, s string) []map[string]any {
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &out))
	return out
}

func TestFold(t *testing.T) {
	base := decode(t, `[{"id":"u1","role":"user","content":"hi"},{"id":"m1","role":"assistant","content":"stale"}]`)
	events := decode(t, `[
		{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"},
		{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Let me "},
		{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"check."},
		{"type":"TEXT_MESSAGE_END","messageId":"m1"},
		{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"refund","parentMessageId":"m1"},
		{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\"a\":"},
		{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"1}"},
		{"type":"TOOL_CALL_END","toolCallId":"c1"},
		{"type":"TOOL_CALL_START","toolCallId":"c2","toolCallName":"email"},
		{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"c1","content":"done","role":"tool"},
		{"type":"STATE_DELTA","delta":[]}
	]`)
	want := decode(t, `[
		{"id":"u1","role":"user","content":"hi"},
		{"id":"m1","role":"assistant","content":"Let me check.","toolCalls":[
			{"id":"c1","type":"function","function":{"name":"refund","arguments":"{\"a\":1}"}}]},
		{"id":"c2","role":"assistant","toolCalls":[{"id":"c2","type":"function","function":{"name":"email","arguments":""}}]},
		{"id":"r1","role":"tool","toolCallId":"c1","content":"done"}
	]`)
	got, err := json.Marshal(fold(base, events))
	require.NoError(t, err)
	wantJSON, _ := json.Marshal(want)
	assert.JSONEq(t, string(wantJSON), string(got))
}

// FuzzFold feeds fold hostile messages and events: it must not panic, must
// keep every base message, and must give every message an id.
func FuzzFold(f *testing.F) {
	f.Add(`[{"id":"u1","role":"user","content":"hi"}]`,
		`[{"type":"TOOL_CALL_START","toolCallId":"c","parentMessageId":"u1"},{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"x"}]`)
	f.Add(`[{"id":7}]`, `[{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":3},{"type":"TOOL_CALL_RESULT","messageId":"u1"}]`)
	f.Fuzz(func(t *testing.T, baseJSON, eventsJSON string) {
		var base, events []map[string]any
		if json.Unmarshal([]byte(baseJSON), &base) != nil || json.Unmarshal([]byte(eventsJSON), &events) != nil {
			return
		}
		out := fold(base, events)
		if len(out) < len(base) {
			t.Fatalf("fold dropped base messages: %d < %d", len(out), len(base))
		}
		for _, m := range out[len(base):] {
			if id, _ := m["id"].(string); id == "" {
				t.Fatalf("message without id: %v", m)
			}
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatal(err)
		}
	})
}
