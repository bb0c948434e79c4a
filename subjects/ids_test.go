package subjects

import "testing"

// A step named with a byte that is not UTF-8 was journaled under U+FFFD
// (JSON encoding replaces it) and looked up under the byte on the replay,
// so the step ran again; the interrupt id hashed the byte, where the
// coordinator sees U+FFFD.
func TestKeysOfInvalidUTF8(t *testing.T) {
	t.Parallel()
	if got := StepKey("call\xff", "n\xffx", 1); got != "call\uFFFD/n\uFFFDx#1" {
		t.Fatalf("StepKey = %q", got)
	}
	if InterruptID("run-1", "call_\xffx", 0) != InterruptID("run-1", "call_\uFFFDx", 0) {
		t.Fatal("the interrupt id of an invalid byte is not that of U+FFFD")
	}
}
