// Package jstest starts real embedded JetStream servers for tests: each in
// its own temporary directory on a free loopback port, shut down by
// t.Cleanup.
package jstest

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

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
// directory, as a crash and restart of the NATS server would. The port
// must be the same, for the clients reconnect to it: should another socket
// have taken it meanwhile (a connection's local port, say), Restart tries
// again for a few seconds before it fails with embedded.ErrListen.
func Restart(t testing.TB, srv *embedded.Server, cfg embedded.Config) *embedded.Server {
	t.Helper()
	port := srv.Port()
	srv.Shutdown()
	cfg.Port = port
	if cfg.Sync == "" {
		cfg.Sync = embedded.SyncInterval
	}
	var next *embedded.Server
	err := samePort(restartWithin, func() (err error) { next, err = embedded.Start(cfg); return err })
	if err != nil {
		t.Fatalf("restart embedded nats-server on port %d: %v", port, err)
	}
	t.Cleanup(next.Shutdown)
	return next
}

// Client connects to srv, provisions Interlock's streams and closes the
// connection at cleanup.
func Client(t testing.TB, srv *embedded.Server, cfg ...jetstream.Config) *jetstream.Client {
	t.Helper()
	return ClientURL(t, srv.URL(), cfg...)
}

// ClientURL is Client for one or more comma-separated server URLs.
func ClientURL(t testing.TB, urls string, cfg ...jetstream.Config) *jetstream.Client {
	t.Helper()
	var c jetstream.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: urls, Name: t.Name()}, c)
	if err != nil {
		t.Fatalf("dial %s: %v", urls, err)
	}
	t.Cleanup(cl.Close)
	// Provision itself waits out a cluster that is still forming.
	pctx, pcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer pcancel()
	if err := cl.Provision(pctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return cl
}

// Cluster starts n servers forming one JetStream cluster on loopback, each
// in its own temporary directory. configs, when given, are nats-server
// configuration files (one per node) whose ports are moved: client and
// monitoring listeners to ports the kernel picks, routes to free ones.
// A route port taken before its node could bind it starts the cluster
// again on new ones. It returns when the cluster has a JetStream meta
// leader.
func Cluster(t testing.TB, n int, configs ...string) []*embedded.Server {
	t.Helper()
	return cluster(t, n, embedded.SyncInterval, configs)
}

// SyncedCluster is Cluster of n nodes with no configuration files whose
// servers run in durability mode sync (benchmarks: embedded.SyncAlways
// fsyncs before every acknowledgement, as in production). Unlike Cluster,
// which returns as soon as there is a meta leader (tests of provisioning
// on a forming cluster need that), it returns once the cluster can place
// a stream on all n nodes.
func SyncedCluster(t testing.TB, n int, sync embedded.Sync) []*embedded.Server {
	t.Helper()
	servers := cluster(t, n, sync, nil)
	nc, err := nats.Connect(URLs(servers))
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "JSTEST_PLACEMENT", Subjects: []string{"jstest.placement"},
			Replicas: n, Storage: natsjs.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "JSTEST_PLACEMENT")
		}
		cancel()
		if err == nil {
			return servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster of %d could not place a stream on every node in 30s: %v", n, err)
		}
		time.Sleep(100 * time.Millisecond) // the peers report in on their own schedule; nothing to wait on
	}
}

func cluster(t testing.TB, n int, sync embedded.Sync, configs []string) []*embedded.Server {
	t.Helper()
	var servers []*embedded.Server
	onNewPorts(t, func() (err error) { servers, err = startCluster(t, n, sync, configs); return err })
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, s := range servers {
			if s.JetStreamReady() {
				ready++
			}
		}
		if ready == n {
			return servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster of %d formed no JetStream meta leader in 30s", n)
		}
		time.Sleep(50 * time.Millisecond) // polling the servers' state; no event to wait on
	}
}

// startCluster starts the n nodes of Cluster at once, on new route ports;
// when one fails it stops the others and returns its error.
func startCluster(t testing.TB, n int, sync embedded.Sync, configs []string) ([]*embedded.Server, error) {
	ports := freePorts(t, n)
	var urls []*url.URL
	for _, r := range routes(ports) {
		u, _ := url.Parse(r)
		urls = append(urls, u)
	}
	servers := make([]*embedded.Server, n)
	cfgs := make([]embedded.Config, n)
	for i := range n {
		cfg := embedded.Config{DataDir: t.TempDir(), Port: -1, Name: fmt.Sprintf("n%d", i+1),
			Sync: sync, StartTimeout: 20 * time.Second}
		if len(configs) > i {
			cfg.ConfigFile, cfg.Name = configs[i], ""
		}
		cfg.Adjust = func(o *server.Options) {
			if o.HTTPPort != 0 {
				o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
			}
			if o.Cluster.Name == "" {
				o.Cluster.Name = "interlock-test"
			}
			o.Cluster.Host, o.Cluster.Port, o.Routes = "127.0.0.1", ports[i], urls
		}
		cfgs[i] = cfg
	}
	err := startAll(n, func(i int) (err error) { servers[i], err = embedded.Start(cfgs[i]); return err }, func(i int) {
		if servers[i] != nil {
			servers[i].Shutdown()
		}
	})
	return servers, err
}

// URLs joins the servers' client URLs for a client that may fail over.
func URLs(servers []*embedded.Server) string {
	var out []string
	for _, s := range servers {
		if s.Running() {
			out = append(out, s.URL())
		}
	}
	return strings.Join(out, ",")
}

// Users are the NATS users of the shipped deploy/nats/auth.conf.
// The agent user is agent refunds's, agent_billing agent billing's; mcp
// and mcp_proxy run the MCP server's and proxy's built-in agents.
var Users = []string{"admin", "coordinator", "agent", "agent_billing", "mcp", "mcp_proxy", "notifier", "gateway", "auditor", "ada", "bob"}

// Password is the password tests give user.
func Password(user string) string { return "pw-" + user }

// PasswordEnv is the environment variable auth.conf reads user's password
// from.
func PasswordEnv(user string) string { return "INTERLOCK_" + strings.ToUpper(user) + "_PASSWORD" }

// SetPasswords sets every user's password in the process environment, so
// that a server can load the shipped auth.conf. The values are always the
// same, so they stay set for the rest of the test binary and parallel tests
// may all call it (t.Setenv would forbid t.Parallel).
func SetPasswords(t testing.TB) {
	t.Helper()
	for _, u := range Users {
		if err := os.Setenv(PasswordEnv(u), Password(u)); err != nil {
			t.Fatalf("set %s: %v", PasswordEnv(u), err)
		}
	}
}

// As puts user's name and password into each of the comma-separated urls.
func As(user, urls string) string {
	return strings.ReplaceAll(urls, "nats://", "nats://"+user+":"+Password(user)+"@")
}

// waitingParallelism is how many tests RaiseParallel lets run at once per
// CPU.
const waitingParallelism = 4

// RaiseParallel lets waitingParallelism parallel tests per CPU run at once
// unless -test.parallel was given. Call it in TestMain before m.Run, in
// packages whose tests each start their own server and spend most of their
// time waiting on it (deliveries, acks, timers), not on the CPU: go test's
// default, one per CPU, leaves a 2-core machine mostly idle.
func RaiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(waitingParallelism*runtime.GOMAXPROCS(0)))
	}
}
