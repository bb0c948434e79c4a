// Package trace makes and continues W3C trace context (traceparent) values,
// which Interlock carries in message headers from a run's start through its
// suspension, notifications, decision and replay.
package trace

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Header is the W3C trace context header.
const Header = "traceparent"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// New starts a trace: version 00, a random trace id and span id, sampled.
func New() string { return "00-" + randomHex(16) + "-" + randomHex(8) + "-01" }

// Valid reports whether tp is a version-00 traceparent.
func Valid(tp string) bool {
	p := strings.Split(tp, "-")
	if len(p) != 4 || p[0] != "00" || len(p[1]) != 32 || len(p[2]) != 16 || len(p[3]) != 2 {
		return false
	}
	for _, s := range p[1:] {
		if _, err := hex.DecodeString(s); err != nil {
			return false
		}
	}
	return p[1] != strings.Repeat("0", 32) && p[2] != strings.Repeat("0", 16)
}

// Child continues tp's trace with a new span id; an invalid or empty tp
// starts a new trace.
func Child(tp string) string {
	if !Valid(tp) {
		return New()
	}
	p := strings.Split(tp, "-")
	return "00-" + p[1] + "-" + randomHex(8) + "-" + p[3]
}

// TraceID is tp's trace id, or "".
func TraceID(tp string) string {
	if !Valid(tp) {
		return ""
	}
	return strings.Split(tp, "-")[1]
}
