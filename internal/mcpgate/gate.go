// Package mcpgate decides which MCP tool calls wait for a person: gate
// expressions, parsed from what the operator writes and matched against a
// call (the tool's name, its arguments and the annotations the upstream
// server declares). Parse and Match are pure functions.
//
// # Syntax
//
//	gate   := clause { ";" clause }           a call is gated when any clause matches
//	clause := term { "&&" term }              every term matches
//	term   := "*"                             every call
//	        | ["!"] "tool:" GLOB              the tool's name
//	        | ["!"] "arg:" PATH               the argument at PATH is present (not null)
//	        | ["!"] "arg:" PATH "=" VALUE     ... equals VALUE (JSON; a bare word is a string)
//	        | ["!"] "arg:" PATH "~" GLOB      ... is a string matching GLOB
//	        | "annotation:" HINT              the upstream declares HINT (a clause of its own)
//
// GLOB is a pattern where * matches any run of characters and ? any one
// character (a GLOB with a slash is a path pattern: a path climbing with a
// ".." segment cannot be judged by it, so the term holds, negated or not); PATH is object keys (or array indexes) joined by dots. HINT is
// readOnlyHint, destructiveHint, idempotentHint or openWorldHint, read with
// the defaults of the MCP specification when the upstream leaves it out
// (destructiveHint and openWorldHint true, the others false;
// destructiveHint counts only when readOnlyHint is false).
//
// Annotations come from the upstream server, which the operator does not
// control: they may add gating, never remove it. So an annotation term
// stands alone in its clause (clauses are alternatives, so it can only gate
// more calls) and is never negated; Parse refuses anything else with
// ErrAnnotationNarrows.
package mcpgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors of Parse, each matchable with errors.Is.
var (
	// ErrSyntax means the expression is not well formed.
	ErrSyntax = errors.New("gate expression syntax")
	// ErrAnnotationNarrows means an annotation term could remove gating
	// (negated, or joined with && to other terms).
	ErrAnnotationNarrows = errors.New("annotation terms may add gating, never remove it")
	// ErrUnknownHint means an annotation term names no MCP tool annotation.
	ErrUnknownHint = errors.New("unknown tool annotation")
	// ErrAmbiguousArguments means a call's arguments name one key twice in
	// an object, or two keys that differ only in case: the gate reads one,
	// and a tool may read the other.
	ErrAmbiguousArguments = errors.New("ambiguous arguments")
)

// Annotations are the hints an upstream declares for a tool; nil: not
// declared.
type Annotations struct {
	ReadOnlyHint    *bool
	DestructiveHint *bool
	IdempotentHint  *bool
	OpenWorldHint   *bool
}

// Call is what a gate is matched against.
type Call struct {
	Tool string
	// Arguments are the call's arguments as decoded by encoding/json.
	Arguments map[string]any
	// Annotations are the upstream's, from its tools/list; nil: none.
	Annotations *Annotations
}

// Gate is a parsed gate expression. The zero Gate gates nothing.
type Gate struct {
	clauses [][]term
}

type kind int

const (
	kindAll kind = iota
	kindTool
	kindArgPresent
	kindArgEquals
	kindArgGlob
	kindAnnotation
)

type term struct {
	not   bool
	kind  kind
	glob  string // tool name or argument pattern
	path  []string
	value any    // kindArgEquals: a decoded JSON value
	raw   string // kindArgEquals: VALUE as written
	hint  string // kindAnnotation
}

// Hints are the annotation names a term may name.
var Hints = []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}

