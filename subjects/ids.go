package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// InterruptID is the id of the ordinal-th interrupt (from 0) raised within
// tool call toolCallID ("" outside any tool call) of run. It is a pure
// function of its arguments, so the replay pass finds the decisions of the
// pass before: "int-" and 24 hex digits of SHA-256 over the three values
// separated by NUL bytes.
func InterruptID(run, toolCallID string, ordinal int) string {
	h := sha256.New()
	h.Write([]byte(run))
	h.Write([]byte{0})
	h.Write([]byte(toolCallID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(ordinal)))
	return "int-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// StepKey is the journal key of the ordinal-th call of step name within a
// tool call.
func StepKey(toolCallID, name string, ordinal int) string {
	return toolCallID + "/" + name + "#" + strconv.Itoa(ordinal)
}

// WorkMsgID is the Nats-Msg-Id of a pass's work item: one per pass, so a
// work item published twice is stored once.
func WorkMsgID(run string, pass int) string { return run + ":" + strconv.Itoa(pass) + ":work" }

// OutcomeMsgID is the Nats-Msg-Id of a pass's outcome: one per pass,
// whatever its kind.
func OutcomeMsgID(run string, pass int) string { return run + ":" + strconv.Itoa(pass) }

// PendingKey is the key of an interrupt in the pending index: the run id,
// a dot, and 24 hex digits of SHA-256 over the interrupt id.
func PendingKey(run, interrupt string) string {
	sum := sha256.Sum256([]byte(interrupt))
	return run + "." + hex.EncodeToString(sum[:12])
}
