package histogram

import (
	"testing"
	"time"
)

func TestQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram has no quantile")
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got) > float64(c.want)*1.011 {
			t.Errorf("q%.2f = %v, want within 1%% above %v", c.q, got, c.want)
		}
	}
	if h.Count() != 1000 {
		t.Errorf("count %d", h.Count())
	}
}
