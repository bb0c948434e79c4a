package subjects

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// InterruptID is the id of the ordinal-th interrupt (from 0) raised within
// tool call toolCallID ("" outside any tool call) of run. It is a pure
// function of its arguments, so the replay pass finds the decisions of the
// pass before: "int-" and 24 hex digits of SHA-256 over the three values
// separated by NUL bytes.
func InterruptID(run, toolCallID string, ordinal int) string {
	h := sha256.New()
	h.Write([]byte(wellFormed(run)))
	h.Write([]byte{0})
	h.Write([]byte(wellFormed(toolCallID)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(ordinal)))
	return "int-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// StepKey is the journal key of the ordinal-th call of step name within a
// tool call.
func StepKey(toolCallID, name string, ordinal int) string {
	return wellFormed(toolCallID) + "/" + wellFormed(name) + "#" + strconv.Itoa(ordinal)
}

// wellFormed is s with each byte that is not UTF-8 read as U+FFFD, as JSON
// encoding writes it: a key or id computed from s matches the one the
// record keeps, so a replay finds its step (an invalid byte in a step's
// name ran the step again on every replay). The SDKs read a lone surrogate
// so, as Go's JSON decoding does.
func wellFormed(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s))
}

// WorkMsgID is the Nats-Msg-Id of a pass's work item: one per pass, so a
// work item published twice is stored once.
func WorkMsgID(run string, pass int) string { return run + ":" + strconv.Itoa(pass) + ":work" }

// Nonce returns 32 hex digits from the operating system's random source:
// the unpredictable part of the message ids that agents and starters write.
func Nonce() string {
	var b [16]byte
	// crypto/rand.Read never returns an error (Go 1.24 and later).
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StartMsgID is the Nats-Msg-Id of a start (the work item of a run's first
// pass on <prefix>.start.<agent>): the run, ":0:start:" and nonce, a fresh
// [Nonce] per Start call, reused only by that call's retries. Message ids
// are deduplicated stream-wide and any publisher sets its own, so an id
// another publisher could compute (the run alone) would let it store a
// message with that id first and have this start dropped as a duplicate.
func StartMsgID(run, nonce string) string { return run + ":0:start:" + nonce }

// PassKey is the key of the pass a work item starts, from the work item as
// stored: 32 hex digits of SHA-256 over "interlock pass key", NUL, the
// item's Nats-Msg-Id, NUL and its body. Only the work item's publisher
// (whoever started the run, with a nonce in the id; the coordinator for a
// replay, whose body carries the decisions) and the agent's own consumer
// know both, so nobody else can compute the key, while every attempt of the
// pass (a redelivery, a pass taken over) finds the same one. A work item
// without a message id gets a fresh [Nonce] per attempt instead.
func PassKey(workMsgID string, work []byte) string {
	if workMsgID == "" {
		return Nonce()
	}
	h := sha256.New()
	h.Write([]byte("interlock pass key\x00" + workMsgID + "\x00"))
	h.Write(work)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// OutcomeMsgID is the Nats-Msg-Id of a pass's outcome, whatever its kind:
// the run, the pass and the pass's key ([PassKey]). Every attempt of the
// pass writes the same id, so two attempts store one outcome; another
// publisher cannot compute it, so cannot have the outcome dropped as a
// duplicate.
func OutcomeMsgID(run string, pass int, key string) string {
	return run + ":" + strconv.Itoa(pass) + ":" + key
}

// EmitMsgID is the Nats-Msg-Id of the n-th AG-UI event (from 0) a run's
// passes emit, as emitted by a pass with key ([PassKey]): the run, ":emit:",
// n, ":" and the key. Attempts of one pass store an event once.
func EmitMsgID(run string, n int, key string) string {
	return run + ":emit:" + strconv.Itoa(n) + ":" + key
}

// PendingKey is the key of an interrupt in the pending index: the run id,
// a dot, and 24 hex digits of SHA-256 over the interrupt id.
func PendingKey(run, interrupt string) string {
	sum := sha256.Sum256([]byte(interrupt))
	return run + "." + hex.EncodeToString(sum[:12])
}
