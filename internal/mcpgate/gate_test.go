package mcpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func args(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func TestMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		call Call
		want bool
	}{
		{"", Call{Tool: "x"}, false},
		{"*", Call{Tool: "x"}, true},
		{"tool:delete_*", Call{Tool: "delete_file"}, true},
		{"tool:delete_*", Call{Tool: "read_file"}, false},
		{"tool:read_file; tool:write_?", Call{Tool: "write_a"}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/etc/passwd"}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/x"}}, false},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/x"}}, false},
		{"tool:pay && arg:amount=100", Call{Tool: "pay", Arguments: map[string]any{"amount": 100.0}}, true},
		{"tool:pay && arg:amount=100", Call{Tool: "pay", Arguments: map[string]any{"amount": "100"}}, false},
		{"arg:order.currency=EUR", Call{Tool: "pay", Arguments: map[string]any{"order": map[string]any{"currency": "EUR"}}}, true},
		{`arg:order.currency="EUR"`, Call{Tool: "pay", Arguments: map[string]any{"order": map[string]any{"currency": "EUR"}}}, true},
		{"arg:items.1=b", Call{Arguments: map[string]any{"items": []any{"a", "b"}}}, true},
		{"arg:items.2", Call{Arguments: map[string]any{"items": []any{"a", "b"}}}, false},
		{"arg:force", Call{Arguments: map[string]any{"force": nil}}, false},
		{"arg:force=true", Call{Arguments: map[string]any{"force": true}}, true},
		// A path pattern cannot judge a path that climbs out with "..":
		// such a call is gated, negated or not (a glob is not containment).
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/../home/me/.bashrc"}}, true},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/../../etc/cron.d/x"}}, true},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": `/tmp/..\\x`}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/../etc/passwd"}}, true},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/a..b"}}, false},
		{"tool:note && !arg:text~*refund*", Call{Tool: "note", Arguments: map[string]any{"text": "see ../refund"}}, false},
		// Nor one the upstream resolves elsewhere than its text says: a "."
		// segment, a doubled separator, the other separator, a relative path
		// against an absolute pattern, another case (a case-insensitive
		// file system). Before, each went through ungated.
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/./etc/passwd"}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "//etc/passwd"}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/etc//passwd"}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": `\etc\passwd`}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "etc/passwd"}}, true},
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/ETC/passwd"}}, true},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/./x"}}, true},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "x"}}, true},
		// Windows drops trailing dots and spaces of a segment, and reads
		// "C:Windows" against the drive's directory; a case-insensitive
		// file system folds the long s to s.
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/Windows./win.ini"}}, true},
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/Windows /win.ini"}}, true},
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:Windows/win.ini"}}, true},
		{"tool:write_file && arg:path~*/.ssh/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/Users/me/.\u017fsh/authorized_keys"}}, true},
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/Users/me/notes.txt"}}, false},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/caf\u00e9.txt"}}, false},
		// A Windows data stream, a short name, a letter that upper-cases
		// to ASCII (the dotless i).
		{"tool:write_file && arg:path~C:/Users/*/.ssh/authorized_keys", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/Users/me/.ssh/authorized_keys::$DATA"}}, true},
		{"tool:write_file && arg:path~C:/Program Files/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/PROGRA~1/x.exe"}}, true},
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/W\u0131ndows/win.ini"}}, true},
		{"tool:write_file && arg:path~C:/Windows/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "C:/Temp/a~b.txt"}}, false},
		// Paths in their plain form are judged as before.
		{"tool:write_file && arg:path~/etc/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/var/log/x"}}, false},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/dir/"}}, false},
		{"tool:write_file && !arg:path~/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "/tmp/Report.TXT"}}, false},
		{"tool:write_file && !arg:path~*/tmp/*", Call{Tool: "write_file", Arguments: map[string]any{"path": "a/tmp/x"}}, false},
		// Annotations, with the specification's defaults.
		{"annotation:destructiveHint", Call{Tool: "x"}, true},
		{"annotation:destructiveHint", Call{Tool: "x", Annotations: &Annotations{ReadOnlyHint: yes()}}, false},
		{"annotation:destructiveHint", Call{Tool: "x", Annotations: &Annotations{DestructiveHint: no()}}, false},
		{"annotation:openWorldHint", Call{Tool: "x", Annotations: &Annotations{}}, true},
		{"annotation:readOnlyHint", Call{Tool: "x"}, false},
		// An upstream's annotations never remove what the operator gated.
		{"tool:rm; annotation:destructiveHint", Call{Tool: "rm", Annotations: &Annotations{ReadOnlyHint: yes(), DestructiveHint: no()}}, true},
	}
	for _, c := range cases {
		g, err := Parse(c.expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.expr, err)
		}
		if got := g.Match(c.call); got != c.want {
			t.Errorf("Parse(%q).Match(%+v) = %v, want %v", c.expr, c.call, got, c.want)
		}
		again, err := Parse(g.String())
		if err != nil || again.String() != g.String() {
			t.Errorf("Parse(%q).String() = %q does not parse back (%v)", c.expr, g.String(), err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]error{
		"tool:rm && annotation:destructiveHint": ErrAnnotationNarrows,
		"!annotation:readOnlyHint":              ErrAnnotationNarrows,
		"annotation:dangerous":                  ErrUnknownHint,
		"rm":                                    ErrSyntax,
		"tool:":                                 ErrSyntax,
		"arg:":                                  ErrSyntax,
		"arg:a..b":                              ErrSyntax,
		"tool:a && ":                            ErrSyntax,
		"name:rm":                               ErrSyntax,
	}
	for expr, want := range cases {
		if _, err := Parse(expr); !errors.Is(err, want) {
			t.Errorf("Parse(%q) = %v, want %v", expr, err, want)
		}
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"a*c", "abbbc", true}, {"a*c", "abbbd", false}, {"?", "é", true},
		{"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false}, {"a?c", "abc", true}, {"", "", true}, {"", "a", false},
	}
	for _, c := range cases {
		if got := Glob(c.p, c.s); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// FuzzParse: any expression parses or is refused with one of the sentinels;
// a parsed one matches any call without panicking and prints back to
// itself; an annotation never removes gating.
func FuzzParse(f *testing.F) {
	f.Add("tool:delete_* && arg:path~/etc/*; annotation:destructiveHint", "delete_file", `{"path":"/etc/x"}`, true)
	f.Add("!arg:a.b=1", "x", `{"a":{"b":1}}`, false)
	f.Add("*", "", `{}`, true)
	f.Fuzz(func(t *testing.T, expr, tool, rawArgs string, readOnly bool) {
		g, err := Parse(expr)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrAnnotationNarrows) && !errors.Is(err, ErrUnknownHint) {
				t.Fatalf("Parse(%q): unsentinelled error %v", expr, err)
			}
			return
		}
		again, err := Parse(g.String())
		if err != nil || again.String() != g.String() {
			t.Fatalf("Parse(%q).String() = %q does not parse back: %v", expr, g.String(), err)
		}
		var a map[string]any
		_ = json.Unmarshal([]byte(rawArgs), &a)
		plain := Call{Tool: tool, Arguments: a}
		lying := Call{Tool: tool, Arguments: a, Annotations: &Annotations{ReadOnlyHint: &readOnly, DestructiveHint: no(), OpenWorldHint: no()}}
		if g.Match(plain) && !g.Match(Call{Tool: tool, Arguments: a, Annotations: &Annotations{}}) {
			t.Fatalf("declaring no hints removed gating")
		}
		// Whatever the annotations say, the operator's own clauses still gate.
		ops := Gate{}
		for _, c := range g.clauses {
			if c[0].kind != kindAnnotation {
				ops.clauses = append(ops.clauses, c)
			}
		}
		if ops.Match(plain) && !g.Match(lying) {
			t.Fatalf("annotations removed gating of %q for %q", expr, tool)
		}
	})
}

