package schema

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidAnswers(t *testing.T) {
	t.Parallel()
	var c Cache
	raw := []byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["amount"],
		"properties":{"amount":{"$ref":"#/$defs/money"},"note":{"type":"string"}},
		"$defs":{"money":{"type":"number","minimum":0,"maximum":100}}}`)
	require.NoError(t, c.Validate(raw, []byte(`{"amount":42.5}`)))
	err := c.Validate(raw, []byte(`{"amount":420}`))
	require.ErrorIs(t, err, ErrMismatch)
	assert.Contains(t, err.Error(), `at /amount the payload fails "maximum"`)
}

// Attack: a schema whose $ref names a file on the coordinator's disk, or a
// URL (the coordinator fetching for an attacker). Refused before anything
// is read, and the refusal does not carry what the target holds.
func TestExternalReferencesAreRefused(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"const":"top-secret-content"}`), 0o600))
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"const":"top-secret-content"}`))
	}))
	defer srv.Close()
	for _, raw := range []string{
		`{"$ref":"file://` + secret + `"}`,
		`{"properties":{"a":{"$ref":"` + srv.URL + `/s.json"}}}`,
		`{"$ref":"` + filepath.Base(secret) + `"}`,
		`{"allOf":[{"$dynamicRef":"` + srv.URL + `#x"}]}`,
		`{"$schema":"` + srv.URL + `/meta"}`,
		`{"$id":"` + srv.URL + `/","$ref":"s.json"}`,
		`{"$defs":{"a":{"$id":"file:///etc/"}},"$ref":"#/$defs/a"}`,
	} {
		var c Cache
		err := c.Compile([]byte(raw))
		require.ErrorIs(t, err, ErrUnsafe, raw)
		assert.NotContains(t, err.Error(), "top-secret-content")
		err = c.Validate([]byte(raw), []byte(`"x"`))
		assert.ErrorIs(t, err, ErrUnsafe)
	}
	assert.Zero(t, hits.Load(), "nothing was fetched")
}

// nestedAnyOf is the 1.8 KB schema that kept one validation busy for
// seconds: each level offers several branches that all lead to the next.
func nestedAnyOf(levels, branches int) []byte {
	defs := map[string]any{}
	for i := range levels {
		var alts []any
		for range branches {
			alts = append(alts, map[string]any{"$ref": fmt.Sprintf("#/$defs/l%d", i+1)})
		}
		defs[fmt.Sprintf("l%d", i)] = map[string]any{"anyOf": alts}
	}
	defs[fmt.Sprintf("l%d", levels)] = map[string]any{"type": "string", "minLength": 1000}
	raw, _ := json.Marshal(map[string]any{"$ref": "#/$defs/l0", "$defs": defs})
	return raw
}

// Attack: small schemas that are expensive to check: references that
// multiply, self-reference, deep nesting, many combinators, sheer size.
// Each is refused at compile time, quickly.
func TestCostlySchemasAreRefused(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"items":`, MaxDepth+2) + `{}` + strings.Repeat(`}`, MaxDepth+2)
	var many []string
	for range MaxCombinators + 1 {
		many = append(many, `{"type":"string"}`)
	}
	for name, raw := range map[string][]byte{
		"multiplying refs": nestedAnyOf(12, 3),
		"self reference":   []byte(`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`),
		"anchor cycle":     []byte(`{"$anchor":"top","properties":{"x":{"$ref":"#top"}}}`),
		"deep":             []byte(deep),
		"combinators":      []byte(`{"anyOf":[` + strings.Join(many, ",") + `]}`),
		"size":             []byte(`{"description":"` + strings.Repeat("x", MaxSize) + `"}`),
		"dangling ref":     []byte(`{"$ref":"#/$defs/none"}`),
	} {
		start := time.Now()
		var c Cache
		err := c.Compile(raw)
		assert.ErrorIs(t, err, ErrUnsafe, name)
		assert.Less(t, time.Since(start), 2*time.Second, name)
	}
	assert.Less(t, len(nestedAnyOf(12, 3)), 2048, "the attack schema is small")
}

// Attack: an answer that takes long to check stalls every decision behind
// it. The check is cut off at the budget and refused; later answers to
// the same schema are refused at once.
func TestValidationBudget(t *testing.T) {
	t.Parallel()
	c := Cache{Budget: time.Microsecond}
	// A few milliseconds of work: well past the budget, and short enough
	// that the abandoned check is over before the test binary ends.
	raw := []byte(`{"type":"array","items":{"anyOf":[{"type":"string","pattern":"^a+b$"},{"type":"number","multipleOf":7},
		{"type":"object","required":["k"]}]}}`)
	items := make([]string, 2000)
	for i := range items {
		items[i] = fmt.Sprintf(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa%dc"`, i)
	}
	payload := []byte("[" + strings.Join(items, ",") + "]")
	err := c.Validate(raw, payload)
	require.ErrorIs(t, err, ErrBudget)
	start := time.Now()
	err = c.Validate(raw, []byte(`[]`))
	require.ErrorIs(t, err, ErrBudget, "the schema is known to be too costly")
	assert.Less(t, time.Since(start), 50*time.Millisecond)
}

// Attack (found item 8): a mistyped PIN echoed in the rejection message,
// and so in the verdict, the event and the log. Messages name the rule and
// where it failed, never the value.
func TestMismatchNeverEchoesTheValue(t *testing.T) {
	t.Parallel()
	var c Cache
	raw := []byte(`{"type":"object","properties":{"pin":{"type":"string","pattern":"^[0-9]{4}$"},
		"mail":{"type":"string","format":"email","maxLength":8},"choice":{"enum":["a","b"]},"c":{"const":"x"}}}`)
	for _, payload := range []string{`{"pin":"98a7-secret"}`, `{"mail":"98a7-secret"}`, `{"choice":"98a7-secret"}`,
		`{"c":"98a7-secret"}`, `"98a7-secret"`} {
		err := c.Validate(raw, []byte(payload))
		require.ErrorIs(t, err, ErrMismatch, payload)
		assert.NotContains(t, err.Error(), "98a7", payload)
		assert.NotContains(t, err.Error(), "secret", payload)
	}
	err := c.Validate(raw, []byte(`{"pin":"98a7-secret"}`))
	assert.Contains(t, err.Error(), `at /pin the payload fails "pattern" (schema #/properties/pin/pattern)`)
}

func FuzzCompile(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`))
	f.Add([]byte(`{"$ref":"file:///etc/passwd"}`))
	f.Add(nestedAnyOf(4, 2))
	f.Add([]byte(`{"$anchor":"a","items":{"$ref":"#a"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var c Cache
		err := c.Compile(raw)
		if err == nil {
			// What compiles can be checked against, within the limits.
			_ = c.Validate(raw, []byte(`{"a":[1,"x",null]}`))
		}
	})
}
