package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// FuzzPolicy drives an interrupt with a policy through any sequence of
// votes, withdrawals, changes, duplicates and an expiry, under every
// combination of policy fields, and checks what must hold whatever
// arrives: the rules never change the record they are given; nothing is
// resolved without approvals of the required number of distinct eligible
// identities for one and the same answer (call digest and payload), nor
// cancelled without as many denials; the requester never counts unless
// the policy allows it; anonymous votes never count; one identity has at
// most one vote; the open votes stay within approvals + denials - 1; an
// approved call carries the digest its approvals were cast on; and an
// expiry stays its own outcome (the expiry's identity, never a vote).
func FuzzPolicy(f *testing.F) {
	f.Add([]byte{2, 1, 0, 1, 0, 10, 0, 20, 0, 30, 1, 40, 0})
	f.Add([]byte{3, 2, 3, 0, 1, 11, 0, 21, 1, 31, 2, 41, 3, 51, 0})
	f.Add([]byte{1, 1, 1, 2, 2, 12, 5, 22, 6, 32, 7})
	f.Add([]byte{2, 2, 2, 3, 3, 0, 9, 1, 9, 2, 9, 3, 9, 255, 0})
	pool := []string{"", "ada", "bob", "cy", "dan"}
	payloads := []json.RawMessage{nil, json.RawMessage(`{"amount":40}`), json.RawMessage(`{"amount":40.0}`), json.RawMessage(`{"amount":42.5}`)}
	args := []json.RawMessage{nil, json.RawMessage(`{"order":"A-1","amount":42.5}`), json.RawMessage(`{"order":"A-1","amount":40}`)}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) < 5 {
			return
		}
		pol := subjects.Policy{Approvals: 1 + int(prog[0]%4), Denials: 1 + int(prog[1]%3),
			AllowRequester: prog[2]&1 != 0, AllowChange: prog[2]&2 != 0}
		requester := pool[int(prog[3])%len(pool)]
		in := subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Policy: &pol}
		if prog[4]&1 != 0 {
			in.Approvers = []string{"ada", "bob", "cy", "dan"}
		}
		withCall := prog[4]&2 != 0
		if withCall {
			c, err := subjects.NewCall("issue_refund", args[1])
			if err != nil {
				t.Fatal(err)
			}
			in.Call = c
		}
		s := &Set{ExecutionKey: func(run, id, digest string) string { return digest }}
		rec, err := policyRun(t, s, requester, in)
		if err != nil {
			if subjects.CodeOf(err) != subjects.CodePolicyUnsatisfiable {
				t.Fatalf("suspension refused: %v", err)
			}
			if n, _ := s.eligible(in, requester); n >= max(pol.NeedApprovals(), pol.NeedDenials()) {
				t.Fatalf("a satisfiable policy (%d eligible) was refused: %v", n, err)
			}
			return
		}
		eligible := func(name string) bool {
			return name != "" && (len(in.Approvers) == 0 || slices.Contains(in.Approvers, name)) &&
				(name != requester || pol.AllowRequester)
		}
		deadline := t0.Add(time.Hour)
		for n, op := range prog[5:] {
			now := t0.Add(time.Duration(n+1) * time.Second)
			if op == 255 { // the deadline passes
				timer := subjects.Timer{Name: "t1", RunID: "r1", InterruptID: "q", Kind: subjects.TimerExpire, Deadline: deadline}
				i := Find(rec, "q")
				if rec.Interrupts[i].Decision != nil {
					continue
				}
				rec.Interrupts[i].ExpiresAt = &deadline
				before := clone(rec)
				next, _ := s.ApplyTimer(rec, i, timer, deadline)
				if !reflect.DeepEqual(before, rec) {
					t.Fatal("ApplyTimer changed the record")
				}
				rec = next
				if d := rec.Interrupts[i].Decision; d == nil || d.Approver != subjects.ExpiryApprover || d.Status != subjects.StatusCancelled {
					t.Fatalf("expiry did not close the interrupt as the expiry: %+v", d)
				}
				continue
			}
			who := pool[int(op)%len(pool)]
			status := []subjects.Status{subjects.StatusResolved, subjects.StatusCancelled, subjects.StatusWithdrawn}[int(op>>3)%3]
			d := subjects.Decision{Version: 2, DecisionID: fmt.Sprintf("d%d", op>>5), InterruptID: "q", Status: status,
				Payload: payloads[int(op>>2)%len(payloads)], Approver: who}
			if withCall && op&0x40 != 0 {
				d.Arguments = args[1+int(op>>7)]
			}
			if withCall && op&0x20 != 0 {
				d.CallDigest, _ = subjects.CallDigest("issue_refund", args[1+int(op>>6)%2])
			}
			before := clone(rec)
			i, rej := s.CheckDecision(rec, d, s.Principal(who), now)
			if !reflect.DeepEqual(before, rec) {
				t.Fatal("CheckDecision changed the record")
			}
			if rej != nil {
				if rej.Code == "" || rej.Detail == "" {
					t.Fatalf("rejection without code or detail: %+v", rej)
				}
				continue
			}
			if _, dup := Holds(rec, i, d); dup {
				continue
			}
			if !eligible(who) {
				t.Fatalf("%q (requester %q, policy %+v) had a vote accepted", who, requester, pol)
			}
			next := s.Decide(rec, i, d, uint64(100+n), now)
			if !reflect.DeepEqual(before, rec) {
				t.Fatal("Decide changed the record")
			}
			rec = next
			checkPolicyInvariants(t, rec, pol, eligible)
		}
	})
}

