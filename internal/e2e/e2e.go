// Package e2e finds the tools the end-to-end tests in e2e/ need: node, the
// npm packages installed there, and Debian's chromium. .ci/run installs them
// and sets INTERLOCK_E2E=1, which turns their absence into a failure instead
// of a skip.
package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir is the repository's e2e directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "e2e")
}

// Require returns node's path, or skips (fails under INTERLOCK_E2E=1) when
// node, any of the npm modules, or (with chromium) the browser is missing.
func Require(t *testing.T, chromium bool, modules ...string) string {
	t.Helper()
	missing := ""
	node, err := exec.LookPath("node")
	switch {
	case err != nil:
		missing = "node"
	case chromium && os.Getenv("CHROMIUM") == "" && !exists("/usr/bin/chromium"):
		missing = "chromium (apt-get install chromium)"
	}
	for _, m := range modules {
		if missing == "" && !exists(filepath.Join(Dir(), "node_modules", m)) {
			missing = m + " (npm ci in e2e/)"
		}
	}
	if missing != "" {
		if os.Getenv("INTERLOCK_E2E") == "1" {
			t.Fatalf("end-to-end test needs %s", missing)
		}
		t.Skipf("end-to-end test needs %s; .ci/run installs it", missing)
	}
	return node
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
