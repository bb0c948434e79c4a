package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// hostile is agent- or approver-supplied text written to take over the
// terminal it is printed on: set the window title (OSC 0, ended by BEL),
// erase the line, return the cursor and write over it, hide what follows
// (SGR 8), a C1 CSI, and a right-to-left override.
const hostile = "\x1b]0;pwned\a\x1b[2K\rapproved by ada\x1b[8m hidden \u009b31m\u202eevil\u2028x"

// raw are the sequences none of which may reach the terminal as they are.
var raw = []string{"\x1b", "\r", "\a", "\u009b", "\u202e", "\u2028"}

// TestAttackTerminalEscapes is issue 23's finding 11: an agent's message
// with terminal escape sequences reached the terminal raw in `interlock
// show` and `interlock pending`. Every human output of the CLI prints
// outside text through printable; --json stays exact JSON.
func TestAttackTerminalEscapes(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url, stop := srv.URL, srv.Stop
	defer func() { assert.Equal(t, 0, stop()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	// The agent suspends with hostile text in its message and metadata.
	susp, err := json.Marshal(subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-esc", Agent: "esc"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Message: hostile,
			Metadata: json.RawMessage(`{"note":` + mustJSON(t, hostile) + `}`)}}})
	require.NoError(t, err)
	subject, err := conn.Namespace().Suspended("esc", "run-esc")
	require.NoError(t, err)
	_, err = conn.Publish(ctx, subject, susp, "run-esc:0", nil)
	require.NoError(t, err)
	api := processor.NewClient(conn)
	_, err = api.Wait(ctx, "run-esc", processor.Suspended)
	require.NoError(t, err)
	// The coordinator puts the index entry after the record it follows
	// from: `pending` lists it once it is there.
	require.Eventually(t, func() bool {
		p, err := api.Pending(ctx)
		return err == nil && len(p) == 1
	}, 20*time.Second, 20*time.Millisecond, "the suspension listed")

	check := func(args ...string) result {
		t.Helper()
		r := cli(t, append(args, "--nats-url", url)...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.err)
		for _, s := range raw {
			assert.NotContains(t, r.out, s, "%v prints %q raw:\n%s", args, s, r.out)
			assert.NotContains(t, r.err, s, "%v prints %q raw on stderr", args, s)
		}
		return r
	}
	r := check("pending")
	assert.Contains(t, r.out, `\x1b]0;pwned\a\x1b[2K\rapproved by ada\x1b[8m`, "escaped, and still readable")
	check("show", "run-esc")
	check("pending", "--json")

	// The approver answers with hostile text; the agent's pass fails with it.
	v, err := api.Decide(ctx, processor.DecisionRequest{RunID: "run-esc", InterruptID: "ask",
		Status: subjects.StatusResolved, Payload: hostile, Comment: hostile})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	failed, err := json.Marshal(subjects.Failure{PassRef: subjects.PassRef{Version: 1, RunID: "run-esc", Agent: "esc", Pass: 1},
		Error: hostile})
	require.NoError(t, err)
	subject, err = conn.Namespace().Failed("esc", "run-esc")
	require.NoError(t, err)
	_, err = conn.Publish(ctx, subject, failed, "run-esc:1", nil)
	require.NoError(t, err)
	rec, err := api.Wait(ctx, "run-esc", processor.Finished)
	require.NoError(t, err)
	require.Equal(t, subjects.RunFailed, rec.Status)

	r = check("show", "run-esc")
	assert.Contains(t, r.out, `error    \x1b]0;pwned\a\x1b[2K\rapproved by ada`)
	check("history", "run-esc")
	check("history", "run-esc", "--json")
	check("runs")

	// --json is exact JSON: the same strings, escaped by the encoder.
	r = check("show", "run-esc", "--json")
	var got subjects.Run
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	assert.Equal(t, hostile, got.Error)
	assert.Equal(t, hostile, got.Interrupts[0].Message)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// printable escapes every control character, C1 included, and the Unicode
// bidi and line-separator controls; everything else is kept.
func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ümlaut, 日本": "plain text, ümlaut, 日本",
		"a\nb\tc\rd":             `a\nb\tc\rd`,
		"\x1b[2K\a\x00\x7f":      `\x1b[2K\a\x00\x7f`,
		"\u009b31m":              `\u009b31m`,
		"\u202eevil\u2066\u200f": `\u202eevil\u2066\u200f`,
		"\u2028\u2029":           `\u2028\u2029`,
		"bad \xff utf-8":         `bad \xff utf-8`,
	} {
		assert.Equal(t, want, printable(in), "%q", in)
	}
	assert.False(t, strings.ContainsAny(printable(hostile), strings.Join(raw, "")))
}

// `interlock watch` prints events as they come: escaped for people, exact
// JSON for machines.
func TestWatchEscapes(t *testing.T) {
	t.Parallel()
	ev := subjects.Event{Type: subjects.EventFailed, RunID: "run-1", Detail: hostile, At: time.Now()}
	for _, asJSON := range []bool{false, true} {
		var b strings.Builder
		printWatched(&b, asJSON, ev)
		for _, s := range raw {
			assert.NotContains(t, b.String(), s, "json %v", asJSON)
		}
		if asJSON {
			var got subjects.Event
			require.NoError(t, json.Unmarshal([]byte(b.String()), &got))
			assert.Equal(t, hostile, got.Detail)
		}
	}
}
