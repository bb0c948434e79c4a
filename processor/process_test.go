package processor

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// helperEnv makes the test binary run as a coordinator or worker process.
const helperEnv = "INTERLOCK_TEST_HELPER"

// runHelper is the main of a helper process: it serves until killed.
func runHelper(role string) int {
	ctx := context.Background()
	c, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: os.Getenv("INTERLOCK_TEST_NATS")}, jetstream.Config{})
	if err != nil {
		return 3
	}
	// On the test's open server every process provisions, as serve does,
	// and so creates its own consumers.
	if c.Provision(ctx) != nil {
		return 3
	}
	journal := os.Getenv("INTERLOCK_TEST_JOURNAL")
	note := func(s string) {
		f, err := os.OpenFile(journal, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = f.WriteString(s + "\n")
			_ = f.Sync()
			f.Close()
		}
	}
	switch role {
	case "coordinator":
		co := coordinator.New(c, coordinator.Config{AckWait: time.Second, Logger: quiet})
		if co.Start(ctx) != nil {
			return 4
		}
	case "worker":
		w := NewWorker(c, WorkerConfig{AckWait: time.Second, Logger: quiet})
		_ = w.Register("slow", func(ctx context.Context, _ json.RawMessage) (any, error) {
			if _, err := Step(ctx, "prepare", func(context.Context) (bool, error) { note("step"); return true, nil }); err != nil {
				return nil, err
			}
			d, err := Interrupt(ctx, Request{Message: "go?"})
			if err != nil {
				return nil, err
			}
			note("replay-begin")
			time.Sleep(1500 * time.Millisecond) // a long replay, long enough to be killed in
			note("replay-end")
			return d.Payload, nil
		})
		if w.Start(ctx) != nil {
			return 4
		}
	}
	select {} // until killed
}

// TestKilledProcesses runs the coordinator and a worker as separate
// processes, kills both with SIGKILL in the middle of a replay, and starts
// new ones: the run completes once, and the journaled step that was recorded
// before is not run again.
func TestKilledProcesses(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	journal := filepath.Join(t.TempDir(), "journal")
	spawn := func(role string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+role, "INTERLOCK_TEST_NATS="+h.srv.URL(), "INTERLOCK_TEST_JOURNAL="+journal)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	lines := func() []string {
		b, _ := os.ReadFile(journal)
		return strings.Fields(string(b))
	}
	count := func(s string) (n int) {
		for _, l := range lines() {
			if l == s {
				n++
			}
		}
		return n
	}
	co, w := spawn("coordinator"), spawn("worker")
	run := h.start("slow", nil)
	rec := h.suspendedAtPass(run, 0)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, "yes")
	require.Eventually(t, func() bool { return count("replay-begin") == 1 }, 15*time.Second, 10*time.Millisecond)
	for _, p := range []*exec.Cmd{co, w} {
		require.NoError(t, p.Process.Signal(syscall.SIGKILL))
		_ = p.Wait()
	}
	assert.Zero(t, count("replay-end"), "killed during the replay")
	spawn("coordinator")
	spawn("worker")
	rec = h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `"yes"`, string(rec.Result))
	assert.Equal(t, 1, count("step"), "the journaled step is not run again once recorded")
	assert.Equal(t, 2, count("replay-begin"), "the killed replay ran again")
	assert.Len(t, h.waitEvents(run, subjects.EventCompleted, 1), 1, "completed once")
	assert.Len(t, h.events(run, subjects.EventDecisionAccepted), 1)
}
