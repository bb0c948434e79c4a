package notifier

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FuzzRetryAfter: a sink's Retry-After header, outside input, never yields
// a negative wait, and its two forms read as they say.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "120", "4294967295", "4294967296", "-1", "1.5", " 7",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "soon"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("%q: no wait expected, got %s", v, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative wait %s", v, d)
		}
		if secs, err := strconv.ParseUint(v, 10, 32); err == nil && d != time.Duration(secs)*time.Second {
			t.Fatalf("%q: want %ds, got %s", v, secs, d)
		}
		if at, err := http.ParseTime(v); err == nil && d != max(at.Sub(now), 0) {
			t.Fatalf("%q: want until %s, got %s", v, at, d)
		}
	})
}
