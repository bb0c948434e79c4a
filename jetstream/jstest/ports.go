package jstest

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/interlockhq/interlock/jetstream/embedded"
)

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the caller binds it: only for what
// must be known before anything listens (cluster route ports), with
// onNewPorts around the start.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// clusterAttempts bounds how often onNewPorts starts a cluster again.
const clusterAttempts = 5

// onNewPorts runs start, which picks new route ports each time, again while
// it fails because one was taken before its node bound it
// (embedded.ErrListen), at most clusterAttempts times; any other error, or
// the last, fails t.
func onNewPorts(t testing.TB, start func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil {
			return
		}
		if !errors.Is(err, embedded.ErrListen) || attempt == clusterAttempts {
			t.Fatalf("start cluster: %v", err)
		}
		t.Logf("cluster attempt %d: %v; again on new route ports", attempt, err)
	}
}

// restartWithin is how long a restart waits for its ports.
const restartWithin = 5 * time.Second

// samePort runs start, which binds ports that must stay what they were
// (a restart: clients reconnect to them), again while another socket holds
// one (embedded.ErrListen), for up to within.
func samePort(within time.Duration, start func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := start()
		if err == nil || !errors.Is(err, embedded.ErrListen) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // until the port's other holder lets go; nothing to wait on
	}
}

// startAll runs start(0) ... start(n-1) at once; when any fails it runs
// stop on every one and returns the first error.
func startAll(n int, start func(i int) error, stop func(i int)) error {
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- start(i) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		for i := range n {
			stop(i)
		}
	}
	return first
}

// routes are the route URLs of cluster nodes on the given ports.
func routes(ports []int) []string {
	var out []string
	for _, p := range ports {
		out = append(out, "nats-route://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return out
}
