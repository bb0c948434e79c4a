package agui_test

import (
	"bufio"
	"context"
	"fmt"
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

// TestAGUIClient runs the published @ag-ui/client HttpAgent against the
// gateway (e2e/agui.mjs), one part per point of issue 12: the transcript,
// expiry, no lost events, batch authorization, ownership. Every event is
// validated against @ag-ui/core's schemas. The script prints "WAIT" lines
// for what happens outside AG-UI; this test does it and answers "go".
// .ci/run installs the packages and sets INTERLOCK_E2E=1, which makes their
// absence a failure.
func TestAGUIClient(t *testing.T) {
	node := e2e.Require(t, false, "@ag-ui/client", "@ag-ui/core")
	script := filepath.Join(e2e.Dir(), "agui.mjs")
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, e.gateways[0].URL, eveToken, adaToken, malToken)
	cmd.Dir = filepath.Dir(script)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var out []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out = append(out, line)
		what, ok := strings.CutPrefix(line, "WAIT ")
		if !ok {
			continue
		}
		kind, id, _ := strings.Cut(what, " ")
		rec := e.runOf(id)
		switch kind {
		case "expired": // the expiry timer closes it and the run goes on
			_, err = e.client.Wait(ctx, rec.RunID, processor.Finished)
		case "decide": // decided from the CLI while the client is away
			_, err = e.client.Decide(ctx, processor.DecisionRequest{RunID: rec.RunID, InterruptID: id,
				Status: subjects.StatusResolved, Payload: true})
			if err == nil {
				_, err = e.client.Wait(ctx, rec.RunID, processor.Finished)
			}
		case "unchanged-then-ada-decides":
			if len(rec.Pending()) != 2 {
				err = fmt.Errorf("a refused batch changed the run: %d pending", len(rec.Pending()))
			} else {
				_, err = e.client.Decide(ctx, processor.DecisionRequest{RunID: rec.RunID, InterruptID: id,
					Status: subjects.StatusResolved, Approver: "ada"})
			}
		default:
			err = fmt.Errorf("unknown WAIT %q", what)
		}
		require.NoError(t, err, "%s", what)
		_, err = fmt.Fprintln(stdin, "go")
		require.NoError(t, err)
	}
	err = cmd.Wait()
	require.NoError(t, err, "%s\n%s", strings.Join(out, "\n"), stderr.String())
	require.NotEmpty(t, out)
	assert.True(t, strings.HasPrefix(out[len(out)-1], "OK "), "%s", out)
	t.Logf("%s", out[len(out)-1])
}