func checkPolicyInvariants(t *testing.T, rec *subjects.Run, pol subjects.Policy, eligible func(string) bool) {
	t.Helper()
	st := rec.Interrupts[Find(rec, "q")]
	votes := st.Votes
	if st.Decision != nil {
		votes = st.Decision.Votes
		if len(st.Votes) > 0 {
			t.Fatal("a decided interrupt keeps open votes")
		}
	} else if len(votes) > pol.NeedApprovals()+pol.NeedDenials()-1 {
		t.Fatalf("%d open votes, over approvals + denials - 1", len(votes))
	}
	seen := map[string]bool{}
	for _, v := range votes {
		if seen[v.Approver] {
			t.Fatalf("%s has two votes", v.Approver)
		}
		seen[v.Approver] = true
		if !eligible(v.Approver) {
			t.Fatalf("vote of %q counted", v.Approver)
		}
		if v.Status == subjects.StatusWithdrawn {
			t.Fatal("a withdrawal recorded as a vote")
		}
	}
	d := st.Decision
	if d == nil {
		return
	}
	if d.Approver == subjects.ExpiryApprover {
		return // its own outcome: whatever the votes
	}
	if d.Approver != "" && !seen[d.Approver] {
		t.Fatalf("final decision by %s, who has no vote", d.Approver)
	}
	switch d.Status {
	case subjects.StatusResolved:
		key := answerKey(d.CallDigest, d.Payload)
		n := 0
		for _, v := range votes {
			if v.Status == subjects.StatusResolved && answerKey(v.CallDigest, v.Payload) == key {
				n++
			}
		}
		if n < pol.NeedApprovals() {
			t.Fatalf("resolved with %d approvals for its answer, policy needs %d", n, pol.NeedApprovals())
		}
		if rec.Interrupts[0].Call != nil && (d.CallDigest == "" || d.ExecutionKey != d.CallDigest) {
			t.Fatalf("approved call without its digest or key: %+v", d)
		}
	case subjects.StatusCancelled:
		n := 0
		for _, v := range votes {
			if v.Status == subjects.StatusCancelled {
				n++
			}
		}
		if n < pol.NeedDenials() {
			t.Fatalf("cancelled with %d denials, policy needs %d", n, pol.NeedDenials())
		}
	default:
		t.Fatalf("final status %s", d.Status)
	}
}
