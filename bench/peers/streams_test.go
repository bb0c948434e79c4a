package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/internal/floor"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStreamFsyncs is a measurement, not a check: it counts the fsyncs of
// Interlock's cycle and the floor's per stream and consumer, on one server
// and on a three-node R3 cluster, under strace (docs/benchmarks.md,
// "Fsyncs per stream"). It runs only when PEERS_STRACE_LOG names the log of
// the strace it runs under:
//
//	go test -c -o /tmp/peers.test ./bench/peers
//	PEERS_STRACE_LOG=/tmp/fsync.log strace -f -y -ttt -qq --seccomp-bpf \
//	  -e trace=fsync,fdatasync -o /tmp/fsync.log /tmp/peers.test -test.run TestStreamFsyncs -test.v
func TestStreamFsyncs(t *testing.T) {
	logPath := os.Getenv("PEERS_STRACE_LOG")
	if logPath == "" {
		t.Skip("a measurement: run under strace with PEERS_STRACE_LOG set (see the comment)")
	}
	cycles, _ := strconv.Atoi(os.Getenv("PEERS_STREAM_CYCLES"))
	if cycles <= 0 {
		cycles = 320
	}
	resumes, _ := strconv.Atoi(os.Getenv("PEERS_STREAM_RESUMES"))
	if resumes <= 0 {
		resumes = 50
	}
	markDir := t.TempDir()
	mark := func(name string) {
		f, err := os.Create(filepath.Join(markDir, "MARK-"+name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for _, nodes := range []int{1, 3} {
		ctx := context.Background()
		var cfg floor.Config
		var urls string
		if nodes > 1 {
			urls = jstest.URLs(jstest.SyncedCluster(t, nodes, embedded.SyncAlways))
			cfg = floor.Config{URL: urls, Replicas: nodes}
		} else {
			urls = jstest.Server(t, embedded.Config{Sync: embedded.SyncAlways}).URL()
			cfg = floor.Config{URL: urls}
		}
		il, err := newGoInterlock(ctx, cfg.URL, cfg.Replicas, "")
		if err != nil {
			t.Fatal(err)
		}
		fl, err := floor.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, side := range []struct {
			name  string
			cycle func(context.Context, string) (time.Duration, error)
		}{{"interlock", il.cycle}, {"floor", goFloor{fl}.cycle}} {
			label := fmt.Sprintf("%s-%d", side.name, nodes)
			run := func(n, inFlight int, prefix string) {
				ids := make(chan string, n)
				for i := range n {
					ids <- fmt.Sprintf("%s-%s-%d", prefix, label, i)
				}
				close(ids)
				var wg sync.WaitGroup
				for range inFlight {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for id := range ids {
							if _, err := side.cycle(ctx, id); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			run(64, 32, "w")
			mark(label + "-start")
			run(cycles, 32, "c")
			mark(label + "-end")
			if side.name == "interlock" {
				il.setHook(func(run, what string) { mark(label + "-" + what + "-" + run) })
			}
			run(resumes, 1, "s")
			il.setHook(nil)
			mark(label + "-serial")
		}
		groups := raftGroups(t, urls)
		il.close()
		fl.Close()
		report(t, logPath, nodes, cycles, resumes, groups)
	}
}

// raftGroups names each stream's and consumer's Raft group (a cluster
// keeps a group's log under $SYS/_js_/<group>/).
func raftGroups(t *testing.T, urls string) map[string]string {
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx := context.Background()
	out := map[string]string{}
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		if info.Cluster != nil && info.Cluster.RaftGroup != "" {
			out[info.Cluster.RaftGroup] = info.Config.Name
		}
		s, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		cons := s.ListConsumers(ctx)
		for ci := range cons.Info() {
			if ci.Cluster != nil && ci.Cluster.RaftGroup != "" {
				out[ci.Cluster.RaftGroup] = info.Config.Name + " consumer " + ci.Name
			}
		}
	}
	return out
}

var fsyncLine = regexp.MustCompile(`^(\d+)\s+([\d.]+)\s+f(?:data)?sync\(\d+<([^>]*)>`)

// what names the stream or consumer, and the kind of file, an fsync'd path
// belongs to.
func what(path string, groups map[string]string) (node, target, kind string) {
	i := strings.Index(path, "/jetstream/")
	if i < 0 {
		return "", "other", path
	}
	node, rest := path[:i], path[i+len("/jetstream/"):]
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) >= 4 && parts[1] == "streams" && parts[3] == "obs" && len(parts) >= 5:
		return node, parts[2] + " consumer " + parts[4], "consumer state"
	case len(parts) >= 4 && parts[1] == "streams":
		return node, parts[2], "stream " + parts[3]
	case len(parts) >= 3 && parts[1] == "_js_":
		g := parts[2]
		name := groups[g]
		if name == "" {
			name = "raft " + g
		}
		return node, name, "raft " + strings.Join(parts[3:len(parts)-1], "/")
	}
	return node, "other", rest
}

func report(t *testing.T, logPath string, nodes, cycles, resumes int, groups map[string]string) {
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type key struct{ target, kind string }
	counts := map[string]map[key]int{} // window -> counts
	serial := map[string][]string{}    // side -> the fsyncs of one resume-phase cycle, in order
	window := ""
	var windowNodes = map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	resumeN := 0
	for sc.Scan() {
		m := fsyncLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		path := m[3]
		if b := filepath.Base(path); strings.HasPrefix(b, "MARK-") {
			name := strings.TrimPrefix(b, "MARK-")
			switch {
			case strings.HasSuffix(name, "-start"):
				window = strings.TrimSuffix(name, "-start")
			case strings.HasSuffix(name, "-end"):
				window = strings.TrimSuffix(name, "-end") + " serial"
			case strings.Contains(name, "-decide-"):
				window = name[:strings.Index(name, "-decide-")] + " resume"
				resumeN++
			case strings.Contains(name, "-resumed-"):
				window = name[:strings.Index(name, "-resumed-")] + " serial"
			default:
				window = ""
			}
			continue
		}
		if window == "" {
			continue
		}
		node, target, kind := what(path, groups)
		if counts[window] == nil {
			counts[window], windowNodes[window] = map[key]int{}, map[string]bool{}
		}
		counts[window][key{target, kind}]++
		windowNodes[window][node] = true
		// The resume path of the fifth serial cycle, in order.
		if strings.HasSuffix(window, " resume") && resumeN == 5 {
			serial[window] = append(serial[window], fmt.Sprintf("%s %s: %s, %s", m[2], filepath.Base(node), target, kind))
		}
	}
	for _, side := range []string{"interlock", "floor"} {
		for _, w := range []string{fmt.Sprintf("%s-%d", side, nodes), fmt.Sprintf("%s-%d serial", side, nodes),
			fmt.Sprintf("%s-%d resume", side, nodes)} {
			n := cycles
			if !strings.HasSuffix(w, fmt.Sprint(nodes)) {
				n = resumes
			}
			c := counts[w]
			if len(c) == 0 {
				continue // the floor has no hook marking its resume path
			}
			var keys []key
			total := 0
			for k, v := range c {
				keys = append(keys, k)
				total += v
			}
			sort.Slice(keys, func(i, j int) bool {
				if keys[i].target != keys[j].target {
					return keys[i].target < keys[j].target
				}
				return keys[i].kind < keys[j].kind
			})
			t.Logf("== %s: %d servers, %d cycles, %.2f fsyncs per cycle over %d nodes", w, nodes, n, float64(total)/float64(n), len(windowNodes[w]))
			for _, k := range keys {
				t.Logf("   %6.2f  %-40s %s", float64(c[k])/float64(n), k.target, k.kind)
			}
			for _, l := range serial[w] {
				t.Logf("   one resume: %s", l)
			}
		}
	}
}
