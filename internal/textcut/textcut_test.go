package textcut

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abé", 3, "ab"}, // é is two bytes: not cut in two
		{"abé", 4, "abé"},
		{"日本語", 5, "日"},
		{"abc", 0, ""},
		{"\xff\xfeab", 3, "\xff\xfea"}, // invalid bytes are kept as they are
		{"a\x80\x80\x80b", 2, "a\x80"},
		{"ab\uFFFDc", 4, "ab"},
	} {
		got := Truncate(tc.in, tc.n)
		assert.Equal(t, tc.want, got, "Truncate(%q, %d)", tc.in, tc.n)
		assert.LessOrEqual(t, len(got), max(tc.n, 0))
		if utf8.ValidString(tc.in) {
			assert.True(t, utf8.ValidString(got))
		}
	}
}
