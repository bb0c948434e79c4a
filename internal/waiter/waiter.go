// Package waiter lets benchmark drivers wait for named signals: a channel
// per key, closed when the key is signalled.
package waiter

import (
	"context"
	"sync"
)

// Set is a set of waits by key. The zero value is ready to use.
type Set struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// Wait returns a channel closed when key is signalled. Ask before the event
// can happen.
func (s *Set) Wait(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.m[key] = ch
	return ch
}

// Signal closes key's channel, if anyone waits on it.
func (s *Set) Signal(key string) {
	s.mu.Lock()
	ch, ok := s.m[key]
	delete(s.m, key)
	s.mu.Unlock()
	if ok {
		close(ch)
	}
}

// Await blocks until ch is closed or ctx is done.
func Await(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
