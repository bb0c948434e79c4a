package agui

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAGUIClient runs the published @ag-ui/client HttpAgent against the
// bridge (e2e/agui.mjs): the interrupt outcome, resume with resolved and
// with cancelled, every event validated against @ag-ui/core's schemas.
// .ci/run installs the packages and sets INTERLOCK_E2E=1, which makes their
// absence a failure.
func TestAGUIClient(t *testing.T) {
	script, _ := filepath.Abs("../../e2e/agui.mjs")
	node, err := exec.LookPath("node")
	if _, statErr := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@ag-ui", "client")); err != nil || statErr != nil {
		if os.Getenv("INTERLOCK_E2E") == "1" {
			t.Fatal("the AG-UI client test needs node and `npm ci` in e2e/")
		}
		t.Skip("needs node and `npm ci` in e2e/; .ci/run installs them")
	}
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, e.bridges[0].URL+"/agui/assistant")
	cmd.Dir = filepath.Dir(script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(string(out)), "OK "), "%s", out)
	t.Logf("%s", out)
}
