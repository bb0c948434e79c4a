package subjects_test

import (
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

func TestValidateToken(t *testing.T) {
	good := []string{"a", "refunds", "run-1", "01J9ZK_x", strings.Repeat("a", subjects.MaxTokenLen)}
	for _, s := range good {
		assert.NoError(t, subjects.ValidateToken("agent", s), s)
	}
	bad := map[string]string{
		"":         "empty",
		"a.b":      "'.'",
		"a*":       "wildcard",
		"a>":       "wildcard",
		"a b":      "whitespace",
		"a\tb":     "whitespace",
		"a\u00a0b": "whitespace",
		"a\x00b":   "control",
		"a/b":      `'/'`,
		"caf\xe9":  "invalid UTF-8",
		"é":        `'é'`,
		strings.Repeat("a", subjects.MaxTokenLen+1): "longer than",
	}
	for s, want := range bad {
		err := subjects.ValidateToken("agent", s)
		require.ErrorIs(t, err, subjects.ErrInvalidToken, "%q", s)
		assert.Contains(t, err.Error(), want, "%q", s)
	}
}

func TestNamespaceBuildAndParse(t *testing.T) {
	ns, err := subjects.New("acme.interlock")
	require.NoError(t, err)
	cases := []struct {
		build func() (string, error)
		want  subjects.Address
	}{
		{func() (string, error) { return ns.Work("refunds") }, subjects.Address{Kind: "work", Agent: "refunds"}},
		{func() (string, error) { return ns.Start("refunds") }, subjects.Address{Kind: "start", Agent: "refunds"}},
		{func() (string, error) { return ns.Suspended("refunds", "r1") }, subjects.Address{Kind: "suspended", Agent: "refunds", Run: "r1"}},
		{func() (string, error) { return ns.Completed("refunds", "r1") }, subjects.Address{Kind: "completed", Agent: "refunds", Run: "r1"}},
		{func() (string, error) { return ns.Failed("refunds", "r1") }, subjects.Address{Kind: "failed", Agent: "refunds", Run: "r1"}},
		{func() (string, error) { return ns.Resume("r1") }, subjects.Address{Kind: "resume", Run: "r1"}},
		{func() (string, error) { return ns.ResumeAs("r1", "ada") }, subjects.Address{Kind: "resume", Run: "r1", Approver: "ada"}},
		{func() (string, error) { return ns.TimerSchedule("r1", "e-1") }, subjects.Address{Kind: "timers", Run: "r1", Timer: "e-1"}},
		{func() (string, error) { return ns.TimerDue("r1") }, subjects.Address{Kind: "timers", Run: "r1"}},
		{func() (string, error) { return ns.Notice(subjects.KindReminder, "a", "r1") }, subjects.Address{Kind: "reminder", Agent: "a", Run: "r1"}},
		{func() (string, error) { return ns.Events("r1", subjects.EventSuspended) }, subjects.Address{Kind: "events", Run: "r1", Event: "suspended"}},
		{func() (string, error) { return ns.Events(subjects.NoRun, subjects.EventInputRejected) }, subjects.Address{Kind: "events", Run: "_", Event: "input_rejected"}},
		{func() (string, error) { return ns.DeadLetter("coordinator_runs") }, subjects.Address{Kind: "dlq", Source: "coordinator_runs"}},
	}
	for _, c := range cases {
		s, err := c.build()
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(s, "acme.interlock."), s)
		got, err := ns.Parse(s)
		require.NoError(t, err, s)
		assert.Equal(t, c.want, got, s)
	}
}

