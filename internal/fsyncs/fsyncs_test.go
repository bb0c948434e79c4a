package fsyncs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

func TestMain(m *testing.M) {
	jstest.RunNode() // when this binary is started as a cluster node
	goleak.VerifyTestMain(m)
}

// Environment of the experiment: INTERLOCK_FSYNCS asks for it; the
// workload's own process (run under strace) gets the topology in
// workloadEnv and where to put its phase markers in markerEnv.
const (
	requestEnv  = "INTERLOCK_FSYNCS"
	workloadEnv = "INTERLOCK_FSYNCS_WORKLOAD"
	markerEnv   = "INTERLOCK_FSYNCS_MARKERS"
)

// ops is how many writes (publishes or batches) each phase makes, one
// after another.
const ops = 200

// phase is one kind of write: a single publish (batch 0) or an atomic
// batch of that many messages.
type phase struct {
	name  string
	batch int
}

var phases = []phase{{"single", 0}, {"batch=1", 1}, {"batch=2", 2}, {"batch=8", 8}}

// TestFsyncsPerWrite runs the workload twice per topology: once in this
// process for the time per write, and once in a process of its own under
// strace -f (its cluster nodes, child processes, traced with it) for the
// fsyncs, which it attributes by the path of the file synced.
func TestFsyncsPerWrite(t *testing.T) {
	if os.Getenv(requestEnv) == "" {
		t.Skip("an experiment run on request: " + requestEnv + "=1")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	for _, topo := range []string{"one-server", "r3-cluster"} {
		t.Run(topo, func(t *testing.T) {
			times := workload(t, topo, "")
			markers := t.TempDir()
			log := filepath.Join(t.TempDir(), "strace.log")
			cmd := exec.Command(strace, "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", log,
				os.Args[0], "-test.run", "^TestFsyncWorkload$", "-test.count=1")
			cmd.Env = append(os.Environ(), workloadEnv+"="+topo, markerEnv+"="+markers)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			counts := countFsyncs(t, log)
			t.Logf("%s, %d writes per phase, sync always:", topo, ops)
			t.Logf("%-8s %10s %12s %s", "write", "ms/write", "fsyncs/write", "by file (fsyncs per write)")
			for _, p := range phases {
				var total int
				var by []string
				for class, n := range counts[p.name] {
					total += n
					by = append(by, fmt.Sprintf("%s %.2f", class, float64(n)/ops))
				}
				sort.Strings(by)
				t.Logf("%-8s %10.2f %12.2f %s", p.name, times[p.name], float64(total)/ops, strings.Join(by, ", "))
			}
		})
	}
}

// TestFsyncWorkload is the workload TestFsyncsPerWrite runs under strace;
// on its own it does nothing.
func TestFsyncWorkload(t *testing.T) {
	topo := os.Getenv(workloadEnv)
	if topo == "" {
		t.Skip("run by TestFsyncsPerWrite")
	}
	workload(t, topo, os.Getenv(markerEnv))
}

// workload writes ops times per phase to a fresh stream and returns the
// milliseconds per write of each phase. With markers set, it fsyncs a file
// named for each phase before and after it, which tells the strace log's
// reader where the phase starts and ends.
func workload(t *testing.T, topo, markers string) map[string]float64 {
	replicas, url := 1, ""
	if topo == "r3-cluster" {
		replicas = 3
		url = jstest.NodeURLs(jstest.DurableProcessCluster(t, 3))
	} else {
		url = jstest.Server(t, embedded.Config{Sync: embedded.SyncAlways}).URL()
	}
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"},
		Replicas: replicas, AllowAtomicPublish: true})
	require.NoError(t, err)
	// A new replicated stream takes writes once its group has a leader.
	require.Eventually(t, func() bool {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(wctx, "b.warm", nil)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	body := make([]byte, 400) // about an event's size
	times := map[string]float64{}
	for _, p := range phases {
		mark(t, markers, "begin-"+p.name)
		start := time.Now()
		for i := range ops {
			if p.batch == 0 {
				_, err = js.Publish(ctx, "b.x", body)
			} else {
				err = jstest.PublishBatch(nc, fmt.Sprintf("%s-%d", p.name, i), "b.x", body, p.batch)
			}
			require.NoError(t, err)
		}
		times[p.name] = float64(time.Since(start).Microseconds()) / 1000 / ops
		settled(t, js)
		mark(t, markers, "end-"+p.name)
	}
	return times
}

// settled waits until every replica of stream B has every message, so a
// follower's fsyncs are counted in the phase that caused them.
func settled(t *testing.T, js jetstream.JetStream) {
	require.Eventually(t, func() bool {
		s, err := js.Stream(context.Background(), "B")
		if err != nil {
			return false
		}
		info := s.CachedInfo()
		if info.Cluster == nil {
			return true
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag > 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

// mark fsyncs a file named name in dir (nothing when dir is empty).
func mark(t *testing.T, dir, name string) {
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, "marker-"+name))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// syncCall is an fsync or fdatasync call in strace -y output, and the path
// of the file it synced.
var syncCall = regexp.MustCompile(`\b(?:fsync|fdatasync)\(\d+<([^>]*)>`)

// countFsyncs reads the strace log of TestFsyncWorkload: per phase, the
// fsyncs by the kind of file synced.
func countFsyncs(t *testing.T, log string) map[string]map[string]int {
	counts := countFsyncsBy(t, log, fileClass)
	for _, p := range phases {
		require.Contains(t, counts, p.name, "phase %s not found in the strace log", p.name)
	}
	return counts
}

// countFsyncsBy reads the strace log: per phase (between its markers),
// the fsyncs by class(path of the file synced).
func countFsyncsBy(t *testing.T, log string, class func(path string) string) map[string]map[string]int {
	f, err := os.Open(log)
	require.NoError(t, err)
	defer f.Close()
	counts := map[string]map[string]int{}
	current := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := syncCall.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		path := m[1]
		if i := strings.Index(path, "/marker-"); i >= 0 {
			name := path[i+len("/marker-"):]
			if p, ok := strings.CutPrefix(name, "begin-"); ok {
				current = p
				counts[p] = map[string]int{}
			} else {
				current = ""
			}
			continue
		}
		if current != "" {
			counts[current][class(path)]++
		}
	}
	require.NoError(t, sc.Err())
	return counts
}

// fileClass names what a synced file is: the stream's messages, a batch's
// staging store, a Raft log of a stream or of the meta group, or other.
func fileClass(path string) string {
	switch {
	case strings.Contains(path, "/streams/B/batches/"):
		// Each batch's staging store is a directory named by a hash of
		// the batch id, with its own message block.
		_, rest, _ := strings.Cut(path, "/streams/B/batches/")
		if _, file, ok := strings.Cut(rest, "/"); ok {
			return "batch staging " + file
		}
		return "batch staging (its directory)"
	case strings.Contains(path, "/streams/B/"):
		return "stream B"
	case strings.Contains(path, "/_js_/S-"):
		return "stream raft log"
	case strings.Contains(path, "/_js_/_meta_"):
		return "meta raft log"
	case strings.Contains(path, "/_js_/"):
		return "other raft log"
	}
	return "other " + filepath.Base(filepath.Dir(path))
}
