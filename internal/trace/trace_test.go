package trace

import "testing"

func TestTraceParent(t *testing.T) {
	tp := New()
	if !Valid(tp) {
		t.Fatalf("New made an invalid traceparent %q", tp)
	}
	c := Child(tp)
	if TraceID(c) != TraceID(tp) || c == tp || !Valid(c) {
		t.Fatalf("Child(%q) = %q: same trace, new span", tp, c)
	}
	for _, bad := range []string{"", "00-abc-def-01", "01-" + TraceID(tp) + "-0123456789abcdef-01",
		"00-00000000000000000000000000000000-0123456789abcdef-01"} {
		if Valid(bad) {
			t.Errorf("%q should be invalid", bad)
		}
		if !Valid(Child(bad)) {
			t.Errorf("Child(%q) should start a valid trace", bad)
		}
	}
}
