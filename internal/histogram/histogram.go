// Package histogram records latencies in log-linear buckets (about 1%
// relative error) and reports quantiles, for benchmarks.
package histogram

import (
	"math"
	"sort"
	"sync"
	"time"
)

// growth is the ratio between bucket bounds.
const growth = 1.01

// Histogram counts durations by bucket. The zero value is ready to use and
// safe for concurrent use.
type Histogram struct {
	mu      sync.Mutex
	buckets map[int]uint64
	count   uint64
}

func bucket(d time.Duration) int {
	if d < time.Nanosecond {
		d = time.Nanosecond
	}
	return int(math.Floor(math.Log(float64(d)) / math.Log(growth)))
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buckets == nil {
		h.buckets = map[int]uint64{}
	}
	h.buckets[bucket(d)]++
	h.count++
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Quantile returns the upper bound of the bucket holding the q-th quantile
// (0 < q <= 1), or 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count == 0 {
		return 0
	}
	keys := make([]int, 0, len(h.buckets))
	for k := range h.buckets {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	rank := uint64(math.Ceil(q * float64(h.count)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for _, k := range keys {
		seen += h.buckets[k]
		if seen >= rank {
			return time.Duration(math.Pow(growth, float64(k+1)))
		}
	}
	return time.Duration(math.Pow(growth, float64(keys[len(keys)-1]+1)))
}