// A tool pattern with a space after the colon parsed, passed the proxy's
// check that something is gated, and matched no tool: every delete went
// through ungated.
func TestToolPatternIsTrimmedAndChecked(t *testing.T) {
	t.Parallel()
	g, err := Parse("tool: delete_*")
	require.NoError(t, err)
	assert.Equal(t, "tool:delete_*", g.String())
	assert.True(t, g.Match(Call{Tool: "delete_file"}))
	for _, expr := range []string{"tool:delete file", "tool:delete\t*", "tool:a\x00"} {
		_, err := Parse(expr)
		assert.ErrorIs(t, err, ErrSyntax, expr)
	}
}

// The gate read {"path":"/tmp/ok","PATH":"/etc/passwd"} as /tmp/ok, and a Go
// tool binding its arguments with encoding/json wrote /etc/passwd; of a
// repeated key it read the last, and a streaming parser the first.
func TestCheckArguments(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{``, `{}`, `{"path":"/tmp/ok","mode":1}`, `{"a":{"x":1},"b":{"x":2}}`, `[{"a":1},{"a":2}]`,
		`{"a":[{"k":1,"K2":2}],"k":3}`, `{"x":"{\"a\":1,\"a\":2}"}`} {
		assert.NoError(t, CheckArguments([]byte(ok)), ok)
	}
	for _, bad := range []string{`{"path":"/tmp/ok","PATH":"/etc/passwd"}`, `{"path":"/etc/shadow","path":"/tmp/ok"}`,
		`{"a":{"b":[{"x":1,"X":2}]}}`, `{"sKey":1,"ſkey":2}`, `{"kind":1,"\u212aind":2}`, `{"a":1,"\u0061":2}`} {
		err := CheckArguments([]byte(bad))
		assert.ErrorIs(t, err, ErrAmbiguousArguments, bad)
	}
	assert.Error(t, CheckArguments([]byte(`{"a":`)))
}

// Arguments CheckArguments passes are JSON whose objects hold no two keys
// that fold alike; it never panics, and what it refuses for ambiguity is
// JSON.
func FuzzCheckArguments(f *testing.F) {
	f.Add([]byte(`{"path":"/tmp/ok","PATH":"/etc/passwd"}`))
	f.Add([]byte(`{"a":[{"k":1},{"k":2}],"b":{"c":{"d":1,"D":2}}}`))
	f.Add([]byte(`{"x":"\"y\":1","y":[1,{"z":null}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := CheckArguments(raw)
		if errors.Is(err, ErrAmbiguousArguments) && !json.Valid(raw) {
			t.Fatalf("%q is not JSON, and was refused as ambiguous", raw)
		}
		if err != nil || len(raw) == 0 {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // 1E700 is JSON, beyond a float64
		if dec.Decode(&v) != nil {
			t.Fatalf("%q passed and is not JSON", raw)
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				seen := map[string]bool{}
				for k, e := range x {
					folded := strings.ToLower(strings.ToUpper(k))
					if seen[folded] {
						t.Fatalf("%q passed with keys folding to %q", raw, folded)
					}
					seen[folded] = true
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(v)
	})
}
