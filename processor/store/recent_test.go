package store

import (
	"bytes"
	"fmt"
	"testing"
)

// TestRecentIsBounded: the records Update starts from are bounded in
// number and in bytes, however many runs pass through and however large
// their records grow; a record too large to keep is read again instead,
// and its older version is not kept either.
func TestRecentIsBounded(t *testing.T) {
	t.Parallel()
	s := &JetStream{}
	record := func(run string, size int) []byte {
		return fmt.Appendf(nil, `{"runId":%q,"pad":%q}`, run, bytes.Repeat([]byte("x"), size))
	}
	for i := range 400 {
		run := fmt.Sprintf("r%d", i)
		s.remember(run, record(run, 100<<10), uint64(i+1))
		if len(s.recent) > recentRecords || s.recentSize > recentBytes {
			t.Fatalf("after %d records: %d remembered, %d bytes (bounds %d, %d)", i+1, len(s.recent), s.recentSize,
				recentRecords, recentBytes)
		}
	}
	if _, _, ok := s.Recent("r399"); !ok {
		t.Fatal("the last record written is not remembered")
	}
	sum := 0
	for _, e := range s.recent {
		sum += len(e.data)
	}
	if sum != s.recentSize {
		t.Fatalf("recentSize %d, the remembered records hold %d bytes", s.recentSize, sum)
	}

	s.remember("small", record("small", 10), 1)
	s.remember("small", record("small", recentLargest), 2)
	if _, _, ok := s.Recent("small"); ok {
		t.Fatal("a record larger than recentLargest is remembered, or its older version is still served")
	}
	for i := range 3000 {
		run := fmt.Sprintf("s%d", i)
		s.remember(run, record(run, 10), 1)
	}
	if len(s.recent) != recentRecords {
		t.Fatalf("small records: %d remembered, want the bound %d", len(s.recent), recentRecords)
	}
	s.forget("s2999")
	if _, _, ok := s.Recent("s2999"); ok {
		t.Fatal("a forgotten record is still served")
	}
}
