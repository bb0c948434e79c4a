package agui

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/e2e"
)

// TestAGUIClient runs the published @ag-ui/client HttpAgent against the
// bridge (e2e/agui.mjs): the interrupt outcome, resume with resolved and
// with cancelled, every event validated against @ag-ui/core's schemas.
// .ci/run installs the packages and sets INTERLOCK_E2E=1, which makes their
// absence a failure.
func TestAGUIClient(t *testing.T) {
	node := e2e.Require(t, false, "@ag-ui/client", "@ag-ui/core")
	script := filepath.Join(e2e.Dir(), "agui.mjs")
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
