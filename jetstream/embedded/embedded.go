// Package embedded runs a nats-server with JetStream inside the Interlock
// process: the default for `interlock serve` and `interlock demo`, and what
// every test runs against.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Sync says when the server flushes JetStream writes to disk.
type Sync string

const (
	// SyncAlways acknowledges a write only after it is fsynced: a power cut
	// loses nothing that was acknowledged. The default.
	SyncAlways Sync = "always"
	// SyncInterval fsyncs every SyncEvery (default 2 minutes, nats-server's
	// default). Much faster; a power cut or kernel crash can lose writes
	// acknowledged since the last fsync. A process crash loses nothing: the
	// operating system still holds the data.
	SyncInterval Sync = "interval"
)

// ErrConfig means the server configuration is not usable.
var ErrConfig = errors.New("embedded server config")

// ErrListen means the server could not start one of its listeners (client,
// cluster or monitoring), typically because the port is in use. Start
// reports it as soon as the server does, not after StartTimeout.
var ErrListen = errors.New("embedded server cannot listen")

// Config is what the embedded server is.
type Config struct {
	// DataDir holds the JetStream file store. Required unless Memory is set.
	DataDir string
	// Memory keeps JetStream in memory only (tests and throwaway demos).
	Memory bool
	// Host and Port to listen on; default 127.0.0.1:4222. Port -1 picks a
	// free port.
	Host string
	Port int
	// Sync is the durability mode; default SyncAlways.
	Sync      Sync
	SyncEvery time.Duration
	// Name of the server; default "interlock".
	Name string
	// ConfigFile, when set, is a nats-server configuration file loaded
	// first; the fields above override it where they are set.
	ConfigFile string
	// StartTimeout bounds start-up; default 10 seconds.
	StartTimeout time.Duration
	// Adjust, when set, edits the nats-server options last (tests that move
	// a shipped configuration's ports, for example).
	Adjust func(*server.Options)
}

// Server is a running embedded nats-server.
type Server struct {
	ns  *server.Server
	cfg Config
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, cfg.ConfigFile, err)
		}
	}
	if cfg.Host != "" || opts.Host == "" {
		opts.Host = orDefault(cfg.Host, "127.0.0.1")
	}
	if cfg.Port != 0 || opts.Port == 0 {
		opts.Port = cfg.Port
		if cfg.Port == 0 {
			opts.Port = 4222
		}
	}
	if cfg.Name != "" || opts.ServerName == "" {
		opts.ServerName = orDefault(cfg.Name, "interlock")
	}
	opts.JetStream = true
	switch {
	case cfg.Memory:
		opts.StoreDir = ""
		opts.JetStreamMaxStore = 0
	case cfg.DataDir != "":
		opts.StoreDir = cfg.DataDir
	case opts.StoreDir == "":
		return nil, fmt.Errorf("%w: DataDir is required for file storage", ErrConfig)
	}
	switch cfg.Sync {
	case SyncAlways, "":
		if cfg.ConfigFile == "" || cfg.Sync == SyncAlways {
			opts.SyncAlways = true
			opts.SyncInterval = 2 * time.Minute
		}
	case SyncInterval:
		opts.SyncAlways = false
		opts.SyncInterval = cfg.SyncEvery
		if opts.SyncInterval == 0 {
			opts.SyncInterval = 2 * time.Minute
		}
	default:
		return nil, fmt.Errorf("%w: sync %q is not %q or %q", ErrConfig, cfg.Sync, SyncAlways, SyncInterval)
	}
	opts.NoSigs = true
	if cfg.Adjust != nil {
		cfg.Adjust(opts)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	fatal := fatalLog(make(chan string, 1))
	ns.SetLogger(fatal, false, false)
	ns.Start()
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			ns.Shutdown()
			if strings.Contains(msg, "listen") {
				return nil, fmt.Errorf("%w: %s", ErrListen, msg)
			}
			return nil, fmt.Errorf("%w: %s", ErrConfig, msg)
		default:
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			return nil, fmt.Errorf("nats-server did not start listening on %s within %s (is the port in use?)",
				net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), timeout)
		}
	}
	return &Server{ns: ns, cfg: cfg}, nil
}

// fatalLog is the server's logger: silent, except that it hands the first
// fatal error (a listener that could not start, JetStream that could not)
// to Start.
type fatalLog chan string

func (l fatalLog) Fatalf(format string, v ...any) {
	select {
	case l <- fmt.Sprintf(format, v...):
	default:
	}
}
func (fatalLog) Noticef(string, ...any) {}
func (fatalLog) Warnf(string, ...any)   {}
func (fatalLog) Errorf(string, ...any)  {}
func (fatalLog) Debugf(string, ...any)  {}
func (fatalLog) Tracef(string, ...any)  {}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// URL is the client URL to connect to, for example nats://127.0.0.1:4222.
func (s *Server) URL() string { return s.ns.ClientURL() }

// Port is the port the server listens on.
func (s *Server) Port() int {
	u, err := url.Parse(s.URL())
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// Running reports whether the server accepts connections.
func (s *Server) Running() bool { return s.ns.Running() }

// JetStreamReady reports whether the server's JetStream is up and, in a
// cluster, has a meta leader.
func (s *Server) JetStreamReady() bool {
	return s.ns.JetStreamEnabled() && (!s.ns.JetStreamIsClustered() || s.ns.JetStreamIsCurrent())
}

// MonitorURL is the server's monitoring listener, e.g.
// http://127.0.0.1:8222, or "" when it has none.
func (s *Server) MonitorURL() string {
	addr := s.ns.MonitorAddr()
	if addr == nil {
		return ""
	}
	return "http://" + addr.String()
}

// Name is the server's name.
func (s *Server) Name() string { return s.ns.Name() }

// EmptyPasswords returns the users the nats-server configuration file at
// path gives an empty password: an empty variable read with
// `password: $VAR` makes one, and nats-server admits any client sending
// that user's name with an empty password.
func EmptyPasswords(path string) ([]string, error) {
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, err
	}
	var empty []string
	if opts.Username != "" && opts.Password == "" { // authorization {user, password}
		empty = append(empty, opts.Username)
	}
	for _, u := range opts.Users {
		if u.Password == "" {
			empty = append(empty, u.Username)
		}
	}
	return empty, nil
}