// Parse parses expr (see the package documentation). An empty or blank
// expression is the zero Gate.
func Parse(expr string) (Gate, error) {
	var g Gate
	for i, c := range strings.Split(expr, ";") {
		if strings.TrimSpace(c) == "" {
			continue
		}
		var clause []term
		for _, t := range strings.Split(c, "&&") {
			parsed, err := parseTerm(strings.TrimSpace(t))
			if err != nil {
				return Gate{}, fmt.Errorf("clause %d (%q): %w", i+1, strings.TrimSpace(c), err)
			}
			clause = append(clause, parsed)
		}
		for _, t := range clause {
			if t.kind == kindAnnotation && len(clause) > 1 {
				return Gate{}, fmt.Errorf("clause %d (%q): %w: write annotation:%s as a clause of its own",
					i+1, strings.TrimSpace(c), ErrAnnotationNarrows, t.hint)
			}
		}
		g.clauses = append(g.clauses, clause)
	}
	return g, nil
}

// Join is the gate matching what any of gates matches.
func Join(gates ...Gate) Gate {
	var g Gate
	for _, x := range gates {
		g.clauses = append(g.clauses, x.clauses...)
	}
	return g
}

func parseTerm(s string) (term, error) {
	var t term
	if s == "" {
		return t, fmt.Errorf("%w: an empty term", ErrSyntax)
	}
	if s == "*" {
		return term{kind: kindAll}, nil
	}
	if strings.HasPrefix(s, "!") {
		t.not = true
		s = strings.TrimSpace(s[1:])
	}
	key, rest, ok := strings.Cut(s, ":")
	if !ok {
		return t, fmt.Errorf("%w: %q is not *, tool:GLOB, arg:PATH[=VALUE|~GLOB] or annotation:HINT", ErrSyntax, s)
	}
	switch key {
	case "tool":
		rest = strings.TrimSpace(rest)
		if rest == "" {
			return t, fmt.Errorf("%w: tool: needs a name or pattern", ErrSyntax)
		}
		// A pattern no tool name can match gates nothing, silently.
		if i := strings.IndexFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
			return t, fmt.Errorf("%w: tool:%s: a tool name holds no space or control character", ErrSyntax, rest)
		}
		t.kind, t.glob = kindTool, rest
	case "arg":
		return parseArg(t, rest)
	case "annotation":
		if t.not {
			return t, fmt.Errorf("%w: !annotation:%s would let the upstream remove gating", ErrAnnotationNarrows, rest)
		}
		found := false
		for _, h := range Hints {
			found = found || h == rest
		}
		if !found {
			return t, fmt.Errorf("%w: %q (one of %s)", ErrUnknownHint, rest, strings.Join(Hints, ", "))
		}
		t.kind, t.hint = kindAnnotation, rest
	default:
		return t, fmt.Errorf("%w: unknown term kind %q (tool, arg or annotation)", ErrSyntax, key)
	}
	return t, nil
}

func parseArg(t term, s string) (term, error) {
	i := strings.IndexAny(s, "=~")
	p := s
	if i >= 0 {
		p = s[:i]
	}
	p = strings.TrimSpace(p)
	if p == "" {
		return t, fmt.Errorf("%w: arg: needs a path", ErrSyntax)
	}
	t.path = strings.Split(p, ".")
	for _, k := range t.path {
		if k == "" {
			return t, fmt.Errorf("%w: argument path %q has an empty key", ErrSyntax, p)
		}
	}
	t.kind = kindArgPresent
	if i < 0 {
		return t, nil
	}
	v := strings.TrimSpace(s[i+1:])
	if s[i] == '~' {
		t.kind, t.glob = kindArgGlob, v
		return t, nil
	}
	t.kind, t.raw = kindArgEquals, v
	if err := json.Unmarshal([]byte(v), &t.value); err != nil {
		t.value = v // a bare word is a string
	}
	return t, nil
}

