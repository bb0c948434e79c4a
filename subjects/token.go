package subjects

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxTokenLen is the longest agent name, run id or prefix token accepted.
const MaxTokenLen = 128

// ValidateToken reports whether s can be used as one subject token taken
// from user data (an agent name or a run id). A token is 1 to MaxTokenLen
// bytes of ASCII letters, digits, '-' and '_'. That excludes the characters
// NATS gives meaning to ('.', '*', '>'), whitespace, and anything that is not
// safe in a consumer name or a KV key. The error wraps [ErrInvalidToken] and
// names the offending character.
func ValidateToken(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidToken, kind)
	}
	if len(s) > MaxTokenLen {
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalidToken, kind, len(s), MaxTokenLen)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !tokenRune(r) {
			return fmt.Errorf("%w: %s %q has %s at byte %d; use letters, digits, '-' and '_'",
				ErrInvalidToken, kind, s, describeRune(r, size), i)
		}
		i += size
	}
	return nil
}

func tokenRune(r rune) bool {
	return r == '-' || r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
}

func describeRune(r rune, size int) string {
	switch {
	case r == utf8.RuneError && size <= 1:
		return "invalid UTF-8"
	case r == '.':
		return "'.' (the token separator)"
	case r == '*' || r == '>':
		return fmt.Sprintf("%q (a wildcard)", r)
	case unicode.IsSpace(r):
		return fmt.Sprintf("whitespace %q", r)
	case unicode.IsControl(r):
		return fmt.Sprintf("control character %q", r)
	default:
		return fmt.Sprintf("%q", r)
	}
}