func TestBuildersRejectBadTokens(t *testing.T) {
	ns := subjects.Default()
	for _, bad := range []string{"", "a.b", "*", ">", "a b"} {
		_, err := ns.Suspended(bad, "r")
		assert.ErrorIs(t, err, subjects.ErrInvalidToken)
		_, err = ns.Suspended("a", bad)
		assert.ErrorIs(t, err, subjects.ErrInvalidToken)
		_, err = ns.Resume(bad)
		assert.ErrorIs(t, err, subjects.ErrInvalidToken)
		_, err = ns.Work(bad)
		assert.ErrorIs(t, err, subjects.ErrInvalidToken)
	}
	_, err := subjects.New("a..b")
	assert.ErrorIs(t, err, subjects.ErrInvalidToken)
}

func TestParseRejects(t *testing.T) {
	ns := subjects.Default()
	for _, s := range []string{
		"other.resume.r1", "interlock", "interlock.", "interlock.nope.x", "interlock.resume",
		"interlock.resume.r1.a.b", "interlock.resume.r1.a b", "interlock.suspended.a", "interlock.resume.r*", "interlock.events.r1.a b",
		"interlock.resume.", "interlock.work..",
	} {
		_, err := ns.Parse(s)
		assert.ErrorIs(t, err, subjects.ErrInvalidSubject, s)
	}
}

func TestDecodeDecision(t *testing.T) {
	d, err := subjects.DecodeDecision([]byte(`{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","payload":false}`))
	require.NoError(t, err)
	assert.Equal(t, "false", string(d.Payload), "false is an answer")

	cases := map[string]subjects.Code{
		``:                 subjects.CodeMalformed,
		`[]`:               subjects.CodeMalformed,
		`{"version":"1"}`:  subjects.CodeUnsupportedVersion,
		`{"version":1} {}`: subjects.CodeMalformed,
		`{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","metadata":[]}`:     subjects.CodeMalformed,
		`{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","approver":"a\nb"}`: subjects.CodeMalformed,
		`{"version":1,"decisionId":"","interruptId":"i","status":"resolved"}`:                    subjects.CodeMalformed,
		`{"version":1,"decisionId":"d","interruptId":"i","status":1}`:                            subjects.CodeMalformed,
	}
	for in, code := range cases {
		_, err := subjects.DecodeDecision([]byte(in))
		require.Error(t, err, in)
		assert.Equal(t, code, subjects.CodeOf(err), "%s: %v", in, err)
		var pe *subjects.ProtocolError
		assert.True(t, errors.As(err, &pe), in)
	}
	big := `{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","payload":"` +
		strings.Repeat("x", subjects.MaxDecisionSize) + `"}`
	_, err = subjects.DecodeDecision([]byte(big))
	assert.ErrorIs(t, err, subjects.ErrTooLarge)
}

func TestDecodeSuspension(t *testing.T) {
	ok := `{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"tool_call","responseSchema":{"type":"string"}}],"journal":{"/s#0":null}}`
	s, err := subjects.DecodeSuspension([]byte(ok))
	require.NoError(t, err)
	assert.Len(t, s.Interrupts, 1)
	bad := []string{
		`{"version":1,"runId":"r.x","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"r"}]}`,
		`{"version":1,"runId":"r","agent":"a","pass":-1,"interrupts":[{"id":"i","reason":"r"}]}`,
		`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[]}`,
		`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"r"},{"id":"i","reason":"r"}]}`,
		`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"r","responseSchema":true}]}`,
		`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i"}]}`,
	}
	for _, in := range bad {
		_, err := subjects.DecodeSuspension([]byte(in))
		assert.ErrorIs(t, err, subjects.ErrMalformed, in)
	}
}

// The package imports only the standard library, so any process can speak
// the protocol without NATS.
func TestStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range af.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			first := strings.Split(path, "/")[0]
			assert.NotContains(t, first, ".", "%s imports %s", f, path)
		}
	}
}

