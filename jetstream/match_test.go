package jetstream

import "testing"

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"interlock.resume.>", "interlock.resume.r1", true},
		{"interlock.resume.>", "interlock.resume.r1.ada", true},
		{"interlock.resume.>", "interlock.resume", false},
		{"interlock.*.x", "interlock.work.x", true},
		{"interlock.*.x", "interlock.work.y", false},
		{"interlock.*.x", "interlock.work.x.y", false},
		{"interlock.work", "interlock.work", true},
		{"interlock.work", "interlock", false},
	} {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}
