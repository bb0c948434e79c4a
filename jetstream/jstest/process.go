package jstest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/interlockhq/interlock/jetstream/embedded"
)

// nodeEnv carries a node's spec to the child process RunNode serves it in.
const nodeEnv = "INTERLOCK_JSTEST_NODE"

// nodeSpec is one cluster node run in a process of its own. Port and
// HTTPPort are -1 (the kernel picks) until the node first starts, and then
// the ports it got, which a restart binds again.
type nodeSpec struct {
	Name, ConfigFile, DataDir   string
	Port, ClusterPort, HTTPPort int
	Routes                      []string
	// Sync is the node's durability mode (default embedded.SyncInterval).
	Sync embedded.Sync
}

// nodeReady is what a node process prints on its first line once it
// listens: "ready" and the ports it got, or "listen-failed" and why.
type nodeReady struct {
	Port, HTTPPort int
}

const (
	readyLine        = "ready "
	listenFailedLine = "listen-failed "
)

// RunNode serves a cluster node and exits when this process was started by
// ProcessCluster for that; otherwise it returns at once. Call it first in
// the TestMain of a package that uses ProcessCluster: the test binary
// itself is the nats-server process, so no binary needs building.
func RunNode() {
	raw := os.Getenv(nodeEnv)
	if raw == "" {
		return
	}
	var spec nodeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "node spec:", err)
		os.Exit(2)
	}
	srv, err := embedded.Start(spec.config())
	if errors.Is(err, embedded.ErrListen) {
		fmt.Println(listenFailedLine + err.Error())
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "start node:", err)
		os.Exit(1)
	}
	ports, _ := json.Marshal(nodeReady{Port: srv.Port(), HTTPPort: monitorPort(srv)})
	fmt.Println(readyLine + string(ports))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() { // the parent test died: its end of stdin closed
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(eof)
	}()
	select {
	case <-sigs:
	case <-eof:
	}
	srv.Shutdown()
	os.Exit(0)
}

// monitorPort is the port of srv's monitoring listener.
func monitorPort(srv *embedded.Server) int {
	u, err := url.Parse(srv.MonitorURL())
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func (s nodeSpec) config() embedded.Config {
	sync := s.Sync
	if sync == "" {
		sync = embedded.SyncInterval
	}
	cfg := embedded.Config{DataDir: s.DataDir, Port: s.Port, Name: s.Name, ConfigFile: s.ConfigFile,
		Sync: sync, StartTimeout: 20 * time.Second}
	if s.ConfigFile != "" {
		cfg.Name = ""
	}
	cfg.Adjust = func(o *server.Options) {
		if o.Cluster.Name == "" {
			o.Cluster.Name = "interlock-test"
		}
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", s.ClusterPort
		o.Routes = nil
		for _, r := range s.Routes {
			u, _ := url.Parse(r)
			o.Routes = append(o.Routes, u)
		}
		o.HTTPHost, o.HTTPPort = "127.0.0.1", s.HTTPPort
	}
	return cfg
}

// Node is a cluster node running in a process of its own.
type Node struct {
	t    testing.TB
	spec nodeSpec
	cmd  *exec.Cmd
	done chan struct{}
}

// URL is the node's client URL.
func (n *Node) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.spec.Port) }

// MonitorURL is the node's monitoring listener, e.g. http://127.0.0.1:8222.
func (n *Node) MonitorURL() string { return "http://127.0.0.1:" + strconv.Itoa(n.spec.HTTPPort) }

// Name is the server name the node runs with (its config's, when loaded
// from one).
func (n *Node) Name() string { return n.spec.Name }

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Start starts the node's process (again, on the same ports and data
// directory after Kill) and waits until it accepts connections. Should
// another socket have taken one of its ports meanwhile, it tries again for
// a few seconds.
func (n *Node) Start() {
	n.t.Helper()
	if err := samePort(restartWithin, n.start); err != nil {
		n.t.Fatal(err)
	}
}

