// Package jstest starts real embedded JetStream servers for tests: each in
// its own temporary directory on a free loopback port, shut down by
// t.Cleanup.
package jstest

import (
	"context"
	"testing"
	"time"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

// Server starts an embedded server with file storage in t.TempDir(). cfg may
// adjust it; DataDir and Port are filled in when empty.
func Server(t testing.TB, cfg ...embedded.Config) *embedded.Server {
	t.Helper()
	var c embedded.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	if c.DataDir == "" && !c.Memory {
		c.DataDir = t.TempDir()
	}
	if c.Port == 0 {
		c.Port = -1
	}
	if c.Sync == "" {
		// Tests restart servers cleanly; fsync on every write only slows them.
		c.Sync = embedded.SyncInterval
	}
	srv, err := embedded.Start(c)
	if err != nil {
		t.Fatalf("start embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Restart shuts srv down and starts a server on the same port and data
// directory, as a crash and restart of the NATS server would.
func Restart(t testing.TB, srv *embedded.Server, cfg embedded.Config) *embedded.Server {
	t.Helper()
	port := srv.Port()
	srv.Shutdown()
	cfg.Port = port
	if cfg.Sync == "" {
		cfg.Sync = embedded.SyncInterval
	}
	next, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("restart embedded nats-server: %v", err)
	}
	t.Cleanup(next.Shutdown)
	return next
}

// Client connects to srv, provisions Interlock's streams and closes the
// connection at cleanup.
func Client(t testing.TB, srv *embedded.Server, cfg ...jetstream.Config) *jetstream.Client {
	t.Helper()
	var c jetstream.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: srv.URL(), Name: t.Name()}, c)
	if err != nil {
		t.Fatalf("dial %s: %v", srv.URL(), err)
	}
	t.Cleanup(cl.Close)
	if err := cl.Provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return cl
}
