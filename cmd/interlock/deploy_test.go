package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// checkArgs parses an interlock command line from a deployment file with
// the real CLI, without running it: the command exists, every flag exists
// and takes its value, required flags are there, and no flag is named by a
// deprecated alias.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	root := newRoot()
	cmd, rest, err := root.Find(args)
	require.NoError(t, err, "%s: %v", where, args)
	require.NotEqual(t, root, cmd, "%s: no subcommand in %v", where, args)
	require.NoError(t, cmd.ParseFlags(rest), "%s: %v", where, args)
	require.NoError(t, cmd.ValidateRequiredFlags(), "%s: %v", where, args)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		assert.Empty(t, f.Annotations[aliasOf], "%s: --%s is deprecated", where, f.Name)
	})
	if cmd.Args != nil {
		require.NoError(t, cmd.Args(cmd, cmd.Flags().Args()), "%s: %v", where, args)
	}
}

func TestCheckArgsCatchesMistakes(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{"serve", "--replica", "3"}, {"notifier"}, {"nosuch"}, {"show"},
		{"gateway", "--identities", "ids.yaml", "--listen", "0.0.0.0:8080"}, {"serve", "--listen", "127.0.0.1:4222"}} {
		ft := &testing.T{}
		done := make(chan struct{})
		go func() { defer close(done); checkArgs(ft, "bad", bad) }()
		<-done
		assert.True(t, ft.Failed(), "%v should fail", bad)
	}
}

// roleOf is the NATS user each Interlock service of the shipped deployment
// files connects as.
var roleOf = map[string]string{"provision": "admin", "coordinator": "coordinator", "notifier": "notifier", "gateway": "gateway"}

func TestDeployComposeFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/compose/compose.yaml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Image       string   `yaml:"image"`
			Command     []string `yaml:"command"`
			Volumes     []string `yaml:"volumes"`
			Environment any      `yaml:"environment"`
			DependsOn   any      `yaml:"depends_on"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	for _, name := range []string{"n1", "n2", "n3", "provision", "coordinator", "notifier", "gateway"} {
		require.Contains(t, doc.Services, name)
	}
	for name, s := range doc.Services {
		if s.Image == "interlock:latest" {
			checkArgs(t, "compose "+name, s.Command)
			// Each service as its own user, never anonymous.
			env, ok := s.Environment.(map[string]any)
			require.True(t, ok, "compose %s: environment", name)
			role := roleOf[name]
			require.NotEmpty(t, role, "compose %s: a role", name)
			assert.Equal(t, role, env["NATS_USER"], "compose %s", name)
			assert.Contains(t, env["NATS_PASSWORD"], "${INTERLOCK_"+strings.ToUpper(role)+"_PASSWORD", "compose %s", name)
			if name != "provision" {
				assert.Equal(t, map[string]any{"provision": map[string]any{"condition": "service_completed_successfully"}},
					s.DependsOn, "compose %s starts after provisioning", name)
			}
			continue
		}
		// The NATS servers load compose.conf, which includes auth.conf.
		assert.Equal(t, []string{"-c", "/etc/nats/compose.conf"}, s.Command[:2], "compose %s", name)
		assert.Contains(t, s.Volumes, "../nats:/etc/nats:ro", "compose %s", name)
	}
	assert.Contains(t, strings.Join(doc.Services["coordinator"].Healthcheck.Test, " "), "/readyz")
	assert.Contains(t, strings.Join(doc.Services["coordinator"].Command, " "), "--replicas 3")
	assert.Contains(t, strings.Join(doc.Services["provision"].Command, " "), "--replicas 3")
}

// as runs the CLI against the server at url as NATS user (empty:
// anonymous), its name and password in the URL.
func as(t *testing.T, user, url string, args ...string) result {
	t.Helper()
	if user != "" {
		url = jstest.As(user, url)
	}
	return cli(t, append(args, "--nats-url", url)...)
}

// attackAnonymousApprove is found item 7: anyone who reaches NATS approves
// as ada. Against the shipped configuration the connection is refused; ada
// herself gets through (to a run that does not exist).
func attackAnonymousApprove(t *testing.T, url string) {
	t.Helper()
	r := as(t, "", url, "approve", "run-1", "ask", "--approver", "ada")
	require.Equal(t, exitFailure, r.code, "anonymous: %s %s", r.out, r.err)
	assert.Contains(t, strings.ToLower(r.err), "authorization violation")
	r = as(t, "ada", url, "approve", "run-1", "ask", "--approver", "ada", "--timeout", "2s")
	assert.NotEqual(t, 0, r.code, "no such run: %s", r.out)
	assert.NotContains(t, strings.ToLower(r.err), "authorization violation", "ada herself gets through")
	assert.NotContains(t, r.err, "permission denied", "ada may decide as herself")
}

// TestAttackAnonymousApproveCompose starts a NATS server from the compose
// file's configuration (on loopback, a free port and a temporary
// directory) and attacks it.
func TestAttackAnonymousApproveCompose(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/compose.conf", Host: "127.0.0.1", Port: -1,
		DataDir: t.TempDir(), Sync: embedded.SyncInterval})
	require.NoError(t, err)
	defer srv.Shutdown()
	r := as(t, "admin", srv.URL(), "provision")
	require.Equal(t, 0, r.code, r.err)
	attackAnonymousApprove(t, srv.URL())
}

func TestDeployKubernetesManifests(t *testing.T) {
	t.Parallel()
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
							Name string   `yaml:"name"`
							Args []string `yaml:"args"`
							Env  []struct {
								Name      string `yaml:"name"`
								Value     string `yaml:"value"`
								ValueFrom *struct {
									SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
								} `yaml:"valueFrom"`
							} `yaml:"env"`
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
			// Each container as its own user, its password from the Secret.
			role := roleOf[c.Name]
			require.NotEmpty(t, role, "kubernetes %s: a role", c.Name)
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
				if e.ValueFrom != nil {
					env[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
			assert.Equal(t, map[string]string{"NATS_USER": role, "NATS_PASSWORD": "interlock-nats/" + role}, env, c.Name)
			if doc.Kind != "Deployment" {
				continue
			}
			require.NotNil(t, c.LivenessProbe, "every Interlock service has probes")
			require.NotNil(t, c.ReadinessProbe)
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		}
	}
	assert.Equal(t, 3, kinds["Deployment"], "coordinator, notifier, gateway")
	assert.Equal(t, 1, kinds["Job"], "provision")
}

// TestDeployKubernetesNATSUsers: the Helm values give NATS exactly the users
// and permissions of deploy/nats/auth.conf, each password from the Secret.
func TestDeployKubernetesNATSUsers(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile("../../deploy/nats/auth.conf")
	require.NoError(t, err)
	type rules struct {
		Allow []string `yaml:"allow"`
		Deny  []string `yaml:"deny"`
	}
	type perms struct {
		Publish   rules `yaml:"publish"`
		Subscribe rules `yaml:"subscribe"`
		// AllowResponses: the user may answer requests in the asker's inbox.
		AllowResponses bool `yaml:"allow_responses"`
	}
	want := map[string]perms{}
	for _, u := range opts.Users {
		var p perms
		if u.Permissions != nil {
			if u.Permissions.Publish != nil {
				p.Publish = rules{u.Permissions.Publish.Allow, u.Permissions.Publish.Deny}
			}
			if u.Permissions.Subscribe != nil {
				p.Subscribe = rules{u.Permissions.Subscribe.Allow, u.Permissions.Subscribe.Deny}
			}
			p.AllowResponses = u.Permissions.Response != nil
		}
		want[u.Username] = p
	}
	require.Len(t, want, 11)

	data, err := os.ReadFile("../../deploy/kubernetes/nats-values.yaml")
	require.NoError(t, err)
	type secretRef struct {
		ValueFrom struct {
			SecretKeyRef struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	var v struct {
		Config struct {
			Merge struct {
				Accounts map[string]struct {
					Users []struct {
						User        string `yaml:"user"`
						Password    string `yaml:"password"`
						Permissions perms  `yaml:"permissions"`
					} `yaml:"users"`
				} `yaml:"accounts"`
			} `yaml:"merge"`
		} `yaml:"config"`
		Container struct {
			Env map[string]secretRef `yaml:"env"`
		} `yaml:"container"`
	}
	require.NoError(t, yaml.Unmarshal(data, &v))
	got := map[string]perms{}
	for _, u := range v.Config.Merge.Accounts["INTERLOCK"].Users {
		got[u.User] = u.Permissions
		variable := "INTERLOCK_" + strings.ToUpper(u.User) + "_PASSWORD"
		assert.Equal(t, "<< $"+variable+" >>", u.Password, u.User)
		ref := v.Container.Env[variable].ValueFrom.SecretKeyRef
		assert.Equal(t, "interlock-nats/"+u.User, ref.Name+"/"+ref.Key, u.User)
	}
	assert.Equal(t, want, got)
}

// TestDeploySystemdUnit runs the unit's ExecStart (its paths moved into the
// repository and a temporary directory, its ports to free ones) with the
// unit's environment, and attacks it.
func TestDeploySystemdUnit(t *testing.T) {
	data, err := os.ReadFile("../../deploy/systemd/interlock.service")
	require.NoError(t, err)
	assert.Contains(t, string(data), "KillSignal=SIGTERM")
	assert.Contains(t, string(data), "Environment=NATS_USER=coordinator")
	assert.Contains(t, string(data), "EnvironmentFile=/etc/interlock/secrets.env")
	var args []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			fields := strings.Fields(line)
			require.True(t, strings.HasSuffix(fields[0], "/interlock"))
			args = fields[1:]
		}
	}
	require.NotEmpty(t, args, "an ExecStart line")
	checkArgs(t, "systemd", args)
	moved := map[string]string{
		"/etc/interlock/nats/single.conf": "../../deploy/nats/single.conf",
		"/var/lib/interlock":              t.TempDir(),
		"127.0.0.1:4222":                  "127.0.0.1:0",
		"127.0.0.1:9464":                  "127.0.0.1:0",
	}
	for i, a := range args {
		if m, ok := moved[a]; ok {
			args[i] = m
		}
	}
	require.Contains(t, args, "../../deploy/nats/single.conf", "the unit loads the shipped config")

	// interlock-provision.service first, as admin, on the same data
	// directory: serve as the coordinator does not provision.
	prov, err := os.ReadFile("../../deploy/systemd/interlock-provision.service")
	require.NoError(t, err)
	assert.Contains(t, string(data), "Requires=interlock-provision.service")
	assert.Contains(t, string(data), "After=network-online.target interlock-provision.service")
	assert.Contains(t, string(prov), "Before=interlock.service")
	assert.Contains(t, string(prov), "Type=oneshot")
	assert.Contains(t, string(prov), "Environment=NATS_USER=admin")
	var provArgs []string
	sc = bufio.NewScanner(bytes.NewReader(prov))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			cmdline, ok := strings.CutPrefix(line, `/bin/sh -c 'NATS_PASSWORD="$INTERLOCK_ADMIN_PASSWORD" exec /usr/local/bin/interlock `)
			require.True(t, ok, "admin's password, then interlock: %s", line)
			provArgs = strings.Fields(strings.TrimSuffix(cmdline, "'"))
		}
	}
	require.Equal(t, "provision", provArgs[0])
	checkArgs(t, "systemd provision", provArgs)
	for i, a := range provArgs {
		if m, ok := moved[a]; ok {
			provArgs[i] = m
		}
	}
	t.Setenv("NATS_USER", "admin")
	t.Setenv("NATS_PASSWORD", jstest.Password("admin"))
	r := cli(t, provArgs...)
	require.Equal(t, 0, r.code, "provision: %s", r.err)

	// Without it, serve refuses and says what to do.
	t.Setenv("NATS_USER", "coordinator")
	t.Setenv("NATS_PASSWORD", jstest.Password("coordinator"))
	bare := slices.Clone(args)
	bare[slices.Index(bare, moved["/var/lib/interlock"])] = t.TempDir()
	r = cli(t, bare...)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.err, "interlock provision")

	// The unit's environment; this test alone runs with it (t.Setenv), and
	// only while serve reads it.
	t.Setenv("NATS_USER", "coordinator")
	t.Setenv("NATS_PASSWORD", jstest.Password("coordinator"))
	d := runDaemon(t, "coordinator running", args...)
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	defer func() { assert.Equal(t, 0, d.Stop(), "serve stops cleanly") }()
	assert.NotContains(t, d.logs.String(), jstest.Password("coordinator"), "no password in the logs")
	url := d.url("embedded nats-server started")
	ctx := context.Background()
	attackAnonymousApprove(t, url)

	// Ada, with her own user and inbox, decides a run that waits for her.
	agent, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: jstest.As("agent", url),
		InboxPrefix: subjects.InboxPrefix("agent")}, jetstream.Config{})
	require.NoError(t, err)
	defer agent.Close()
	susp, err := json.Marshal(subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-2", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}})
	require.NoError(t, err)
	subject, err := agent.Namespace().Suspended("refunds", "run-2")
	require.NoError(t, err)
	_, err = agent.Publish(ctx, subject, susp, "run-2:0", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r = as(t, "ada", url, "approve", "run-2", "ask", "--approver", "ada", "--timeout", "2s")
		return r.code == 0 // once the coordinator has recorded the run (before, unknown_run)
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "accepted")
	r = as(t, "ada", url, "approve", "run-2", "ask", "--approver", "bob", "--timeout", "2s")
	assert.Equal(t, exitFailure, r.code, "ada may not publish as bob: %s", r.err)
	assert.Contains(t, r.err, "permission denied")
}

