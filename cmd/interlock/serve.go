package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// embeddedFlags configure the embedded nats-server of serve and demo.
type embeddedFlags struct {
	dataDir string
	listen  string
	sync    string
	config  string
	cmd     *cobra.Command
}

func (e *embeddedFlags) register(cmd *cobra.Command, defaultDir, defaultListen string) {
	f := cmd.Flags()
	f.StringVar(&e.dataDir, "data-dir", envOr("INTERLOCK_DATA_DIR", defaultDir), "embedded server: JetStream data directory; env INTERLOCK_DATA_DIR")
	f.StringVar(&e.listen, "nats-listen", defaultListen, "embedded server: host:port to listen on (port 0 picks a free one)")
	deprecatedAlias(f, "listen", "nats-listen")
	f.StringVar(&e.sync, "sync", "always", "embedded server durability: always (fsync before every ack) or interval (faster; a power cut can lose the last writes)")
	f.StringVar(&e.config, "nats-config", "", "embedded server: a nats-server configuration file (users and permissions, e.g. deploy/nats/auth.conf); "+
		"its listen address and store_dir apply unless --nats-listen or --data-dir is given")
	e.cmd = cmd
}

func (e *embeddedFlags) start(log *slog.Logger) (*embedded.Server, error) {
	host, portText, err := net.SplitHostPort(e.listen)
	if err != nil {
		return nil, usagef("--nats-listen %q: %w", e.listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, usagef("--nats-listen %q: port: %w", e.listen, err)
	}
	if port == 0 {
		port = -1
	}
	if e.sync != string(embedded.SyncAlways) && e.sync != string(embedded.SyncInterval) {
		return nil, usagef("--sync %q is not always or interval", e.sync)
	}
	cfg := embedded.Config{DataDir: e.dataDir, Host: host, Port: port, Sync: embedded.Sync(e.sync), ConfigFile: e.config}
	if e.config != "" {
		if err := refuseEmptyPasswords(e.config); err != nil {
			return nil, err
		}
		// The file says where to listen and store unless a flag says otherwise.
		if !changed(e.cmd, "nats-listen") {
			cfg.Host, cfg.Port = "", 0
		}
		if !changed(e.cmd, "data-dir") && os.Getenv("INTERLOCK_DATA_DIR") == "" {
			cfg.DataDir = ""
		}
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("embedded nats-server started", "url", srv.URL(), "data_dir", e.dataDir, "sync", e.sync, "config", e.config)
	return srv, nil
}

// refuseEmptyPasswords refuses a nats-server configuration that gives a
// user an empty password (auth.conf reads each from a variable, and an
// empty variable makes an empty password, which nats-server admits), with
// an error matching jetstream.ErrEmptyPassword that names the users.
func refuseEmptyPasswords(path string) error {
	users, err := embedded.EmptyPasswords(path)
	if err != nil {
		return usagef("--nats-config %s: %w", path, err)
	}
	if len(users) > 0 {
		quoted := make([]string, len(users))
		for i, u := range users {
			quoted[i] = strconv.Quote(u)
		}
		return fmt.Errorf("--nats-config %s: NATS user %s would have an %w, which nats-server admits: "+
			"set the variable its password is read from (e.g. INTERLOCK_<USER>_PASSWORD)",
			path, strings.Join(quoted, ", "), jetstream.ErrEmptyPassword)
	}
	return nil
}

func newServe(g *globals) *cobra.Command {
	var (
		emb         embeddedFlags
		replicas    int
		concurrency int
		ackWait     time.Duration
		notify      string
		metricsAddr string
		expiry      rules.ExpiryDefaults
		web         webFlags
		identities  string
		policies    string
		linkSecret  string
		linkTTL     time.Duration
		provisions  bool
		topology    time.Duration
		readyFile   string
		stopTimeout time.Duration
		// pendingStorage is --pending-storage.
		pendingStorage string
		// recordsStorage is --records-storage.
		recordsStorage string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the coordinator (with an embedded NATS server unless --nats-url is set)",
		Long: `serve runs the coordinator: the only writer of run records. With no --nats-url it
starts an embedded nats-server with JetStream file storage in --data-dir, which
acknowledges a write only once it is on disk (--sync always). SIGINT or SIGTERM
stops taking messages, lets the ones under way finish (within --stop-timeout,
then cancels the rest), and exits.

On an open server (the embedded one without --nats-config, or any server
reached with no NATS user) serve provisions the streams, buckets and
consumers itself. Connected as a named user (--nats-user,
NATS_USER, a user in the URL or --creds) it does not: it may not change a
stream, and fails until ` + "`interlock provision`" + ` has run with admin's credentials
(--provision makes it provision anyway, with a user that holds admin's rights).
At start and every --topology-interval it checks that the streams and
buckets keep what was provisioned: it refuses to start when they do not, and
when it finds a change while running it logs an error, sets the
interlock_topology_drift metric and records a topology_drift audit event.

With --ready-file PATH, once the coordinator runs and everything listens
(the embedded NATS server, the gateway, metrics), serve writes PATH
atomically (a temporary file beside it, renamed) as one JSON object:
{"nats": URL, "gateway": URL, "metrics": URL, "pid": N}, gateway and
metrics only when served, the NATS URL without a password. It removes a
stale PATH at start and PATH when it stops: a script starting serve on
port 0 waits for the file, then reads where to connect.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expiry.Action != subjects.ExpiryCancel && expiry.Action != subjects.ExpiryEscalate {
				return usagef("--on-expiry %q is not cancel or escalate", expiry.Action)
			}
			if expiry.Action == subjects.ExpiryEscalate && expiry.Extend <= 0 {
				return usage(errors.New("--on-expiry escalate needs --escalate-extend"))
			}
			if topology < 0 {
				return usagef("--topology-interval %s is negative (0 checks only at start)", topology)
			}
			if ackWait < minAckWait {
				return usagef("--ack-wait %s is shorter than %s", ackWait, minAckWait)
			}
			if err := checkStopTimeout(stopTimeout); err != nil {
				return err
			}
			storage, err := storageFlag("pending-storage", pendingStorage)
			if err != nil {
				return err
			}
			records, err := storageFlag("records-storage", recordsStorage)
			if err != nil {
				return err
			}
			if err := checkRecordsReplicas(records, replicas); err != nil {
				return err
			}
			err = runServe(cmd, g, &emb, serveConfig{replicas: replicas, pendingStorage: storage, recordsStorage: records, concurrency: concurrency, ackWait: ackWait, notify: notify,
				metricsAddr: metricsAddr, expiry: expiry, web: web, identities: identities, policies: policies, linkSecretEnv: linkSecret, linkTTL: linkTTL,
				provision: provisions, topologyInterval: topology, readyFile: readyFile, stopTimeout: stopTimeout})
			if errors.Is(err, context.Canceled) {
				// A signal during start-up is a requested stop, not a failure.
				return nil
			}
			return err
		},
	}
	emb.register(cmd, "interlock-data", "127.0.0.1:4222")
	cmd.Flags().StringVar(&pendingStorage, "pending-storage", "memory", "where a pending index serve creates keeps its entries: memory "+
		"(no fsyncs; the coordinator rebuilds it from the run records after a restart, and re-creates its bucket when it provisions), file, or auto "+
		"(memory on a NATS cluster, file on a single server)")
	cmd.Flags().StringVar(&recordsStorage, "records-storage", "file", recordsStorageHelp)
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of new streams and buckets, and the least existing ones are raised to (3 on a NATS cluster); never lowers, and what is missing gets as many as the existing streams have")
	cmd.Flags().IntVar(&concurrency, "concurrency", 4, "messages handled at once per input stream")
	cmd.Flags().DurationVar(&ackWait, "ack-wait", 30*time.Second, "how long a message a crashed coordinator held waits before another takes it "+
		"(shorter: faster recovery, more heartbeats; a process cut off from NATS longer than this loses what it holds)")
	cmd.Flags().StringVar(&notify, "notifier-config", "", "also run a notifier with the configuration in `FILE` (as interlock notifier --config does)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9464")
	f := cmd.Flags()
	f.DurationVar(&expiry.Timeout, "default-timeout", 0, "deadline for interrupts that set none (0: none)")
	f.StringVar((*string)(&expiry.Action), "on-expiry", string(subjects.ExpiryCancel), "default at a deadline: cancel (fail closed) or escalate")
	f.DurationSliceVar(&expiry.RemindBefore, "remind-before", nil, "default reminders before each deadline, e.g. 1h,10m")
	f.DurationVar(&expiry.Extend, "escalate-extend", 0, "escalate: how far each escalation moves the deadline")
	f.IntVar(&expiry.Times, "escalate-times", 1, "escalate: escalations before cancelling")
	f.StringSliceVar(&expiry.Approvers, "escalate-to", nil, "escalate: approvers added to those allowed to decide")
	f.StringVar(&identities, "identities", "", "approvers file: their groups (for interrupts naming approver groups) and gateway tokens")
	f.StringVar(&policies, "policies", "", "operator decision rules in `FILE` (docs/policies.md): automatic approvals and denials, quorums, "+
		"approvers and channels for the interrupts they match; an agent can make them stricter, never weaker")
	web.register(cmd, "", "also serve the HTTP gateway here (needs --identities)")
	f.DurationVar(&linkTTL, "link-ttl", 0, "with --link-secret-env: how long a one-click link lasts (default 24h, at most 720h; never past its interrupt's deadline)")
	f.StringVar(&linkSecret, "link-secret-env", "", "with --gateway-listen: environment variable holding the secret that signs one-click decision links (the gateway mints them for the notifier)")
	f.BoolVar(&provisions, "provision", false, "provision even when connected as a named NATS user (that user needs admin's rights); without a user serve always provisions")
	f.DurationVar(&topology, "topology-interval", coordinator.DefaultTopologyInterval,
		"how often to check that the streams and buckets keep what was provisioned (also checked at start; 0: only at start)")
	f.StringVar(&readyFile, "ready-file", "", "once everything listens, write `PATH` (atomically) with JSON naming the NATS URL, the gateway URL, "+
		"the metrics URL and the pid; removed at stop (for scripts that start serve on port 0)")
	stopTimeoutFlag(cmd, &stopTimeout)
	return cmd
}

// minAckWait is the shortest --ack-wait: heartbeats go every half of it.
const minAckWait = time.Second

// serveConfig is what serve runs with beyond the embedded server.
type serveConfig struct {
	replicas, concurrency int
	pendingStorage        jetstream.Storage
	recordsStorage        jetstream.Storage
	ackWait               time.Duration
	notify, metricsAddr   string
	expiry                rules.ExpiryDefaults
	web                   webFlags
	identities            string
	policies              string
	linkSecretEnv         string
	linkTTL               time.Duration
	// provision even as a named user; topologyInterval is the coordinator's.
	provision        bool
	topologyInterval time.Duration
	// readyFile, when set, is written once everything listens.
	readyFile string
	// stopTimeout is the one deadline of the shutdown (--stop-timeout).
	stopTimeout time.Duration
}

// readyInfo is what --ready-file holds: where serve listens, and its pid.
type readyInfo struct {
	NATS    string `json:"nats"`
	Gateway string `json:"gateway,omitempty"`
	Metrics string `json:"metrics,omitempty"`
	PID     int    `json:"pid"`
}

// writeReadyFile writes info to path atomically: a reader sees no file or
// the whole of it.
func writeReadyFile(path string, info readyInfo) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	defer os.Remove(tmp.Name()) // nothing left once renamed
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("--ready-file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("--ready-file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

func runServe(cmd *cobra.Command, g *globals, emb *embeddedFlags, sc serveConfig) error {
	ctx := cmd.Context()
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	var rulesSet *policy.Set
	if sc.policies != "" {
		if rulesSet, err = policy.Load(sc.policies); err != nil {
			return usage(err)
		}
	}
	var dir *approvers.Directory
	if sc.identities != "" {
		if dir, err = approvers.Load(sc.identities); err != nil {
			return usage(err)
		}
	} else if sc.web.listen != "" {
		return usage(errors.New("--gateway-listen needs --identities"))
	}
	tlsCfg, err := sc.web.tls()
	if err != nil {
		return err
	}
	if sc.readyFile != "" {
		// A stale file from an earlier serve must not be read as this one's.
		if err := os.Remove(sc.readyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return usagef("--ready-file %s: %w", sc.readyFile, err)
		}
		if st, err := os.Stat(filepath.Dir(sc.readyFile)); err != nil || !st.IsDir() {
			return usagef("--ready-file %s: its directory does not exist", sc.readyFile)
		}
	}
	var notifyCfg *notifier.Config
	if sc.notify != "" {
		// Checked before anything starts: a mistake is reported at once.
		if notifyCfg, err = notifier.LoadConfig(sc.notify); err != nil {
			return usage(err)
		}
	}
	url := g.natsURL
	if url == "" {
		srv, err := emb.start(log)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.URL()
	}
	signer, err := linkSigner(sc.linkSecretEnv, sc.linkTTL)
	if err != nil {
		return err
	}
	coCfg := coordinator.Config{Concurrency: sc.concurrency, AckWait: sc.ackWait, Logger: log,
		Expiry: sc.expiry, Groups: dir.Groups, Members: dir.Members, Policies: rulesSet, TopologyInterval: sc.topologyInterval}
	if sc.topologyInterval == 0 {
		coCfg.TopologyInterval = -1
	}
	provisionFn := func(ctx context.Context, c *jetstream.Client) error {
		_, err := provision(ctx, c, nil, notifyCfg, coCfg, nil)
		return err
	}
	// The embedded server without a configuration admits anyone: serve
	// provisions it whatever NATS_USER says.
	open := g.natsURL == "" && emb.config == ""
	if user := g.namedUser(url); user != "" && !open && !sc.provision {
		// Only admin changes a stream: the coordinator binds to what
		// `interlock provision` made, and Start says so when it is missing.
		provisionFn = nil
		log.Info("not provisioning: connected as a named NATS user; `interlock provision` runs with admin's credentials", "user", user)
	}
	info := readyInfo{NATS: jetstream.Redact(url), PID: os.Getpid()}
	var ready func(string) error
	if sc.readyFile != "" {
		ready = func(metrics string) error {
			info.Metrics = metrics
			if err := writeReadyFile(sc.readyFile, info); err != nil {
				return err
			}
			log.Info("ready file written", "path", sc.readyFile)
			return nil
		}
		defer os.Remove(sc.readyFile)
	}
	return g.runService(ctx, service{Name: "interlock-serve", URL: url, NATS: jetstream.Config{Replicas: sc.replicas, PendingStorage: sc.pendingStorage, RecordsStorage: sc.recordsStorage},
		Provision: provisionFn, MetricsAddr: sc.metricsAddr, Log: log, Ready: ready, StopTimeout: sc.stopTimeout,
		Start: func(client *jetstream.Client, reg *prometheus.Registry) (stopFunc, error) {
			cfg := coCfg
			cfg.Registry = reg
			co := coordinator.New(client, cfg)
			if err := co.Start(ctx); err != nil {
				return nil, err
			}
			stops := []stopFunc{co.Stop}
			// In reverse: the gateway, the notifier, then the coordinator.
			stop := func(ctx context.Context) error { return stopAll(stops)(ctx) }
			if notifyCfg != nil {
				s, err := startNotifier(ctx, client, notifyCfg, log, reg)
				if err != nil {
					_ = stop(context.Background())
					return nil, err
				}
				stops = append(stops, s)
				log.Info("notifier running", "config", sc.notify)
			}
			if sc.web.listen != "" {
				s, gwURL, err := listenGateway(client, dir, signer, sc.linkTTL, sc.web.listen, tlsCfg, log, reg, nil)
				if err != nil {
					_ = stop(context.Background())
					return nil, err
				}
				stops = append(stops, s)
				info.Gateway = gwURL
			}
			log.Info("coordinator running", "nats", jetstream.Redact(url), "prefix", g.prefix)
			return stop, nil
		}})
}
