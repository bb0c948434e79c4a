package gateway

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/e2e"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// TestInboxInBrowser: an approver logs in on a phone-sized screen, sees a
// new interrupt appear, fills the answer the interrupt's responseSchema asks
// for, approves, and the run completes; an interrupt decided elsewhere
// leaves the page by itself.
func TestInboxInBrowser(t *testing.T) {
	node := e2e.Require(t, true, "playwright-core")
	script := filepath.Join(e2e.Dir(), "inbox.mjs")
	e := newEnv(t)
	shot := filepath.Join(t.TempDir(), "inbox.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, e.srv.URL, "ada-token", "Refund 12.50 to Ada?", shot)
	cmd.Dir = filepath.Dir(script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		_ = cmd.Wait()
		t.Fatalf("browser script ended before %s: %s", want, stderr.String())
	}

	expect("READY")
	schema := map[string]any{"type": "object", "required": []string{"amount"},
		"properties": map[string]any{"amount": map[string]any{"type": "number"}}}
	run, err := e.client.Start(ctx, "gate", map[string]any{"Approvers": []string{"ada"}, "Message": "Refund 12.50 to Ada?", "Schema": schema})
	require.NoError(t, err)
	expect("APPROVED")
	rec, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	assert.JSONEq(t, `{"payload":{"amount":12.5},"by":"ada"}`, string(rec.Result))

	other, id := e.suspend(map[string]any{"Message": "Decided on the CLI"})
	_, err = stdin.Write([]byte("GONE Decided on the CLI\n"))
	require.NoError(t, err)
	expect("SEEN")
	_, err = e.client.Decide(ctx, processor.DecisionRequest{RunID: other, InterruptID: id, Status: subjects.StatusCancelled, Approver: "bob"})
	require.NoError(t, err)
	_, err = stdin.Write([]byte("WAIT-GONE\n"))
	require.NoError(t, err)
	expect("CLEARED")
	require.NoError(t, cmd.Wait(), stderr.String())
	info, err := os.Stat(shot)
	require.NoError(t, err)
	assert.Positive(t, info.Size(), "a screenshot of the inbox on a phone")
	if dir := os.Getenv("INTERLOCK_SCREENSHOTS"); dir != "" {
		data, _ := os.ReadFile(shot)
		_ = os.WriteFile(filepath.Join(dir, "inbox.png"), data, 0o644)
	}
}
