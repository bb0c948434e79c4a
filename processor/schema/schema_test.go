package schema

import (
	"crypto/sha256"
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

	"github.com/santhosh-tekuri/jsonschema/v6"
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

// slowCheck is a schema and an answer that take a few milliseconds to check:
// well past a microsecond budget, and short enough that the abandoned check
// is over before the test binary ends.
func slowCheck() (raw, payload []byte) {
	raw = []byte(`{"type":"array","items":{"anyOf":[{"type":"string","pattern":"^a+b$"},{"type":"number","multipleOf":7},
		{"type":"object","required":["k"]}]}}`)
	items := make([]string, 2000)
	for i := range items {
		items[i] = fmt.Sprintf(`"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa%dc"`, i)
	}
	return raw, []byte("[" + strings.Join(items, ",") + "]")
}

// Attack: an answer that takes long to check stalls every decision behind
// it. The check is cut off at the budget and refused. Attack (security
// review): that refusal must not refuse the next answer to the same schema
// (another approver's) without a check.
func TestValidationBudget(t *testing.T) {
	t.Parallel()
	c := Cache{Budget: time.Microsecond}
	raw, payload := slowCheck()
	err := c.Validate(raw, payload)
	require.ErrorIs(t, err, ErrBudget)
	c.Budget = time.Minute
	assert.NoError(t, c.Validate(raw, []byte(`[]`)), "the next answer to the schema is checked")
	assert.ErrorIs(t, c.Validate(raw, []byte(`[1]`)), ErrMismatch, "and checked, not waved through")
}

// Attack: an answer that takes long to check stalls every decision behind
// it. Measured by order, not by the clock: the check here blocks until the
// test ends it, so however fast the machine, Validate can only return
// before it by giving up at the budget; and another answer is checked and
// accepted while the first check still runs. A Validate that waited for
// its check would not return before the test's deadline.
func TestValidationDoesNotWaitForTheCheck(t *testing.T) {
	t.Parallel()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	c := Cache{Budget: 10 * time.Millisecond}
	c.check = func(s *jsonschema.Schema, inst any) error {
		if arr, ok := inst.([]any); ok && len(arr) == 1 && arr[0] == "slow" {
			entered <- struct{}{}
			<-release
		}
		return s.Validate(inst)
	}
	defer close(release)
	raw := []byte(`{"type":"array","items":{"type":"string"}}`)
	returned := make(chan error, 1)
	go func() { returned <- c.Validate(raw, []byte(`["slow"]`)) }()
	select {
	case err := <-returned:
		require.ErrorIs(t, err, ErrBudget)
	case <-time.After(30 * time.Second):
		t.Fatal("Validate waited for a check past its budget")
	}
	// The check's goroutine may be scheduled only after the budget ran
	// out (the whole suite under -race on two cores): it was started, and
	// runs, blocked, after Validate returned. (A select that did not wait
	// failed now and then.)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the check never started")
	}
	c.Budget = time.Minute // the next check is not raced against a clock
	other := make(chan error, 1)
	go func() { other <- c.Validate(raw, []byte(`["fine"]`)) }()
	select {
	case err := <-other:
		require.NoError(t, err, "the next answer is checked while the slow check still runs")
	case <-time.After(30 * time.Second):
		t.Fatal("the next answer waited for the slow check")
	}
}

// Attack (security review): checks abandoned at the budget pile up, each
// on its own goroutine, until the process is all abandoned checks. At most
// MaxChecks run at once; past that a check waits for a slot within its
// budget, and is refused when none frees.
func TestAbandonedChecksBounded(t *testing.T) {
	t.Parallel()
	c := Cache{Budget: time.Microsecond}
	raw, payload := slowCheck()
	// Hold every slot, as abandoned checks would.
	for range MaxChecks {
		require.True(t, c.acquire(nil))
	}
	err := c.Validate(raw, []byte(`[]`))
	require.ErrorIs(t, err, ErrBudget)
	assert.Contains(t, err.Error(), "checks were already under way")
	for range MaxChecks {
		c.release()
	}
	for range 3 * MaxChecks {
		assert.ErrorIs(t, c.Validate(raw, payload), ErrBudget)
	}
	assert.LessOrEqual(t, len(c.slots), MaxChecks)
	c.Budget = time.Minute
	require.Eventually(t, func() bool { return c.Validate(raw, []byte(`[]`)) == nil }, 30*time.Second, time.Millisecond,
		"slots free as abandoned checks end")
}

