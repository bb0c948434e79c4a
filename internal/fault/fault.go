// Package fault injects crashes at named points, for tests that prove
// redelivery converges: at a point the hook picks, the component's NATS
// connection closes with the message unacked, as when its process dies.
package fault

import (
	"context"
	"sync"
)

// Hook, when it returns true for a point, abandons the work there.
type Hook func(point string) bool

// Crash reports whether h picks point, calling abandon first when it does.
// A nil hook never crashes.
func (h Hook) Crash(point string, abandon func()) bool {
	if h != nil && h(point) {
		abandon()
		return true
	}
	return false
}

// Once returns a hook that picks point the first time it is reached, and a
// channel closed when it has.
func Once(point string) (Hook, <-chan struct{}) {
	fired := make(chan struct{})
	var once sync.Once
	return func(p string) bool {
		picked := false
		if p == point {
			once.Do(func() { picked = true; close(fired) })
		}
		return picked
	}, fired
}

type hookKey struct{}

// With returns ctx carrying h, for a component that takes its fault hook
// from the context its Start is given.
func With(ctx context.Context, h Hook) context.Context { return context.WithValue(ctx, hookKey{}, h) }

// From returns the hook ctx carries, or nil.
func From(ctx context.Context) Hook {
	h, _ := ctx.Value(hookKey{}).(Hook)
	return h
}
