package subjects_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/interlockhq/interlock/subjects"
)

// BenchmarkDecodeWork decodes a replay work item with one decision, as a
// worker does for every pass after the first: the size limit, the version,
// the fields (unknown ones refused, names matched exactly) and their rules.
//
//	go test -run '^$' -bench BenchmarkDecodeWork -benchmem ./subjects
func BenchmarkDecodeWork(b *testing.B) {
	data, err := json.Marshal(subjects.Work{
		PassRef: subjects.PassRef{Version: subjects.Version, RunID: "0193a5c2-7d1e-7b6a-9f00-4c1d2e3f4a5b", Agent: "refunds", Pass: 1,
			Input: json.RawMessage(`{"order":"A-1","amount":42.5}`)},
		Decisions: []subjects.Decision{{Version: subjects.Version, DecisionID: "0193a5c2-7d1e-7b6a-9f00-4c1d2e3f4a5c",
			InterruptID: "int-786a4f50fd5576fd03c9c0bc", Status: subjects.StatusResolved, Approver: "ada",
			Payload: json.RawMessage(`{"approved":true}`)}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := subjects.DecodeWork(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeManyKeys decodes a completion whose result is one object
// of 100,000 keys (under the 1 MiB limit): the check that no key appears
// twice in an object must stay linear (it took 29 s when it compared each
// key with every earlier one).
//
//	go test -run '^$' -bench BenchmarkDecodeManyKeys ./subjects
func BenchmarkDecodeManyKeys(b *testing.B) {
	result := make(map[string]int, 100_000)
	for i := range 100_000 {
		result[strconv.Itoa(i)] = 0
	}
	raw, err := json.Marshal(result)
	if err != nil {
		b.Fatal(err)
	}
	data, err := json.Marshal(subjects.Completion{PassRef: subjects.PassRef{Version: subjects.Version,
		RunID: "run-1", Agent: "refunds"}, Result: raw})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := subjects.DecodeCompletion(data); err != nil {
			b.Fatal(err)
		}
	}
}
