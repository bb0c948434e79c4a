package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/interlockhq/interlock/internal/histogram"
)

const allSystems = "interlock-go,floor,interlock-py,restate,langgraph-sqlite,langgraph-postgres,dbos"

var labels = map[string]string{
	"interlock-go":        "Interlock, Go SDK (embedded nats-server, sync always)",
	"interlock-go-memory": "Interlock, Go SDK, run records in memory (--records-storage memory)",
	"floor":               "the nats.go floor (same server, sync always)",
	"interlock-py":        "Interlock, `interlock serve` + Python SDK",
	"restate":             "Restate (awakeable; TS SDK, Node 22)",
	"langgraph-sqlite":    "LangGraph, SQLite saver (WAL, synchronous=FULL)",
	"langgraph-postgres":  "LangGraph, Postgres saver",
	"dbos":                "DBOS on Postgres (recv/send)",
}

type compareConfig struct {
	rounds, cycles, warmup, resumes, concurrency int
	systems, cache                               string
	json                                         bool
	// fsyncs is where fsyncs are counted (fsyncsSeparate, fsyncsTimed,
	// fsyncsOff).
	fsyncs string
}

// Where the runner counts fsyncs. A tracer stops a process at every traced
// call, so counting them in the timed pass slows each system by its own
// count: a system that fsyncs 13 times a cycle pays more than one that
// fsyncs twice (docs/benchmarks.md, "The tracer's cost").
const (
	// fsyncsSeparate times each system untraced, then runs it again under
	// strace to count its fsyncs (the default).
	fsyncsSeparate = "separate"
	// fsyncsTimed counts them in the timed pass, as the runner did first.
	fsyncsTimed = "timed"
	// fsyncsOff does not count them.
	fsyncsOff = "off"
)

// measurement is one system's figures in one round.
type measurement struct {
	System         string  `json:"system"`
	Round          int     `json:"round"`
	Load1          float64 `json:"load1"` // the load average when the system started
	Cycles         int     `json:"cycles"`
	CyclesPerSec   float64 `json:"cyclesPerSec"`
	CPUMsPerCycle  float64 `json:"cpuMsPerCycle"`
	FsyncsPerCycle float64 `json:"fsyncsPerCycle"`
	ResumeP50ms    float64 `json:"resumeP50ms"`
	ResumeP99ms    float64 `json:"resumeP99ms"`
	// Traced is whether the timed pass ran under strace (--fsyncs timed).
	Traced bool `json:"traced"`
	// CyclesPerSecTraced is the rate of the counting pass, under strace
	// (--fsyncs separate): what the tracer costs the system.
	CyclesPerSecTraced float64 `json:"cyclesPerSecTraced,omitempty"`
}

// summary is one system's medians over the rounds, and the medians of its
// per-round ratios to Interlock Go (same round).
type summary struct {
	System              string  `json:"system"`
	Rounds              int     `json:"rounds"`
	CyclesPerSec        float64 `json:"cyclesPerSec"`
	CyclesPerSecMin     float64 `json:"cyclesPerSecMin"`
	CyclesPerSecMax     float64 `json:"cyclesPerSecMax"`
	CyclesRatio         float64 `json:"cyclesPerSecRatio"`
	CPUMsPerCycle       float64 `json:"cpuMsPerCycle"`
	CPURatio            float64 `json:"cpuRatio"`
	FsyncsPerCycle      float64 `json:"fsyncsPerCycle"`
	FsyncsRatio         float64 `json:"fsyncsRatio"`
	ResumeP50ms         float64 `json:"resumeP50ms"`
	ResumeP99ms         float64 `json:"resumeP99ms"`
	ResumeP99Ratio      float64 `json:"resumeP99Ratio"`
	ResumeP50Ratio      float64 `json:"resumeP50Ratio"`
	ResumeIsToCompleted bool    `json:"resumeIsToCompleted,omitempty"`
}

