// Package fsyncs holds the experiment that counts what one JetStream write
// costs in fsyncs, with fsync before every acknowledgement (`sync always`):
// a publish of one message against atomic batches (nats-server 2.12+) of
// one, two and eight messages, on one server and on a three-node R3
// cluster of separate processes. Its test runs only on request, under
// strace:
//
//	INTERLOCK_FSYNCS=1 go test -count=1 -run TestFsyncsPerWrite -v ./internal/fsyncs
//
// TestFsyncsPerCycle does the same for a full cycle, Interlock against the
// floor, by stream (INTERLOCK_FSYNCS=one-server or r3-cluster runs only
// that topology):
//
//	INTERLOCK_FSYNCS=1 go test -count=1 -run TestFsyncsPerCycle -v -timeout 30m ./internal/fsyncs
//
// docs/benchmarks.md has what it measured and what the coordinator's
// writes do about it.
package fsyncs
