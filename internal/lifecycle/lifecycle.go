// Package lifecycle holds the one rule by which every long-running part of
// Interlock stops (the worker, the coordinator, the notifier, the gateway,
// the AG-UI bridge, the consumers under them): Stop(ctx) waits for the
// work under way while ctx lasts, then cancels what is left and returns an
// error wrapping ctx's; Stopped() is a channel closed once Stop has
// returned.
package lifecycle

import (
	"context"
	"fmt"
	"sync"
)

// Wait waits for done while ctx lasts. When ctx ends first it calls cancel
// (which ends the work left, with the part's own cause), and returns an
// error wrapping ctx's cause without waiting any longer: a handler that
// ignores its context does not hold up the shutdown of the process.
func Wait(ctx context.Context, done <-chan struct{}, cancel func()) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		cancel()
		return fmt.Errorf("work still under way when the stop's deadline passed: %w", context.Cause(ctx))
	}
}

// Stopped is the channel a part's Stopped returns: closed once, by Close.
// The zero value is ready to use.
type Stopped struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
}

// C returns the channel, closed once Close has been called.
func (s *Stopped) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Close closes the channel; closing it again is harmless.
func (s *Stopped) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	if !s.closed {
		close(s.ch)
		s.closed = true
	}
}
