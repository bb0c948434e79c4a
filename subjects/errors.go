package subjects

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidToken means a value cannot be used as a subject token.
	ErrInvalidToken = errors.New("invalid subject token")
	// ErrInvalidSubject means a subject is not one of Interlock's subjects.
	ErrInvalidSubject = errors.New("invalid subject")
	// ErrMalformed means a message is not valid JSON or misses required fields.
	ErrMalformed = errors.New("malformed message")
	// ErrTooLarge means a message is over its size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrWrongAgent means a pass outcome came from another agent than the
	// run's.
	ErrWrongAgent = errors.New("outcome of another agent's run")
	// ErrUnsupportedVersion means a message carries a protocol version this
	// build does not speak.
	ErrUnsupportedVersion = errors.New("unsupported protocol version")
)

// ProtocolError describes why a message was refused: a stable [Code] for
// machines and a detail for people. It wraps one of the package sentinels.
type ProtocolError struct {
	Code   Code
	Detail string
	err    error
}

func (e *ProtocolError) Error() string { return fmt.Sprintf("%s: %s", e.err, e.Detail) }

// Unwrap returns the sentinel the error belongs to.
func (e *ProtocolError) Unwrap() error { return e.err }

func malformed(format string, args ...any) error {
	return &ProtocolError{Code: CodeMalformed, Detail: fmt.Sprintf(format, args...), err: ErrMalformed}
}

// malformedBy is a malformed-message error caused by err (a field that is
// not a valid token): it matches both ErrMalformed and err.
func malformedBy(err error) error {
	return &ProtocolError{Code: CodeMalformed, Detail: err.Error(), err: errors.Join(ErrMalformed, err)}
}

// WrongAgent is the refusal of an outcome that agent published for run,
// whose agent is runAgent: it matches ErrWrongAgent and has CodeWrongAgent.
func WrongAgent(run, agent, runAgent string) error {
	return &ProtocolError{Code: CodeWrongAgent, err: ErrWrongAgent,
		Detail: fmt.Sprintf("agent %s reported on run %s, which is agent %s's", agent, run, runAgent)}
}

// CodeOf returns the rejection code carried by err, or CodeMalformed when err
// carries none.
func CodeOf(err error) Code {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeMalformed
}

// Refusal is a message refused for a rule of the protocol with code: it
// matches ErrMalformed and CodeOf gives code.
func Refusal(code Code, format string, args ...any) error {
	return &ProtocolError{Code: code, Detail: fmt.Sprintf(format, args...), err: ErrMalformed}
}