// TestServeRedactsNATSPassword is found item 8: serve logged the NATS URL
// with the password in it.
func TestServeRedactsNATSPassword(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", Port: -1,
		DataDir: t.TempDir(), Sync: embedded.SyncInterval})
	require.NoError(t, err)
	defer srv.Shutdown()
	r := cli(t, "provision", "--nats-url", jstest.As("admin", srv.URL()))
	require.Equal(t, 0, r.code, r.err)
	d := runDaemon(t, "coordinator running", "serve", "--nats-url", jstest.As("coordinator", srv.URL()))
	require.Equal(t, 0, d.Stop(), d.logs.String())
	assert.NotContains(t, d.logs.String(), jstest.Password("coordinator"))
	assert.Contains(t, d.logs.String(), "coordinator:xxxxx@")
}

// TestAttackEmptyPassword is issue 23's finding 8: a deployment whose
// secrets file leaves a password empty. A stock nats-server cannot refuse
// it: auth.conf's `password: $INTERLOCK_AUDITOR_PASSWORD` with the variable
// empty makes the empty string the auditor's password, and anyone who sends
// it reads everything. So the checks are outside NATS: compose's `:?` and
// the Kubernetes Secret (TestDeployNoEmptyPassword), and Interlock's own
// commands, which refuse to connect as a named user with an empty password.
//
// Not parallel: the auditor's password variable is empty for this test only
// (t.Setenv), as an unset value in .env leaves it.
func TestAttackEmptyPassword(t *testing.T) {
	t.Setenv(jstest.PasswordEnv("auditor"), "")
	t.Setenv("NATS_PASSWORD", "")
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", Port: -1,
		DataDir: t.TempDir(), Sync: embedded.SyncInterval})
	require.NoError(t, err)
	defer srv.Shutdown()
	require.Equal(t, 0, as(t, "admin", srv.URL(), "provision").code)

	// (a) NATS admits the auditor with an empty password: why the check
	// cannot be left to it.
	nc, err := nats.Connect(srv.URL(), nats.UserInfo("auditor", ""))
	require.NoError(t, err, "a stock nats-server admits an empty password when the variable is empty")
	nc.Close()

	// (b) Interlock's commands refuse, before connecting, with their own
	// exit code: the user named by flag or environment and NATS_PASSWORD
	// empty, or an empty password in the URL.
	for _, args := range [][]string{
		{"history", "run-1", "--nats-url", srv.URL(), "--nats-user", "auditor"},
		{"history", "run-1", "--nats-url", strings.Replace(srv.URL(), "nats://", "nats://auditor:@", 1)},
		{"pending", "--nats-url", srv.URL(), "--nats-user", "auditor"},
	} {
		r := cli(t, args...)
		assert.Equal(t, exitCredentials, r.code, "%v: %s %s", args, r.out, r.err)
		assert.Contains(t, r.err, "empty password", args)
		assert.Empty(t, r.out, args)
	}
	// serve refuses too, and starts nothing.
	r := cli(t, "serve", "--nats-url", srv.URL(), "--nats-user", "coordinator")
	assert.Equal(t, exitCredentials, r.code, "%s", r.err)
	assert.Contains(t, r.err, "NATS_PASSWORD")

	// The systemd unit's way: serve embeds a server from single.conf, its
	// own password set, the auditor's empty. serve refuses to start a
	// server that would admit her.
	t.Setenv("NATS_PASSWORD", jstest.Password("coordinator"))
	r = cli(t, "serve", "--nats-config", "../../deploy/nats/single.conf", "--nats-listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--nats-user", "coordinator")
	assert.Equal(t, exitCredentials, r.code, "%s", r.err)
	assert.Contains(t, r.err, `user "auditor"`)
	assert.Contains(t, r.err, "empty password")
}

