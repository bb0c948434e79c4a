package rules

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// FuzzDecision feeds decision bodies from outside, in any order, to the
// rules and checks what must hold whatever arrives: nothing panics, the
// record given is never changed, only an identity an interrupt names (or
// anyone, when it names none) gets a decision recorded, a recorded resolve
// satisfies the interrupt's schema, and the run resumes only when nothing
// waits.
func FuzzDecision(f *testing.F) {
	for _, seed := range []struct {
		body     string
		identity string
		offset   int
	}{
		{`{"version":1,"decisionId":"d1","interruptId":"a","status":"resolved"}`, "ada", 0},
		{`{"version":1,"decisionId":"d2","interruptId":"b","status":"resolved","payload":{"amount":3}}`, "", 0},
		{`{"version":1,"decisionId":"d3","interruptId":"b","status":"resolved","payload":{"amount":"x"}}`, "", 0},
		{`{"version":1,"decisionId":"d4","interruptId":"a","status":"cancelled"}`, "bob", 120},
		{`{"version":1,"decisionId":"d5","interruptId":"zz","status":"cancelled"}`, "", 0},
	} {
		f.Add([]byte(seed.body), seed.identity, seed.offset)
	}
	deadline := t0.Add(time.Minute)
	f.Fuzz(func(t *testing.T, body []byte, identity string, offset int) {
		s := &Set{}
		b := ask("b")
		b.ResponseSchema = json.RawMessage(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"}}}`)
		b.ExpiresAt = &deadline
		rec := suspended(t, s, ask("a", "ada"), b)
		d, err := subjects.DecodeDecision(body)
		if err != nil {
			return
		}
		d.Approver = identity
		before := clone(rec)
		now := t0.Add(time.Duration(offset%600) * time.Second)
		i, rej := s.CheckDecision(rec, d, s.Principal(identity), now)
		if !reflect.DeepEqual(before, rec) {
			t.Fatal("CheckDecision changed the record")
		}
		if rej != nil {
			if rej.Code == "" || rej.Detail == "" {
				t.Fatalf("rejection without code or detail: %+v", rej)
			}
			return
		}
		st := rec.Interrupts[i]
		if len(st.Approvers) > 0 && !slices.Contains(st.Approvers, identity) {
			t.Fatalf("%q decided an interrupt only %v may decide", identity, st.Approvers)
		}
		if st.Decision != nil {
			return // a duplicate
		}
		next := ApplyDecision(rec, i, d, 1, now)
		if !reflect.DeepEqual(before, rec) {
			t.Fatal("ApplyDecision changed the record")
		}
		if d.Status == subjects.StatusResolved && len(st.ResponseSchema) > 0 {
			if err := s.schemas().CheckAnswer(st.Interrupt, d.Status, d.Payload); err != nil {
				t.Fatalf("a resolve that fails its schema was accepted: %v", err)
			}
		}
		if (next.Status == subjects.RunResuming) != (len(next.Pending()) == 0) {
			t.Fatalf("status %s with %d pending", next.Status, len(next.Pending()))
		}
	})
}
