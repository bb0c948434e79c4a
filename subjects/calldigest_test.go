package subjects

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// TestConformanceCallDigests checks CallDigest against the shared vectors:
// RFC 8785 canonical JSON of {arguments, tool}, SHA-256, lowercase hex, and
// ErrMalformed where arguments have no digest.
func TestConformanceCallDigests(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/conformance/policies.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		CallDigests []struct {
			Name, Tool, Arguments, Canonical, Digest, Error string
		} `json:"callDigests"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.CallDigests) == 0 {
		t.Fatal("no callDigests vectors")
	}
	for _, c := range v.CallDigests {
		got, err := CallDigest(c.Tool, json.RawMessage(c.Arguments))
		if c.Error != "" {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: err %v, want ErrMalformed", c.Name, err)
			}
			continue
		}
		if err != nil || got != c.Digest {
			t.Errorf("%s: CallDigest = %q, %v; want %q", c.Name, got, err, c.Digest)
		}
	}
}
