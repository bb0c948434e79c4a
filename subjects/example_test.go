package subjects_test

import (
	"fmt"

	"github.com/interlockhq/interlock/subjects"
)

func ExampleNamespace() {
	ns := subjects.Default()
	s, _ := ns.Suspended("refunds", "01J9ZK")
	fmt.Println(s)
	r, _ := ns.Resume("01J9ZK")
	fmt.Println(r)
	e, _ := ns.Events("01J9ZK", subjects.EventDecisionRejected)
	fmt.Println(e)
	fmt.Println(ns.All(subjects.KindSuspended))
	// Output:
	// interlock.suspended.refunds.01J9ZK
	// interlock.resume.01J9ZK
	// interlock.events.01J9ZK.decision_rejected
	// interlock.suspended.>
}

func ExampleNamespace_Parse() {
	a, err := subjects.Default().Parse("interlock.suspended.refunds.01J9ZK")
	fmt.Println(a.Kind, a.Agent, a.Run, err)
	_, err = subjects.Default().Parse("interlock.resume.a.b.c")
	fmt.Println(err)
	// Output:
	// suspended refunds 01J9ZK <nil>
	// invalid subject: "interlock.resume.a.b.c" has 4 tokens after the prefix, resume subjects have 2 (resume.<run>) or 3 (resume.<run>.<approver>)
}

func ExampleValidateToken() {
	fmt.Println(subjects.ValidateToken("run id", "run-42"))
	fmt.Println(subjects.ValidateToken("run id", "run.42"))
	// Output:
	// <nil>
	// invalid subject token: run id "run.42" has '.' (the token separator) at byte 3; use letters, digits, '-' and '_'
}

func ExampleDecodeDecision() {
	_, err := subjects.DecodeDecision([]byte(`{"version":1,"decisionId":"d1","interruptId":"i1","status":"approved"}`))
	fmt.Println(subjects.CodeOf(err), err)
	// Output:
	// malformed malformed message: status "approved" is not "resolved" or "cancelled"
}
