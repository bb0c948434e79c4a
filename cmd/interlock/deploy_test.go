package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// checkArgs parses an interlock command line from a deployment file with
// the real CLI, without running it: the command exists, every flag exists
// and takes its value, required flags are there.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	root := newRoot()
	cmd, rest, err := root.Find(args)
	require.NoError(t, err, "%s: %v", where, args)
	require.NotEqual(t, root, cmd, "%s: no subcommand in %v", where, args)
	require.NoError(t, cmd.ParseFlags(rest), "%s: %v", where, args)
	require.NoError(t, cmd.ValidateRequiredFlags(), "%s: %v", where, args)
	if cmd.Args != nil {
		require.NoError(t, cmd.Args(cmd, cmd.Flags().Args()), "%s: %v", where, args)
	}
}

func TestCheckArgsCatchesMistakes(t *testing.T) {
	for _, bad := range [][]string{{"serve", "--replica", "3"}, {"notifier"}, {"nosuch"}, {"show"}} {
		ft := &testing.T{}
		done := make(chan struct{})
		go func() { defer close(done); checkArgs(ft, "bad", bad) }()
		<-done
		assert.True(t, ft.Failed(), "%v should fail", bad)
	}
}

func TestDeployComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../deploy/compose/compose.yaml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Image       string   `yaml:"image"`
			Command     []string `yaml:"command"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	for _, name := range []string{"n1", "n2", "n3", "coordinator", "notifier", "gateway"} {
		require.Contains(t, doc.Services, name)
	}
	for name, s := range doc.Services {
		if s.Image == "interlock:latest" {
			checkArgs(t, "compose "+name, s.Command)
		}
	}
	assert.Contains(t, strings.Join(doc.Services["coordinator"].Healthcheck.Test, " "), "/readyz")
	assert.Contains(t, strings.Join(doc.Services["coordinator"].Command, " "), "--replicas 3")
}

func TestDeployKubernetesManifests(t *testing.T) {
	f, err := os.Open("../../deploy/kubernetes/interlock.yaml")
	require.NoError(t, err)
	defer f.Close()
	dec := yaml.NewDecoder(f)
	kinds := map[string]int{}
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args          []string `yaml:"args"`
							LivenessProbe *struct {
								HTTPGet struct{ Path string } `yaml:"httpGet"`
							} `yaml:"livenessProbe"`
							ReadinessProbe *struct {
								HTTPGet struct{ Path string } `yaml:"httpGet"`
							} `yaml:"readinessProbe"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		kinds[doc.Kind]++
		for _, c := range doc.Spec.Template.Spec.Containers {
			checkArgs(t, "kubernetes", c.Args)
			require.NotNil(t, c.LivenessProbe, "every Interlock container has probes")
			require.NotNil(t, c.ReadinessProbe)
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		}
	}
	assert.Equal(t, 3, kinds["Deployment"], "coordinator, notifier, gateway")
	values, err := os.ReadFile("../../deploy/kubernetes/nats-values.yaml")
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal(values, &v))
	assert.Contains(t, v, "config")
}

func TestDeploySystemdUnit(t *testing.T) {
	data, err := os.ReadFile("../../deploy/systemd/interlock.service")
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(data))
	found := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "ExecStart=")
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		require.True(t, strings.HasSuffix(fields[0], "/interlock"))
		checkArgs(t, "systemd", fields[1:])
		found = true
	}
	assert.True(t, found, "an ExecStart line")
	assert.Contains(t, string(data), "KillSignal=SIGTERM")
}
