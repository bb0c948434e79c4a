// Package fault injects crashes at named points, for tests that prove
// redelivery converges: at a point the hook picks, the component's NATS
// connection closes with the message unacked, as when its process dies.
package fault

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