// secretRef matches a variable reference that carries a secret.
var secretRef = regexp.MustCompile(`\$\{?([A-Z0-9_]*(?:PASSWORD|SECRET)[A-Z0-9_]*)([^}]*)\}?`)

// TestDeployNoEmptyPassword is issue 23's findings 8 and 9, checked
// statically (no container engine runs here): in compose every password or
// secret variable is required where it is passed (`${VAR:?...}`), the
// example secrets file says each must be set and how to generate one, and
// nothing is published on a non-loopback address; in Kubernetes every
// password comes from a required Secret key and an admission policy refuses
// the Secret with any key missing or empty. TestAttackEmptyPassword shows
// why: nats-server admits an empty password.
func TestDeployNoEmptyPassword(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/compose/compose.yaml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Environment any      `yaml:"environment"`
			Ports       []string `yaml:"ports"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	passed := map[string]bool{}
	for name, s := range doc.Services {
		env := map[string]string{}
		switch e := s.Environment.(type) {
		case map[string]any:
			for k, v := range e {
				env[k], _ = v.(string)
			}
		case []any: // NAME (passed through as it is, empty too) or NAME=value
			for _, item := range e {
				k, v, _ := strings.Cut(item.(string), "=")
				env[k] = v
			}
		}
		for k, v := range env {
			if !strings.Contains(k, "PASSWORD") && !strings.Contains(k, "SECRET") {
				continue
			}
			m := secretRef.FindStringSubmatch(v)
			if !assert.NotNil(t, m, "compose %s: %s=%q takes no variable, or passes an unset one through", name, k, v) {
				continue
			}
			assert.True(t, strings.HasPrefix(m[2], ":?"), "compose %s: %s=%q is not required (${%s:?...})", name, k, v, m[1])
			passed[m[1]] = true
		}
		for _, p := range s.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:") || strings.HasPrefix(p, "[::1]:"),
				"compose %s publishes %q beyond loopback: plain HTTP would carry tokens and cookies in clear", name, p)
		}
	}
	// Every reference in the file, wherever it is, is required.
	for _, m := range secretRef.FindAllStringSubmatch(string(data), -1) {
		if strings.HasPrefix(m[0], "${") {
			assert.True(t, strings.HasPrefix(m[2], ":?"), "compose: %s is not required", m[0])
		}
	}
	for _, u := range jstest.Users {
		assert.True(t, passed[jstest.PasswordEnv(u)], "compose passes %s to NATS", jstest.PasswordEnv(u))
	}
	assert.Contains(t, doc.Services["gateway"].Ports, "127.0.0.1:8080:8080")

	// The example file: every variable compose requires, each left empty
	// only under a note saying it must be set and how to make one.
	example, err := os.ReadFile("../../deploy/compose/secrets.env.example")
	require.NoError(t, err)
	var notes []string
	listed := map[string]bool{}
	for _, line := range strings.Split(string(example), "\n") {
		if c, ok := strings.CutPrefix(line, "#"); ok {
			notes = append(notes, c)
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		listed[k] = true
		if v == "" {
			note := strings.Join(notes, " ")
			assert.Contains(t, note, "must be set", "secrets.env.example: %s is empty without a note", k)
			assert.Contains(t, note, "openssl rand", "secrets.env.example: how to generate %s", k)
		}
	}
	for k := range passed {
		assert.True(t, listed[k], "secrets.env.example lists %s", k)
	}

	// Kubernetes: no optional Secret key, and the policy that refuses an
	// empty one names every key the manifests read.
	keys := map[string]bool{}
	optional := regexp.MustCompile(`secretKeyRef:\s*\{[^}]*optional:\s*true`)
	keyRef := regexp.MustCompile(`secretKeyRef:\s*\{name:\s*interlock-nats,\s*key:\s*([a-z_]+)`)
	for _, f := range []string{"interlock.yaml", "nats-values.yaml"} {
		b, err := os.ReadFile("../../deploy/kubernetes/" + f)
		require.NoError(t, err)
		assert.NotRegexp(t, optional, string(b), f)
		for _, m := range keyRef.FindAllStringSubmatch(string(b), -1) {
			keys[m[1]] = true
		}
	}
	require.Len(t, keys, len(jstest.Users))
	b, err := os.ReadFile("../../deploy/kubernetes/secret-policy.yaml")
	require.NoError(t, err)
	var policy struct {
		Kind string `yaml:"kind"`
		Spec struct {
			FailurePolicy   string `yaml:"failurePolicy"`
			MatchConditions []struct {
				Expression string `yaml:"expression"`
			} `yaml:"matchConditions"`
			Validations []struct {
				Expression string `yaml:"expression"`
			} `yaml:"validations"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	require.NoError(t, dec.Decode(&policy))
	assert.Equal(t, "ValidatingAdmissionPolicy", policy.Kind)
	assert.Equal(t, "Fail", policy.Spec.FailurePolicy)
	require.NotEmpty(t, policy.Spec.MatchConditions)
	assert.Contains(t, policy.Spec.MatchConditions[0].Expression, "'interlock-nats'")
	require.NotEmpty(t, policy.Spec.Validations)
	for k := range keys {
		assert.Contains(t, policy.Spec.Validations[0].Expression, "'"+k+"'", "the policy requires key %s", k)
	}
	assert.Contains(t, policy.Spec.Validations[0].Expression, "size(object.data[k]) > 0")
	var binding struct {
		Kind string `yaml:"kind"`
		Spec struct {
			PolicyName        string   `yaml:"policyName"`
			ValidationActions []string `yaml:"validationActions"`
		} `yaml:"spec"`
	}
	require.NoError(t, dec.Decode(&binding))
	assert.Equal(t, "ValidatingAdmissionPolicyBinding", binding.Kind)
	assert.Equal(t, []string{"Deny"}, binding.Spec.ValidationActions)
}