// Attack (security review): a regular expression of counted repetitions
// compiles to a large program: checking a long answer against it costs
// answer length times program size, and compiling a schema of many of them
// takes seconds. Such patterns are refused when the schema is compiled.
func TestLargePatternsRefused(t *testing.T) {
	t.Parallel()
	var many strings.Builder
	many.WriteString(`{"type":"object","properties":{`)
	for i := 0; many.Len() < MaxSize-100; i++ {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"p%d":{"pattern":"[a-z]{1,1000}"}`, i)
	}
	many.WriteString(`}}`)
	for name, raw := range map[string]string{
		"one large pattern":            `{"type":"string","pattern":"[a-z]{1,1000}"}`,
		"one large patternProperties":  `{"type":"object","patternProperties":{"^(a{1,100}){1,10}$":{}}}`,
		"many patterns, large in all":  `{"allOf":[{"pattern":"[a-z]{1,400}"},{"pattern":"[0-9]{1,400}"},{"pattern":"[A-Z]{1,400}"},{"pattern":"[b-z]{1,400}"},{"pattern":"[c-z]{1,400}"},{"pattern":"[d-z]{1,400}"}]}`,
		"32 KiB of counted repetition": many.String(),
	} {
		start := time.Now()
		var c Cache
		err := c.Compile([]byte(raw))
		assert.ErrorIs(t, err, ErrUnsafe, name)
		assert.Contains(t, fmt.Sprint(err), "instructions", name)
		assert.Less(t, time.Since(start), time.Second, name)
	}
	var c Cache
	assert.NoError(t, c.Compile([]byte(`{"type":"string","pattern":"^[a-z]{1,100}$"}`)), "an ordinary pattern")
}

// Attack (security review): compiling ran under the cache's lock, so one
// schema's compilation held every other check. Compiling happens outside
// it: a check against a compiled schema goes on while another compiles.
func TestCompileOutsideTheLock(t *testing.T) {
	t.Parallel()
	var c Cache
	small := []byte(`{"type":"integer"}`)
	require.NoError(t, c.Compile(small))
	key := sha256.Sum256([]byte(`{"type":"string"}`))
	// A compilation under way: its entry is there and not ready.
	c.mu.Lock()
	pending := &entry{ready: make(chan struct{})}
	c.byKey[key] = pending
	c.mu.Unlock()
	require.NoError(t, c.Validate(small, []byte(`5`)), "another schema's check does not wait")
	got := make(chan error, 1)
	go func() { got <- c.Validate([]byte(`{"type":"string"}`), []byte(`"x"`)) }()
	pending.err = ErrInvalid
	close(pending.ready)
	assert.ErrorIs(t, <-got, ErrInvalid, "it waits for the one compilation, and gets its result")
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

// Attack (security review): "Errors name the rule and where it failed, never the value". An
// object's keys are part of the value; a refused answer's keys end up in the
// decision_rejected event every reader of the run (and the log) sees.
func TestErrorNamesNoKeyOfTheValue(t *testing.T) {
	var c Cache
	for _, schema := range []string{
		`{"type":"object","additionalProperties":{"type":"integer"}}`,
		`{"type":"object","propertyNames":{"maxLength":3}}`,
		`{"type":"object","patternProperties":{"^s":{"type":"integer"}}}`,
	} {
		err := c.Validate([]byte(schema), []byte(`{"s3cr3t-pin-8642":"x"}`))
		require.Error(t, err, schema)
		assert.NotContains(t, err.Error(), "8642", schema)
	}
}