func TestReplyAllowed(t *testing.T) {
	for _, c := range []struct {
		identity, reply string
		ok              bool
	}{
		{"ada", "_INBOX.ada.abc.def", true},
		{"ada", "_INBOX.ada.abc", true},
		{"", "_INBOX.anonymous.x", true},
		{"ada", "_INBOX.bob.abc", false},
		{"ada", "_INBOX.ada", false},
		{"ada", "_INBOX.ada.", false},
		{"ada", "_INBOX.ada.>", false},
		{"ada", "_INBOX.ada.*.x", false},
		{"ada", "_INBOX.ada..x", false},
		{"ada", "_INBOX.adam.x", false},
		{"ada", "$KV.interlock_runs.run-2", false},
		{"ada", "_INBOX.abc", false},
		{"", "_INBOX.ada.x", false},
		{"ada", "_INBOX.ada.a b", false},
	} {
		if got := subjects.ReplyAllowed(c.identity, c.reply); got != c.ok {
			t.Errorf("ReplyAllowed(%q, %q) = %v, want %v", c.identity, c.reply, got, c.ok)
		}
	}
}

// A service answers only on an inbox, whoever's: never on a stream's
// subject or a KV key a requester names as its reply subject.
func TestIsInbox(t *testing.T) {
	t.Parallel()
	for reply, ok := range map[string]bool{
		"_INBOX.abc":                       true,
		"_INBOX.agent_billing.abc.def":     true,
		"_INBOX":                           false,
		"_INBOX.":                          false,
		"_INBOX.>":                         false,
		"_INBOX.*.x":                       false,
		"_INBOX..x":                        false,
		"_INBOXES.x":                       false,
		"_inbox.x":                         false,
		"_INBOX.a b":                       false,
		"$KV.interlock_runs.run-2":         false,
		"interlock.events.run-2.completed": false,
		"interlock.resume.run-1.bob":       false,
	} {
		assert.Equal(t, ok, subjects.IsInbox(reply), reply)
	}
}

// A link request names run, interrupt and sink, nothing else; each is
// checked, and the link service's subject is under the prefix.
func TestDecodeLinkRequest(t *testing.T) {
	t.Parallel()
	ok := `{"version":1,"runId":"run-1","interruptId":"int-1","sink":"ada-mail"}`
	r, err := subjects.DecodeLinkRequest([]byte(ok))
	require.NoError(t, err)
	assert.Equal(t, subjects.LinkRequest{Version: 1, RunID: "run-1", InterruptID: "int-1", Sink: "ada-mail"}, r)
	for in, code := range map[string]subjects.Code{
		`{"version":1,"runId":"run-1","interruptId":"int-1","sink":"ada-mail","approver":"ada"}`: subjects.CodeMalformed,
		`{"version":1,"runId":"a.b","interruptId":"int-1","sink":"ada-mail"}`:                    subjects.CodeMalformed,
		`{"version":1,"runId":"run-1","interruptId":"int-1","sink":"a.*"}`:                       subjects.CodeMalformed,
		`{"version":1,"runId":"run-1","interruptId":"","sink":"ada-mail"}`:                       subjects.CodeMalformed,
		`{"version":2,"runId":"run-1","interruptId":"int-1","sink":"ada-mail"}`:                  subjects.CodeUnsupportedVersion,
		`[]`: subjects.CodeMalformed,
	} {
		_, err := subjects.DecodeLinkRequest([]byte(in))
		require.Error(t, err, in)
		assert.Equal(t, code, subjects.CodeOf(err), in)
	}
	assert.Equal(t, "acme.hitl.links.mint", mustNS(t, "acme.hitl").LinkMint())
}

func mustNS(t *testing.T, prefix string) subjects.Namespace {
	t.Helper()
	ns, err := subjects.New(prefix)
	require.NoError(t, err)
	return ns
}

func TestTimersDue(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "interlock.timers.due.>", subjects.Default().TimersDue())
	ns, err := subjects.New("acme.il")
	require.NoError(t, err)
	assert.Equal(t, "acme.il.timers.due.>", ns.TimersDue())
	due, err := ns.TimerDue("r1")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(due, strings.TrimSuffix(ns.TimersDue(), ">")), "TimerDue's subjects match it")
}