func compare(c compareConfig) error {
	if c.cache == "" {
		return errors.New("--cache (or PEERS_CACHE) is not set: run bench/peers/run")
	}
	systems := strings.Split(c.systems, ",")
	for _, s := range systems {
		if labels[s] == "" {
			return fmt.Errorf("no system %q (%s)", s, allSystems)
		}
	}
	var all []measurement
	for round := 1; round <= c.rounds; round++ {
		// A rotating order: no system always runs first or after the same one.
		order := append(append([]string{}, systems[(round-1)%len(systems):]...), systems[:(round-1)%len(systems)]...)
		for _, s := range order {
			// What the build or the system before left unwritten goes to
			// disk now, not during this system's fsyncs (docs/benchmarks.md,
			// "The harness").
			syscall.Sync()
			load := load1()
			progress("round %d/%d: %s (load average %.2f)", round, c.rounds, s, load)
			m, err := measure(c, s)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, s, err)
			}
			m.Round, m.Load1 = round, load
			progress("round %d/%d: %s: %.0f cycles/s, %.2f ms CPU and %.2f fsyncs per cycle, resume p50 %.2f ms p99 %.2f ms%s",
				round, c.rounds, s, m.CyclesPerSec, m.CPUMsPerCycle, m.FsyncsPerCycle, m.ResumeP50ms, m.ResumeP99ms, tracedNote(m))
			all = append(all, m)
		}
	}
	sums := summarize(systems, all)
	if c.json {
		printTable(os.Stderr, sums)
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"config": map[string]any{"rounds": c.rounds, "cycles": c.cycles,
			"warmup": c.warmup, "resumes": c.resumes, "concurrency": c.concurrency}, "rounds": all, "medians": sums})
	}
	printTable(os.Stdout, sums)
	return nil
}

// measure runs system once timed and, with --fsyncs separate, once more
// under strace to count its fsyncs (its cycles only, no resumes).
func measure(c compareConfig, system string) (measurement, error) {
	m, err := runSystem(c, system, c.fsyncs == fsyncsTimed)
	if err != nil || c.fsyncs != fsyncsSeparate {
		return m, err
	}
	counting := c
	counting.resumes = 0
	progress("  %s: again under strace, counting fsyncs", system)
	traced, err := runSystem(counting, system, true)
	if err != nil {
		return m, fmt.Errorf("the counting pass: %w", err)
	}
	m.FsyncsPerCycle, m.CyclesPerSecTraced = traced.FsyncsPerCycle, traced.CyclesPerSec
	return m, nil
}