// start is Start, with a port that could not be bound reported as an error
// matching embedded.ErrListen.
func (n *Node) start() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("test binary: %w", err)
	}
	spec, _ := json.Marshal(n.spec)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("node stdin: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("node stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %s: %w", n.spec.Name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	line, _ := bufio.NewReader(out).ReadString('\n')
	go func() {
		_ = cmd.Wait()
		_ = stdin.Close()
		close(n.done)
	}()
	line = strings.TrimSpace(line)
	if reason, ok := strings.CutPrefix(line, listenFailedLine); ok {
		<-n.done
		return fmt.Errorf("node %s: %w (%s)", n.spec.Name, embedded.ErrListen, reason)
	}
	var ready nodeReady
	if raw, ok := strings.CutPrefix(line, readyLine); !ok || json.Unmarshal([]byte(raw), &ready) != nil {
		<-n.done
		return fmt.Errorf("node %s did not start", n.spec.Name)
	}
	n.spec.Port, n.spec.HTTPPort = ready.Port, ready.HTTPPort
	return nil
}

// Kill SIGKILLs the node's process, as a crash would, and waits until it
// is gone.
func (n *Node) Kill() {
	if !n.Running() {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
}

// Stop stops the node's process cleanly and waits until it is gone.
func (n *Node) Stop() {
	if !n.Running() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		n.Kill()
	}
}

// Healthy reports whether the node's monitoring listener says JetStream is
// healthy (/healthz answers 200).
func (n *Node) Healthy() bool {
	// No kept-alive connection: its goroutines would outlive the test.
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(n.MonitorURL() + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ProcessCluster starts n cluster nodes, each a separate process (the test
// binary, see RunNode) with its own temporary directory, loopback client
// and monitoring listeners on ports the kernel picks, and free route ports.
// configs, when given, are nats-server configuration files (one per node)
// whose ports are moved. A route port taken before its node could bind it
// starts the cluster again on new ones. It returns when every node's
// /healthz answers 200; the nodes are stopped at cleanup.
func ProcessCluster(t testing.TB, n int, configs ...string) []*Node {
	t.Helper()
	return processCluster(t, n, embedded.SyncInterval, configs)
}

// DurableProcessCluster is ProcessCluster with every node in production's
// durability mode, fsync before ack, for tests that SIGKILL nodes and lose
// one for good: on an interval, a decision's event acknowledged before the
// kills was once missing after them in CI (what the killed node had acked
// is not promised to survive a second loss).
func DurableProcessCluster(t testing.TB, n int, configs ...string) []*Node {
	t.Helper()
	return processCluster(t, n, embedded.SyncAlways, configs)
}

func processCluster(t testing.TB, n int, sync embedded.Sync, configs []string) []*Node {
	t.Helper()
	var nodes []*Node
	onNewPorts(t, func() (err error) { nodes, err = startProcessCluster(t, n, sync, configs); return err })
	for _, node := range nodes {
		t.Cleanup(node.Stop)
	}
	WaitHealthy(t, 30*time.Second, nodes...)
	return nodes
}

// startProcessCluster starts the nodes of ProcessCluster on new route
// ports, all at once; when one fails it stops the others and returns its
// error.
func startProcessCluster(t testing.TB, n int, sync embedded.Sync, configs []string) ([]*Node, error) {
	ports := freePorts(t, n)
	nodes := make([]*Node, n)
	for i := range n {
		spec := nodeSpec{Name: fmt.Sprintf("n%d", i+1), DataDir: t.TempDir(), Port: -1, ClusterPort: ports[i],
			HTTPPort: -1, Routes: routes(ports), Sync: sync}
		if len(configs) > i {
			spec.ConfigFile = configs[i]
			if o, err := server.ProcessConfigFile(configs[i]); err == nil {
				spec.Name = o.ServerName
			}
		}
		nodes[i] = &Node{t: t, spec: spec}
	}
	err := startAll(n, func(i int) error { return nodes[i].start() }, func(i int) { nodes[i].Stop() })
	return nodes, err
}

// WaitHealthy waits until every node's /healthz answers 200, or fails t.
func WaitHealthy(t testing.TB, within time.Duration, nodes ...*Node) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, node := range nodes {
		for !node.Healthy() {
			if time.Now().After(deadline) {
				t.Fatalf("node %s not healthy within %s", node.Name(), within)
			}
			time.Sleep(50 * time.Millisecond) // polling the node's health; no event to wait on
		}
	}
}

// NodeURLs joins the client URLs of the running nodes.
func NodeURLs(nodes []*Node) string {
	var out []string
	for _, node := range nodes {
		if node.Running() {
			out = append(out, node.URL())
		}
	}
	return strings.Join(out, ",")
}
