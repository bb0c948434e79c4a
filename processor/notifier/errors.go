package notifier

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrConfig is matched by every configuration error; the message names
	// the file and line.
	ErrConfig = errors.New("notifier config")
	// ErrSignature means a webhook signature does not verify.
	ErrSignature = errors.New("webhook signature invalid")
	// ErrNoGateway: no gateway answered the Slack card sink's request
	// (interlock.chat.post); the delivery is retried.
	ErrNoGateway = errors.New("the gateway's chat card service did not answer")
	// ErrGatewayRefused: the gateway refused to post a Slack card (its
	// code says why); the delivery is dead-lettered at once.
	ErrGatewayRefused = errors.New("the gateway refused the Slack card")
)

// ConfigError is a configuration mistake at a line of a file.
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// permanent marks a delivery error no retry can fix (a 4xx answer, say).
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// busy is a refusal that says when to try again (429 or 503 with
// Retry-After).
type busy struct {
	after time.Duration
	err   error
}

func (b *busy) Error() string { return b.err.Error() }
func (b *busy) Unwrap() error { return b.err }
