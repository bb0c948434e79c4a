package fsyncs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/benchmark"
	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// cycleWorkloadEnv carries the topology to TestCycleWorkload.
const cycleWorkloadEnv = "INTERLOCK_FSYNCS_CYCLES"

// recordsEnv, when set, is where Interlock's runs bucket keeps the records
// (file, memory: jetstream.Config.RecordsStorage); default file.
const recordsEnv = "INTERLOCK_FSYNCS_RECORDS"

// cycles is how many full cycles each side runs per phase.
const cycles = 96

// cyclePhases: each side one cycle at a time, then 16 in flight (where a
// cluster's Raft logs may sync several proposals at once).
var cyclePhases = []struct {
	side     string
	inFlight int
}{{"interlock", 1}, {"floor", 1}, {"interlock", 16}, {"floor", 16}}

func cyclePhaseName(side string, inFlight int) string { return side + "-" + strconv.Itoa(inFlight) }

// TestFsyncsPerCycle counts the fsyncs of a full cycle (start, suspend,
// decide, replay, complete) on Interlock and on the floor, per stream, on
// one server and on a three-node R3 cluster of separate processes, all in
// production's durability mode. Run on request, under strace (the
// workload in a process of its own, its cluster nodes traced with it):
//
//	INTERLOCK_FSYNCS=1 go test -count=1 -run TestFsyncsPerCycle -v ./internal/fsyncs
//
// INTERLOCK_FSYNCS_RECORDS=memory counts a runs bucket kept in memory (on
// one server: a replicated one is refused, jetstream.ErrReplicatedMemoryRecords).
func TestFsyncsPerCycle(t *testing.T) {
	if os.Getenv(requestEnv) == "" {
		t.Skip("an experiment run on request: " + requestEnv + "=1")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	topos := []string{"one-server", "r3-cluster"}
	if only := os.Getenv(requestEnv); only != "1" {
		topos = []string{only}
	}
	for _, topo := range topos {
		t.Run(topo, func(t *testing.T) {
			markers := t.TempDir()
			log := filepath.Join(t.TempDir(), "strace.log")
			cmd := exec.Command(strace, "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", log,
				os.Args[0], "-test.run", "^TestCycleWorkload$", "-test.count=1", "-test.timeout=20m")
			cmd.Env = append(os.Environ(), cycleWorkloadEnv+"="+topo, markerEnv+"="+markers)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			groups := map[string]string{}
			if raw, err := os.ReadFile(filepath.Join(markers, "groups.json")); err == nil {
				require.NoError(t, json.Unmarshal(raw, &groups))
			}
			counts := countFsyncsBy(t, log, func(path string) string { return cycleFileClass(path, groups) })
			t.Logf("%s, %d cycles per phase, sync always, fsyncs per cycle:", topo, cycles)
			for _, p := range cyclePhases {
				name := cyclePhaseName(p.side, p.inFlight)
				var total int
				var by []string
				for class, n := range counts[name] {
					total += n
					by = append(by, fmt.Sprintf("%s %.2f", class, float64(n)/cycles))
				}
				sort.Strings(by)
				t.Logf("%-14s %6.2f  %s", name, float64(total)/cycles, strings.Join(by, ", "))
			}
		})
	}
}

// TestCycleWorkload is the workload TestFsyncsPerCycle runs under strace;
// on its own it does nothing.
func TestCycleWorkload(t *testing.T) {
	topo := os.Getenv(cycleWorkloadEnv)
	if topo == "" {
		t.Skip("run by TestFsyncsPerCycle")
	}
	markers := os.Getenv(markerEnv)
	cfg := floor.Config{}
	if topo == "r3-cluster" {
		cfg = floor.Config{URL: jstest.NodeURLs(jstest.DurableProcessCluster(t, 3)), Replicas: 3}
	} else {
		cfg.URL = jstest.Server(t, embedded.Config{Sync: embedded.SyncAlways}).URL()
	}
	cfg.Records = os.Getenv(recordsEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var il *benchmark.Cycle
	require.Eventually(t, func() bool { // a new cluster's streams take writes once they have leaders
		var err error
		il, err = benchmark.New(ctx, cfg)
		return err == nil
	}, time.Minute, 100*time.Millisecond)
	defer il.Close()
	fl, err := floor.New(ctx, cfg)
	require.NoError(t, err)
	defer fl.Close()
	run := map[string]func(context.Context, string) (floor.Phases, error){"interlock": il.Run, "floor": fl.Run}
	for side, f := range run { // warm up: the first cycles create consumers and files
		for i := range 4 {
			_, err := f(ctx, fmt.Sprintf("warm-%s-%d", side, i))
			require.NoError(t, err)
		}
	}
	for _, p := range cyclePhases {
		name := cyclePhaseName(p.side, p.inFlight)
		settledAll(t, cfg.URL)
		mark(t, markers, "begin-"+name)
		ids := make(chan string, cycles)
		for i := range cycles {
			ids <- fmt.Sprintf("%s-%d-%d", p.side, p.inFlight, i)
		}
		close(ids)
		errs := make(chan error, p.inFlight)
		for range p.inFlight {
			go func() {
				for id := range ids {
					if _, err := run[p.side](ctx, id); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range p.inFlight {
			require.NoError(t, <-errs)
		}
		settledAll(t, cfg.URL)
		mark(t, markers, "end-"+name)
	}
	if markers != "" {
		raw, err := json.Marshal(raftGroups(t, cfg.URL))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(markers, "groups.json"), raw, 0o600))
	}
}

// settledAll waits until every replica of every stream is current, so a
// follower's fsyncs are counted in the phase that caused them.
func settledAll(t *testing.T, url string) {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l := js.ListStreams(context.Background())
		for info := range l.Info() {
			if info.Cluster == nil {
				continue
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Lag > 0 {
					return false
				}
			}
		}
		return l.Err() == nil
	}, 30*time.Second, 20*time.Millisecond)
}

// raftGroups names each stream's and consumer's Raft group by what it
// keeps.
func raftGroups(t *testing.T, url string) map[string]string {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	out := map[string]string{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		if info.Cluster != nil && info.Cluster.RaftGroup != "" {
			out[info.Cluster.RaftGroup] = info.Config.Name
		}
		s, err := js.Stream(ctx, info.Config.Name)
		require.NoError(t, err)
		cl := s.ListConsumers(ctx)
		for ci := range cl.Info() {
			if ci.Cluster != nil && ci.Cluster.RaftGroup != "" {
				out[ci.Cluster.RaftGroup] = info.Config.Name + " consumer"
			}
		}
		require.NoError(t, cl.Err())
	}
	require.NoError(t, l.Err())
	return out
}

// cycleFileClass names the stream (or its consumers) a synced file
// belongs to: from the path on one server, from the Raft group on a
// cluster.
func cycleFileClass(path string, groups map[string]string) string {
	if i := strings.Index(path, "/_js_/"); i >= 0 {
		group, _, _ := strings.Cut(path[i+len("/_js_/"):], "/")
		if name, ok := groups[group]; ok {
			return name
		}
		if group == "_meta_" {
			return "meta"
		}
		return "raft " + group
	}
	if i := strings.Index(path, "/streams/"); i >= 0 {
		rest := path[i+len("/streams/"):]
		stream, rest, _ := strings.Cut(rest, "/")
		if strings.HasPrefix(rest, "obs/") {
			return stream + " consumer"
		}
		return stream
	}
	return "other " + filepath.Base(filepath.Dir(path))
}