func tracedNote(m measurement) string {
	switch {
	case m.Traced:
		return " (timed under strace)"
	case m.CyclesPerSecTraced > 0:
		return fmt.Sprintf(" (under strace: %.0f cycles/s)", m.CyclesPerSecTraced)
	}
	return ""
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64{}, v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(systems []string, all []measurement) []summary {
	ref := map[int]measurement{}
	for _, m := range all {
		if m.System == "interlock-go" {
			ref[m.Round] = m
		}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	var out []summary
	for _, s := range systems {
		var cps, cpu, fs, p50, p99, rc, rcpu, rfs, r50, r99 []float64
		for _, m := range all {
			if m.System != s {
				continue
			}
			cps, cpu, fs = append(cps, m.CyclesPerSec), append(cpu, m.CPUMsPerCycle), append(fs, m.FsyncsPerCycle)
			p50, p99 = append(p50, m.ResumeP50ms), append(p99, m.ResumeP99ms)
			if r, ok := ref[m.Round]; ok {
				rc, rcpu = append(rc, ratio(m.CyclesPerSec, r.CyclesPerSec)), append(rcpu, ratio(m.CPUMsPerCycle, r.CPUMsPerCycle))
				rfs = append(rfs, ratio(m.FsyncsPerCycle, r.FsyncsPerCycle))
				r50, r99 = append(r50, ratio(m.ResumeP50ms, r.ResumeP50ms)), append(r99, ratio(m.ResumeP99ms, r.ResumeP99ms))
			}
		}
		if len(cps) == 0 {
			continue
		}
		sorted := append([]float64{}, cps...)
		sort.Float64s(sorted)
		out = append(out, summary{System: s, Rounds: len(cps), CyclesPerSec: median(cps),
			CyclesPerSecMin: sorted[0], CyclesPerSecMax: sorted[len(sorted)-1], CyclesRatio: median(rc),
			CPUMsPerCycle: median(cpu), CPURatio: median(rcpu), FsyncsPerCycle: median(fs), FsyncsRatio: median(rfs),
			ResumeP50ms: median(p50), ResumeP99ms: median(p99), ResumeP50Ratio: median(r50), ResumeP99Ratio: median(r99),
			ResumeIsToCompleted: s == "floor"})
	}
	return out
}

func printTable(w io.Writer, sums []summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tCYCLES/S (MIN-MAX)\tRATIO\tRESUME P50/P99 MS\tP99 RATIO\tCPU MS/CYCLE\tRATIO\tFSYNCS/CYCLE\tRATIO\t")
	for _, s := range sums {
		note := ""
		if s.ResumeIsToCompleted {
			note = "*"
		}
		fmt.Fprintf(tw, "%s\t%.0f (%.0f-%.0f)\t%.2f\t%.2f / %.2f%s\t%.2f\t%.2f\t%.2f\t%.1f\t%.2f\t\n", s.System,
			s.CyclesPerSec, s.CyclesPerSecMin, s.CyclesPerSecMax, s.CyclesRatio, s.ResumeP50ms, s.ResumeP99ms, note,
			s.ResumeP99Ratio, s.CPUMsPerCycle, s.CPURatio, s.FsyncsPerCycle, s.FsyncsRatio)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "Medians over the rounds; ratios are medians of each round's ratio to interlock-go.")
	fmt.Fprintln(w, "* the floor has no code of ours after the wait: its resume is decision to completion recorded.")
}

// A system's processes each run under strace, counting fsync and fdatasync
// into a log of its own; CPU is read from /proc for every process below
// each strace (strace's own excluded).
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string // strace output; "" when not traced
	stderr string
}

type runCtx struct {
	c      compareConfig
	traced bool // processes start under strace
	dir    string
	procs  []*proc
	env    []string
}

func (r *runCtx) start(name string, asUser string, extraEnv []string, args ...string) (*proc, error) {
	return r.startWith(name, asUser, extraEnv, nil, args...)
}

// startWith starts args, under strace when the run is traced; when prepare
// is set it is called on the command before it starts (to take pipes), and
// stdout is left to it.
func (r *runCtx) startWith(name string, asUser string, extraEnv []string, prepare func(*exec.Cmd), args ...string) (*proc, error) {
	p := &proc{name: name, stderr: filepath.Join(r.dir, name+".stderr")}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.traced {
		p.log = filepath.Join(r.dir, name+".strace")
		sargs := []string{"-f", "-qq", "--seccomp-bpf", "-e", "trace=fsync,fdatasync", "-o", p.log}
		if asUser != "" {
			sargs = append(sargs, "-u", asUser)
		}
		p.cmd = exec.Command("strace", append(sargs, args...)...)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else if asUser != "" {
		u, err := user.Lookup(asUser)
		if err != nil {
			return nil, fmt.Errorf("%s: user %s: %w", name, asUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	p.cmd.Env = append(append(os.Environ(), r.env...), extraEnv...)
	f, err := os.Create(p.stderr)
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = f
	if prepare != nil {
		prepare(p.cmd)
	} else {
		p.cmd.Stdout = f
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// stop ends every process of the run, last started first: SIGTERM to its
// process group, SIGKILL after 20 s.
func (r *runCtx) stop() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		p := r.procs[i]
		if p.cmd.ProcessState != nil {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

func (r *runCtx) tail(p *proc) string {
	b, _ := os.ReadFile(p.stderr)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// waitFor polls ready every 100 ms until it is true, p exits or a minute
// passes.
func (r *runCtx) waitFor(p *proc, what string, ready func() bool) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ready() {
			return nil
		}
		if p.cmd.ProcessState != nil || syscall.Kill(p.cmd.Process.Pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling a server coming up, not synchronising a test
	}
	return fmt.Errorf("%s did not become ready (%s):\n%s", p.name, what, r.tail(p))
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tcpUp(port int) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

func fileHas(path, s string) func() bool {
	return func() bool { b, _ := os.ReadFile(path); return strings.Contains(string(b), s) }
}

// postgres starts a fresh PostgreSQL (a copy of the template bench/peers/run
// made with initdb) on a loopback port, fsync on and synchronous_commit on
// (its defaults, stated), and returns its connection URL.
func (r *runCtx) postgres() (string, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return "", fmt.Errorf("user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	data := filepath.Join(r.dir, "pgdata")
	if out, err := exec.Command("cp", "-a", filepath.Join(r.c.cache, "pgtemplate"), data).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying the Postgres template: %v: %s", err, out)
	}
	sock := filepath.Join(r.dir, "pgsock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return "", err
	}
	_ = os.Chown(sock, uid, gid)
	_ = os.Chmod(r.dir, 0o755)
	port := freePort()
	p, err := r.start("postgres", "postgres", nil, filepath.Join(os.Getenv("PEERS_PG_BIN"), "postgres"), "-D", data,
		"-p", strconv.Itoa(port), "-k", sock, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on", "-c", "max_connections=200")
	if err != nil {
		return "", err
	}
	if err := r.waitFor(p, "port "+strconv.Itoa(port), tcpUp(port)); err != nil {
		return "", err
	}
	if err := r.waitFor(p, "ready to accept", fileHas(p.stderr, "ready to accept connections")); err != nil {
		return "", err
	}
	return fmt.Sprintf("postgresql://postgres@127.0.0.1:%d/postgres", port), nil
}

func runSystem(c compareConfig, system string, traced bool) (m measurement, err error) {
	dir, err := os.MkdirTemp("", "interlock-peers-"+system+"-")
	if err != nil {
		return m, err
	}
	r := &runCtx{c: c, dir: dir, traced: traced, env: []string{
		"PEERS_WARMUP=" + strconv.Itoa(c.warmup), "PEERS_CYCLES=" + strconv.Itoa(c.cycles),
		"PEERS_RESUMES=" + strconv.Itoa(c.resumes), "PEERS_CONCURRENCY=" + strconv.Itoa(c.concurrency),
		"PEERS_DIR=" + dir,
	}}
	defer func() {
		r.stop()
		if err == nil {
			_ = os.RemoveAll(dir)
		} else {
			err = fmt.Errorf("%w (logs kept in %s)", err, dir)
		}
	}()
	bin := func(p string) string { return filepath.Join(c.cache, p) }
	here := os.Getenv("PEERS_SRC") // bench/peers in the tree
	python := bin("py/bin/python")
	var driver []string
	switch system {
	case "interlock-go", "interlock-go-memory", "floor":
		driver = []string{bin("bin/peers"), "drive", system}
	case "interlock-py":
		port := freePort()
		p, err := r.start("interlock-serve", "", nil, bin("bin/interlock"), "serve", "--sync", "always",
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", filepath.Join(dir, "data"))
		if err != nil {
			return m, err
		}
		if err := r.waitFor(p, "coordinator running", fileHas(p.stderr, "coordinator running")); err != nil {
			return m, err
		}
		r.env = append(r.env, fmt.Sprintf("NATS_URL=nats://127.0.0.1:%d", port))
		driver = []string{python, filepath.Join(here, "drivers.py"), system}
	case "restate":
		ingress, admin, node := freePort(), freePort(), freePort()
		conf := filepath.Join(dir, "restate.toml")
		// Restate's defaults, which fsync its log (bifrost.local
		// rocksdb-disable-wal-fsync = false) before it acknowledges; only
		// the addresses and the directory are ours.
		toml := fmt.Sprintf("base-dir = %q\ndisable-telemetry = true\nbind-address = \"127.0.0.1:%d\"\nadvertised-address = \"http://127.0.0.1:%d/\"\n"+
			"[ingress]\nbind-address = \"127.0.0.1:%d\"\n[admin]\nbind-address = \"127.0.0.1:%d\"\n",
			filepath.Join(dir, "restate"), node, node, ingress, admin)
		if err := os.WriteFile(conf, []byte(toml), 0o644); err != nil {
			return m, err
		}
		p, err := r.start("restate-server", "", nil, bin("node/node_modules/.bin/node"),
			bin("node/node_modules/.bin/restate-server"), "--config-file", conf, "--no-logo", "--listen-mode", "tcp")
		if err != nil {
			return m, err
		}
		health := func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", admin))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}
		if err := r.waitFor(p, "admin /health", health); err != nil {
			return m, err
		}
		if err := r.waitFor(p, "ingress port", tcpUp(ingress)); err != nil {
			return m, err
		}
		r.env = append(r.env, fmt.Sprintf("RESTATE_INGRESS=http://127.0.0.1:%d", ingress),
			fmt.Sprintf("RESTATE_ADMIN=http://127.0.0.1:%d", admin), fmt.Sprintf("PEERS_ENDPOINT_PORT=%d", freePort()))
		// run copies restate.mjs beside the node_modules it imports from.
		driver = []string{bin("node/node_modules/.bin/node"), bin("node/restate.mjs")}
	case "langgraph-sqlite":
		r.env = append(r.env, "PEERS_SQLITE="+filepath.Join(dir, "checkpoints.sqlite"))
		driver = []string{python, filepath.Join(here, "drivers.py"), system}
	case "langgraph-postgres", "dbos":
		url, err := r.postgres()
		if err != nil {
			return m, err
		}
		r.env = append(r.env, "PEERS_PG="+url)
		driver = []string{python, filepath.Join(here, "drivers.py"), system}
	}
	return r.drive(system, driver)
}

// drive runs the driver and takes the readings at its marks.
func (r *runCtx) drive(system string, args []string) (measurement, error) {
	m := measurement{System: system, Cycles: r.c.cycles, Traced: r.traced}
	var stdin io.WriteCloser
	var stdout io.Reader
	p, err := r.startWith("driver", "", nil, func(cmd *exec.Cmd) {
		stdin, _ = cmd.StdinPipe()
		stdout, _ = cmd.StdoutPipe()
	}, args...)
	if err != nil {
		return m, err
	}
	cmd := p.cmd
	type reading struct {
		at     time.Time
		cpu    time.Duration
		fsyncs int
	}
	read := func() reading {
		rd := reading{at: time.Now()}
		for _, q := range r.procs {
			rd.cpu += q.cpu()
			rd.fsyncs += countFsyncs(q.log)
		}
		return rd
	}
	var start, end reading
	var h histogram.Histogram
	sc := bufio.NewScanner(stdout)
	done := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "MARK start":
			start = read()
			progress("  %s: warmed up, %d cycles at %d in flight", system, r.c.cycles, r.c.concurrency)
			_, _ = io.WriteString(stdin, "\n")
		case line == "MARK end":
			end = read()
			progress("  %s: cycles done; %d resumes one at a time", system, r.c.resumes)
			_, _ = io.WriteString(stdin, "\n")
		case strings.HasPrefix(line, "RESUME "):
			us, err := strconv.ParseInt(strings.TrimPrefix(line, "RESUME "), 10, 64)
			if err == nil {
				h.Record(time.Duration(us) * time.Microsecond)
			}
		case line == "DONE":
			done = true
		}
		if done {
			break
		}
	}
	_ = stdin.Close()
	if !done {
		_ = cmd.Wait()
		return m, fmt.Errorf("driver ended before DONE:\n%s", r.tail(p))
	}
	if h.Count() == 0 && r.c.resumes > 0 {
		return m, errors.New("no resume samples")
	}
	// Let the driver finish on its own, so its exit is not counted as a failure.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
	}
	secs := end.at.Sub(start.at).Seconds()
	n := float64(r.c.cycles)
	m.CyclesPerSec = n / secs
	m.CPUMsPerCycle = float64((end.cpu - start.cpu).Microseconds()) / 1000 / n
	m.FsyncsPerCycle = float64(end.fsyncs-start.fsyncs) / n
	m.ResumeP50ms = float64(h.Quantile(0.5).Microseconds()) / 1000
	m.ResumeP99ms = float64(h.Quantile(0.99).Microseconds()) / 1000
	return m, nil
}

// cpu is the user and system time of the system's process and every
// process below it, strace's own left out.
func (p *proc) cpu() time.Duration {
	pid := p.cmd.Process.Pid
	if p.log != "" {
		return treeCPU(pid) // pid is strace
	}
	return procCPU(pid) + treeCPU(pid)
}

// treeCPU is the user and system time of every process below pid, all
// their threads, read from /proc; pid's own is left out.
func treeCPU(pid int) time.Duration {
	var total time.Duration
	for _, child := range children(pid) {
		total += procCPU(child) + treeCPU(child)
	}
	return total
}

func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// countFsyncs counts the fsync and fdatasync calls strace has logged so far
// (a call another thread interrupted is logged as "<unfinished ...>" once
// and "resumed" once: only the first names the call with its parenthesis).
func countFsyncs(path string) int {
	if path == "" {
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "fsync(") || strings.Contains(l, "fdatasync(") {
			n++
		}
	}
	return n
}
