// Package textcut shortens text for logs and the audit trail: one rule,
// used wherever a length from outside is bounded.
package textcut

import "unicode/utf8"

// Truncate returns s cut to at most n bytes, never in the middle of a
// UTF-8 encoded character (bytes that are not valid UTF-8 count one each).
func Truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	// start is where the character that s[n] belongs to begins.
	start := n
	for i := 0; i < utf8.UTFMax-1 && start > 0 && !utf8.RuneStart(s[start]); i++ {
		start--
	}
	if r, size := utf8.DecodeRuneInString(s[start:]); (r != utf8.RuneError || size > 1) && start+size > n {
		return s[:start]
	}
	return s[:n]
}
