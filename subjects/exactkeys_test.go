package subjects

import (
	"reflect"
	"testing"
)

// A message the byte scan calls plain is one the object-by-object reading
// finds nothing in: the scan is a shortcut, never a second rule.
func FuzzScanKeys(f *testing.F) {
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"x","sensitive":null}]}`))
	f.Add([]byte(`{"version":2,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"x","policy":{"allowRequester" :  null}}]}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"error":"e","failedAt":"2026-12-01T00:00:00\u002c5Z"}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"result":{"sensitive":null,"at":"1,2"},"completedAt":"2026-12-01T00:00:00.5Z"}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"Interrupts":[{"ID":"i"}]}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":9007199254740993,"interrupts":[{"id":"i","reason":"x","remindBeforeSeconds":[1, -90071992547409930e-1]}]}`))
	f.Add([]byte(`{"version":2,"runId":"r","agent":"a","pass":1,"decisions":[{"version":2,"decisionId":"d","interruptId":"i","status":"resolved","votes":[{"decisionId":"v"}, null]}]}`))
	types := []reflect.Type{
		reflect.TypeFor[*Suspension](), reflect.TypeFor[*Failure](), reflect.TypeFor[*Completion](),
		reflect.TypeFor[*Decision](), reflect.TypeFor[*Work](),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			plain, err := scanKeys(data, namesOf(typ), MaxDepth)
			if err != nil || !plain {
				continue
			}
			if err := exactKeysIn(data, typ); err != nil {
				t.Fatalf("the scan called %q plain for %v, the reading refuses it: %v", data, typ, err)
			}
		}
	})
}
