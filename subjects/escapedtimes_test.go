package subjects

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// Writing a time's escapes out changes no value of the message and no byte
// outside the time strings of its typed fields.
func FuzzUnescapeTimes(f *testing.F) {
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"error":"e","failedAt":"2026\u002d12-01T06:00:00\u002B01:00"}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"x","expiresAt":"2026-12-01T06:00:00\u005A"}]}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"result":{"completedAt":"2026\u002d12-01T06:00:00Z"},"completedAt":"\ud83d\ude00"}`))
	f.Add([]byte(`{"version":2,"runId":"r","agent":"a","pass":1,"decisions":[{"version":2,"decisionId":"d","interruptId":"i","status":"resolved","votes":[{"at":"2026-12-01T06:00:00\u005a"},null]}]}`))
	types := []reflect.Type{
		reflect.TypeFor[*Suspension](), reflect.TypeFor[*Failure](), reflect.TypeFor[*Completion](),
		reflect.TypeFor[*Decision](), reflect.TypeFor[*Work](),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want any
		valid := json.Unmarshal(data, &want) == nil
		for _, typ := range types {
			out := unescapeTimes(data, typ)
			if bytes.Equal(out, data) {
				continue
			}
			if !valid {
				t.Fatalf("%v: %q is not JSON, and was written out as %q", typ, data, out)
			}
			var got any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %q written out as %q, not JSON: %v", typ, data, out, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v: %q written out as %q, another value", typ, data, out)
			}
		}
	})
}

func TestUnescapeTimesOnlyInTypedFields(t *testing.T) {
	t.Parallel()
	data := []byte(`{"version":1,"runId":"r","agent":"a","pass":0,"result":{"completedAt":"2026\u002d12-01T06:00:00Z"},"completedAt":"2026\u002d12-01T06:00:00Z"}`)
	got := string(unescapeTimes(data, reflect.TypeFor[*Completion]()))
	want := `{"version":1,"runId":"r","agent":"a","pass":0,"result":{"completedAt":"2026\u002d12-01T06:00:00Z"},"completedAt":"2026-12-01T06:00:00Z"}`
	if got != want {
		t.Fatalf("written out as\n%s\nwant (the result is the agent's, as sent)\n%s", got, want)
	}
	c, err := DecodeCompletion(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if c.CompletedAt.Format("2006-01-02") != "2026-12-01" || string(c.Result) != `{"completedAt":"2026\u002d12-01T06:00:00Z"}` {
		t.Fatalf("decoded %v and result %s", c.CompletedAt, c.Result)
	}
}