// Match reports whether c is gated.
func (g Gate) Match(c Call) bool {
	for _, clause := range g.clauses {
		all := true
		for _, t := range clause {
			if t.unjudgeable(c) {
				continue // cannot be judged: the term holds, fail closed
			}
			if t.match(c) == t.not {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// Empty reports whether g gates nothing.
func (g Gate) Empty() bool { return len(g.clauses) == 0 }

// unjudgeable reports whether t is a path pattern (a GLOB with a slash or
// a backslash) over a string that the upstream may resolve elsewhere than
// its text says, which a glob cannot judge: "/tmp/../home/me/.bashrc" and
// "/tmp/./x" match "/tmp/*" as text, "//etc/passwd", "/./etc/passwd",
// "\etc\passwd" (a Windows upstream) and "etc/passwd" (relative to an
// upstream working in /) do not match "/etc/*", and "/ETC/passwd" does not
// either (a case-insensitive file system). Such a term counts as holding,
// negated or not, so its clause gates whenever its other terms match: a
// path is judged only in its plain form.
func (t term) unjudgeable(c Call) bool {
	if t.kind != kindArgGlob || !strings.ContainsAny(t.glob, `/\`) {
		return false
	}
	v, _ := lookup(c.Arguments, t.path)
	s, ok := v.(string)
	if !ok {
		return false
	}
	return !plainPath(t.glob, s)
}

// plainPath reports whether path is in the form glob can judge: only the
// separators glob uses, absolute when glob is, no ".", ".." or empty
// segment (one separator may lead and one may end it), and matched by
// glob whatever the case.
func plainPath(glob, path string) bool {
	for _, sep := range []string{"/", `\`} {
		if strings.Contains(path, sep) && !strings.Contains(glob, sep) {
			return false
		}
	}
	const seps = `/\`
	if strings.IndexAny(glob, seps) == 0 && strings.IndexAny(path, seps) != 0 {
		return false
	}
	if drive(glob) && !drive(path) {
		return false // "C:Windows/x" is relative to the drive's directory
	}
	rest := path
	if drive(path) {
		rest = path[2:]
	}
	if strings.Contains(rest, ":") && !strings.Contains(glob[min(len(glob), 2):], ":") {
		return false // "x::$DATA" is x's data stream on Windows: x itself
	}
	inner := path
	if inner != "" && strings.ContainsRune(seps, rune(inner[0])) {
		inner = inner[1:]
	}
	if inner != "" && strings.ContainsRune(seps, rune(inner[len(inner)-1])) {
		inner = inner[:len(inner)-1]
	}
	if inner != "" {
		for _, seg := range strings.Split(strings.ReplaceAll(inner, `\`, "/"), "/") {
			// Windows drops a segment's trailing dots and spaces:
			// "C:/Windows./win.ini" is C:/Windows/win.ini.
			if seg == "" || seg == "." || seg == ".." || strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") {
				return false
			}
			// "PROGRA~1" is a Windows short name of another segment.
			if i := strings.IndexByte(seg, '~'); i >= 0 && i+1 < len(seg) && '0' <= seg[i+1] && seg[i+1] <= '9' &&
				!strings.Contains(glob, "~") {
				return false
			}
		}
	}
	for _, r := range path {
		// A letter a case-insensitive file system folds to ASCII (the long
		// s as s, the Kelvin sign as k): ".ſsh" is ".ssh" there.
		for f := unicode.SimpleFold(r); r >= utf8.RuneSelf && f != r; f = unicode.SimpleFold(f) {
			if f < utf8.RuneSelf {
				return false
			}
		}
		if r >= utf8.RuneSelf && unicode.ToUpper(r) < utf8.RuneSelf {
			return false // the dotless ı upper-cases to I
		}
	}
	return Glob(glob, path) == Glob(strings.ToLower(glob), strings.ToLower(path))
}

// drive reports whether p starts with a Windows drive and a separator.
func drive(p string) bool {
	return len(p) >= 3 && ('A' <= p[0]&^0x20 && p[0]&^0x20 <= 'Z') && p[1] == ':' && (p[2] == '/' || p[2] == '\\')
}

func (t term) match(c Call) bool {
	switch t.kind {
	case kindAll:
		return true
	case kindTool:
		return Glob(t.glob, c.Tool)
	case kindAnnotation:
		return hint(c.Annotations, t.hint)
	}
	v, ok := lookup(c.Arguments, t.path)
	switch t.kind {
	case kindArgPresent:
		return ok && v != nil
	case kindArgEquals:
		return ok && equal(v, t.value)
	case kindArgGlob:
		s, isStr := v.(string)
		return ok && isStr && Glob(t.glob, s)
	}
	return false
}

// hint reads name from a with the specification's defaults.
func hint(a *Annotations, name string) bool {
	if a == nil {
		a = &Annotations{}
	}
	or := func(b *bool, def bool) bool {
		if b == nil {
			return def
		}
		return *b
	}
	switch name {
	case "readOnlyHint":
		return or(a.ReadOnlyHint, false)
	case "destructiveHint":
		return !or(a.ReadOnlyHint, false) && or(a.DestructiveHint, true)
	case "idempotentHint":
		return or(a.IdempotentHint, false)
	case "openWorldHint":
		return or(a.OpenWorldHint, true)
	}
	return false
}

func lookup(args map[string]any, path []string) (any, bool) {
	var v any = args
	for _, k := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// equal compares two decoded JSON values; numbers compare as numbers.
func equal(a, b any) bool {
	return reflect.DeepEqual(a, b)
}

// Glob reports whether s matches pattern, where * matches any run of
// characters (none too) and ? any one character; nothing else is special.
func Glob(pattern, s string) bool {
	p, r := []rune(pattern), []rune(s)
	// Iterative matching with one backtrack point: linear in practice, and
	// never exponential whatever the pattern.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(r) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == r[si] && p[pi] != '*'):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// String is the expression g was parsed from, normalised: Parse(g.String())
// is g.
func (g Gate) String() string {
	clauses := make([]string, len(g.clauses))
	for i, clause := range g.clauses {
		terms := make([]string, len(clause))
		for j, t := range clause {
			terms[j] = t.String()
		}
		clauses[i] = strings.Join(terms, " && ")
	}
	return strings.Join(clauses, "; ")
}

func (t term) String() string {
	not := ""
	if t.not {
		not = "!"
	}
	switch t.kind {
	case kindAll:
		return "*"
	case kindTool:
		return not + "tool:" + t.glob
	case kindAnnotation:
		return "annotation:" + t.hint
	case kindArgPresent:
		return not + "arg:" + strings.Join(t.path, ".")
	case kindArgEquals:
		return not + "arg:" + strings.Join(t.path, ".") + "=" + t.raw
	}
	return not + "arg:" + strings.Join(t.path, ".") + "~" + t.glob
}

// CheckArguments refuses arguments (a call's JSON object) in which an
// object, at any depth, names a key twice or two keys that differ only in
// case (as encoding/json folds them: the Kelvin sign as k, the long s as
// s). Match reads the last of two equal keys and tells case apart, while a
// tool may read the first (a streaming parser) or either case (a Go tool
// binding its arguments with encoding/json), so the gate would judge a
// call the tool does not make. Errors match ErrAmbiguousArguments, or say
// the arguments are not JSON.
func CheckArguments(raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	if !json.Valid(raw) {
		return errors.New("the arguments are not JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type container struct {
		object bool
		keys   map[string]string // folded: as written
		key    bool              // the next token is a key
	}
	var stack []*container
	for {
		tok, err := dec.Token()
		if err != nil { // io.EOF: the arguments, valid JSON, are read
			return nil
		}
		var top *container
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			folded := strings.ToLower(strings.ToUpper(k))
			if was, seen := top.keys[folded]; seen {
				if was == k {
					return fmt.Errorf("%w: the key %q appears twice in one object", ErrAmbiguousArguments, k)
				}
				return fmt.Errorf("%w: the keys %q and %q differ only in case", ErrAmbiguousArguments, was, k)
			}
			top.keys[folded] = k
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // after this value, a key or the end
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &container{object: true, keys: map[string]string{}, key: true})
		case json.Delim('['):
			stack = append(stack, &container{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}
