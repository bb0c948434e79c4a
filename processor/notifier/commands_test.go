package notifier

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// words splits command as a POSIX shell does when it is pasted.
func words(t *testing.T, command string) []string {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", "set -- "+command+`; printf '%s\0' "$@"`).Output()
	require.NoError(t, err, command)
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// The commands in a notification work when pasted into a shell: the
// payload is valid JSON shaped by the responseSchema and filled from the
// tool's arguments, and a personal notification decides as its person.
func TestCommandsWorkWhenPasted(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","required":["amount","currency"],"properties":{` +
		`"amount":{"type":"number","minimum":1},"currency":{"enum":["USD","EUR"]},"note":{"type":"string"},"fast":{"type":"boolean"}}}`
	s := &subjects.Suspension{PassRef: subjects.PassRef{RunID: "run-1", Agent: "refunds"}, Interrupts: []subjects.Interrupt{{
		ID: "int-1", Reason: subjects.ReasonToolCall, Approvers: []string{"ada", "bob"}, ResponseSchema: json.RawMessage(schema),
		Metadata: json.RawMessage(`{"tool":"issue_refund","arguments":{"amount":12.5,"note":"it's \"ok\"; $(rm -rf /)","order":"A-7"}}`),
	}, {
		ID: "int-2", Reason: subjects.ReasonInputRequired, ResponseSchema: json.RawMessage(`{"enum":[3,4]}`),
	}}}
	cfg := &Config{NATSURL: "nats://127.0.0.1:4222"}

	for _, personal := range []string{"ada", ""} {
		d := decideHints(cfg, s, personal, func(subjects.Interrupt) []LinkPair { return nil })
		approve := words(t, d[0].ApproveCommand)
		assert.Equal(t, []string{"interlock", "--nats-url", "nats://127.0.0.1:4222", "approve", "run-1", "int-1"}, approve[:6])
		payload, ok := flagValue(approve, "--payload")
		require.True(t, ok, d[0].ApproveCommand)
		assert.JSONEq(t, `{"amount":12.5,"currency":"USD","note":"it's \"ok\"; $(rm -rf /)"}`, payload,
			"the arguments where names match, the first choice, and nothing for the rest")
		deny := words(t, d[0].DenyCommand)
		assert.Equal(t, []string{"interlock", "--nats-url", "nats://127.0.0.1:4222", "deny", "run-1", "int-1"}, deny[:6])
		who, named := flagValue(approve, "--approver")
		denyWho, _ := flagValue(deny, "--approver")
		if personal == "" {
			assert.False(t, named, "a shared channel does not know who pastes it")
		} else {
			assert.Equal(t, "ada", who)
			assert.Equal(t, "ada", denyWho)
		}
		payload, ok = flagValue(words(t, d[1].ApproveCommand), "--payload")
		require.True(t, ok)
		assert.Equal(t, "3", payload)
	}
}

// An interrupt's responseSchema and metadata come from agents: whatever
// they hold, the example answer in a command is valid JSON, an object when
// the schema asks for one with properties.
func FuzzExamplePayload(f *testing.F) {
	f.Add(`{"type":"object","required":["a"],"properties":{"a":{"enum":[1,"x"]},"b":{"type":"integer","minimum":2}}}`,
		`{"arguments":{"a":"x","b":2.5}}`)
	f.Add(`{"type":["string","null"]}`, `null`)
	f.Add(`{"type":"object","properties":{"a":{"type":"number","minimum":1e999}}}`, `{"arguments":[]}`)
	f.Fuzz(func(t *testing.T, schema, metadata string) {
		out := examplePayload(json.RawMessage(schema), json.RawMessage(metadata))
		if !json.Valid([]byte(out)) {
			t.Fatalf("schema %s, metadata %s: %q is not JSON", schema, metadata, out)
		}
		var s property
		if json.Unmarshal([]byte(schema), &s) == nil && s.Type == "object" && len(s.Properties) > 0 && out[0] != '{' {
			t.Fatalf("schema %s: %s is not an object", schema, out)
		}
	})
}
