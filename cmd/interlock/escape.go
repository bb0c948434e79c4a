package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// printable returns s with every character that can steer a terminal
// escaped, so that outside text (an agent's messages, metadata, arguments,
// results and errors; an approver's answers and comments; audit details)
// is shown, never obeyed: C0 controls and DEL as \n, \r, \t, \a, ... or
// \xHH (ESC is \x1b), C1 controls (U+0080 to U+009F), the Unicode bidi
// controls and the line and paragraph separators as \uHHHH, and bytes
// that are not UTF-8 as \xHH. Everything else, other scripts included, is
// kept. A backslash is kept as it is: the escapes are for reading, not
// for decoding. It is the one rule of the CLI's human output; say and
// oneLine apply it, and --json output, which encoding/json escapes, does
// not use it.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || steers(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !steers(r):
			b.WriteString(s[i : i+size])
		case r < 0x80:
			if name, ok := controlNames[r]; ok {
				b.WriteString(name)
			} else {
				fmt.Fprintf(&b, `\x%02x`, r)
			}
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// controlNames are the C0 controls printable writes as Go does.
var controlNames = map[rune]string{'\a': `\a`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`}

// steers reports whether r changes what a terminal shows other than by
// showing r: a control character (C0, DEL, C1), a bidi control (it
// reorders the text around it), or a line or paragraph separator.
func steers(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// say is fmt.Fprintf for human output: every argument that is text
// (strings and string kinds, errors, raw JSON and bytes) goes through
// printable first, so a field cannot carry a control sequence, a tab that
// shifts a table's columns or a newline that forges a line. The format is
// the CLI's own. Use %s or %v for text (never %q: it would escape twice).
func say(w io.Writer, format string, args ...any) {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = printableArg(a)
	}
	fmt.Fprintf(w, format, out...)
}

func printableArg(a any) any {
	switch v := a.(type) {
	case error:
		return printable(v.Error())
	case json.RawMessage:
		return printable(string(v))
	case []byte:
		return printable(string(v))
	}
	if rv := reflect.ValueOf(a); rv.IsValid() && rv.Kind() == reflect.String {
		return printable(rv.String())
	}
	return a
}

// jsonEscapeSteering rewrites, in JSON that encoding/json wrote, each
// character printable would escape that the encoder leaves raw (DEL, C1
// controls, bidi controls; it escapes C0 and the line separators itself)
// as a \uHHHH escape. Such characters occur only inside strings, where the
// escape stands for the same character: the JSON means exactly what it
// meant, and printed on a terminal it steers nothing.
func jsonEscapeSteering(b []byte) []byte {
	// Below DEL only the encoder's own layout is raw (newlines, indents).
	raw := func(r rune) bool { return r >= 0x7f && steers(r) }
	if !strings.ContainsFunc(string(b), raw) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for _, r := range string(b) {
		if raw(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
			continue
		}
		out = utf8.AppendRune(out, r)
	}
	return out
}
