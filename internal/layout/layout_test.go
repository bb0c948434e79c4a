// Package layout holds the test that keeps each package to its job: who
// may import whom, as docs/architecture.md describes.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/interlockhq/interlock/"

// deps lists the packages pkg imports, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestImports(t *testing.T) {
	t.Parallel()
	rules := []struct {
		pkg       string
		forbidden []string
		why       string
	}{
		{"subjects", []string{"github.com/nats-io/", module}, "the wire protocol needs nothing but the standard library"},
		{"processor", []string{module + "processor/coordinator", module + "processor/gateway", module + "processor/notifier",
			module + "processor/agui", module + "internal/benchmark"}, "an agent author's import carries nothing of the services"},
		{"processor/rules", []string{"github.com/nats-io/", module + "jetstream", module + "processor/store", "net/http", "os/exec"},
			"the rules are pure functions: no I/O"},
		{"processor/coordinator", []string{module + "processor/gateway", module + "processor/notifier", module + "processor/agui"},
			"the coordinator is a service of its own"},
		{"processor/store", []string{module + "processor/coordinator", module + "processor/rules"}, "the store keeps records, it does not decide"},
		{"processor/notifier", []string{module + "processor/coordinator", module + "processor/gateway"}, "notifiers only read the feed"},
	}
	for _, r := range rules {
		for _, d := range deps(t, r.pkg) {
			if d == module+r.pkg {
				continue
			}
			for _, f := range r.forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s imports %s: %s", r.pkg, d, r.why)
				}
			}
		}
	}
}

// TestOnlyJetStreamImportsNATS keeps nats.go behind the adapter: no
// package of processor/ or cmd/ imports it directly.
func TestOnlyJetStreamImportsNATS(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"processor/...", module+"cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/nats-io/") {
				t.Errorf("%s imports %s directly; use package jetstream", fields[0], imp)
			}
		}
	}
}
