package fault

import "testing"

func TestOnce(t *testing.T) {
	h, fired := Once("b")
	closed := 0
	for _, p := range []string{"a", "b", "b", "c"} {
		if h.Crash(p, func() { closed++ }) && p != "b" {
			t.Fatalf("picked %s", p)
		}
	}
	if closed != 1 {
		t.Fatalf("abandoned %d times, want 1", closed)
	}
	select {
	case <-fired:
	default:
		t.Fatal("fired channel still open")
	}
	if Hook(nil).Crash("b", func() { t.Fatal("nil hook crashed") }) {
		t.Fatal("nil hook picked a point")
	}
}
