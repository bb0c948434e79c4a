package processor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// rssKB reads a process's resident set size.
func rssKB(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// TestParkedRunsCoordinatorMemory parks INTERLOCK_PARKED runs (default
// 1,000,000) with the coordinator in its own process, and reports its
// resident memory as the runs pile up, and the bytes JetStream stores per
// parked run. Only with INTERLOCK_SOAK=1: it takes minutes.
//
//	INTERLOCK_SOAK=1 go test -run TestParkedRunsCoordinatorMemory -v -timeout 60m ./processor
func TestParkedRunsCoordinatorMemory(t *testing.T) {
	t.Parallel()
	if os.Getenv("INTERLOCK_SOAK") == "" {
		t.Skip("set INTERLOCK_SOAK=1")
	}
	n := 1_000_000
	if s := os.Getenv("INTERLOCK_PARKED"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	h := newBareHarness(t, nil)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=coordinator", "INTERLOCK_TEST_NATS="+h.srv.URL(), "INTERLOCK_TEST_JOURNAL="+t.TempDir()+"/j")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { // the helper has connected and made its consumers
		_, err := h.admin.ConsumerState(h.ctx(), jetstream.StreamTimers, "coordinator_timers")
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the coordinator process started")
	before, err := h.admin.StoredBytes(h.ctx())
	require.NoError(t, err)
	start := time.Now()
	ns := h.admin.Namespace()
	msgs := make([]jetstream.OutMsg, 0, 256)
	flush := func() {
		require.NoError(t, h.admin.PublishAll(h.ctx(), msgs...))
		msgs = msgs[:0]
	}
	var peak int
	for i := range n {
		run := fmt.Sprintf("p%08d", i)
		s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "parked"},
			Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Message: "approve?"}}}
		data, _ := json.Marshal(s)
		subject, _ := ns.Suspended("parked", run)
		msgs = append(msgs, jetstream.OutMsg{Subject: subject, Data: data, MsgID: run + ":0"})
		if len(msgs) == cap(msgs) {
			flush()
		}
		if (i+1)%(n/10) == 0 {
			rss := rssKB(cmd.Process.Pid)
			peak = max(peak, rss)
			t.Logf("%d published, coordinator RSS %d MB, %s", i+1, rss/1024, time.Since(start).Round(time.Second))
		}
	}
	flush()
	require.Eventually(t, func() bool {
		st, err := h.admin.ConsumerState(h.ctx(), jetstream.StreamRuns, "coordinator_runs")
		if rss := rssKB(cmd.Process.Pid); rss > peak {
			peak = rss
		}
		return err == nil && st.Pending == 0 && st.AckPending == 0
	}, 50*time.Minute, time.Second, "the coordinator records every parked run")
	after, err := h.admin.StoredBytes(h.ctx())
	require.NoError(t, err)
	t.Logf("%d parked runs recorded in %s; coordinator RSS peak %d MB, now %d MB; %.0f bytes stored per parked run",
		n, time.Since(start).Round(time.Second), peak/1024, rssKB(cmd.Process.Pid)/1024, float64(after-before)/float64(n))
	require.Less(t, peak/1024, 100, "coordinator memory under 100 MB")

	// What the gauge and a listing's page cost with every run waiting
	// (logged, not asserted: the machine's load decides wall time).
	for _, after := range []uint64{0, uint64(n / 2)} {
		begin := time.Now()
		page, _, err := h.client.PendingPage(h.ctx(), after, 50)
		require.NoError(t, err)
		require.Len(t, page, 50)
		t.Logf("a page of 50 from position %d: %s", after, time.Since(begin).Round(time.Microsecond))
	}
	begin := time.Now()
	count, err := store.NewJetStream(h.admin).PendingCount(h.ctx())
	require.NoError(t, err)
	t.Logf("the pending gauge's count, %d: %s", count, time.Since(begin).Round(time.Microsecond))
}
