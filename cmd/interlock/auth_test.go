package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shippedAuth are the flags that print the agent and approver users of
// deploy/nats/auth.conf (its comment says so).
var shippedAuth = []string{"auth", "--agent", "refunds=agent", "--agent", "billing", "--approver", "ada", "--approver", "bob"}

// TestAuthMatchesShippedConfig: `interlock auth` prints exactly the agent
// and approver users of deploy/nats/auth.conf, so the two cannot drift.
func TestAuthMatchesShippedConfig(t *testing.T) {
	t.Parallel()
	r := cli(t, append([]string{"--json"}, shippedAuth...)...)
	require.Equal(t, 0, r.code, r.err)
	var users []authUser
	require.NoError(t, json.Unmarshal([]byte(r.out), &users))
	require.Len(t, users, 4)

	opts, err := server.ProcessConfigFile("../../deploy/nats/auth.conf")
	require.NoError(t, err)
	shipped := map[string]*server.User{}
	for _, u := range opts.Users {
		shipped[u.Username] = u
	}
	for _, u := range users {
		s := shipped[u.User]
		require.NotNil(t, s, "auth.conf has user %s", u.User)
		assert.Equal(t, u.Publish, []string(s.Permissions.Publish.Allow), u.User)
		assert.Empty(t, s.Permissions.Publish.Deny, u.User)
		assert.Equal(t, u.Subscribe, []string(s.Permissions.Subscribe.Allow), u.User)
		assert.Equal(t, os.Getenv(u.PasswordEnv), s.Password, "%s's password comes from %s", u.User, u.PasswordEnv)
	}
	generated := map[string]bool{}
	for _, u := range users {
		generated[u.User] = true
	}
	for name := range shipped {
		if strings.HasPrefix(name, "agent") {
			assert.True(t, generated[name], "agent user %s of auth.conf is generated", name)
		}
	}
}

// TestAuthConfAndHelmFormats: the conf output is what auth.conf holds, the
// helm output what the Helm values hold, text for text.
func TestAuthConfAndHelmFormats(t *testing.T) {
	t.Parallel()
	agents := []string{"auth", "--agent", "refunds=agent", "--agent", "billing"}
	conf := cli(t, agents...)
	require.Equal(t, 0, conf.code, conf.err)
	data, err := os.ReadFile("../../deploy/nats/auth.conf")
	require.NoError(t, err)
	assert.Contains(t, string(data), conf.out)

	helm := cli(t, append(agents, "--format", "helm")...)
	require.Equal(t, 0, helm.code, helm.err)
	values, err := os.ReadFile("../../deploy/kubernetes/nats-values.yaml")
	require.NoError(t, err)
	for _, part := range strings.Split(strings.TrimSpace(helm.out), "\n# ") {
		_, body, _ := strings.Cut(part, "\n")
		assert.Contains(t, string(values), body)
	}
}

// TestAuthRefusesBadInput: bad names are refused with a usage error naming
// the flag.
func TestAuthRefusesBadInput(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"auth":                     "name at least one --agent or --approver",
		"auth --agent re.funds":    `--agent "re.funds"`,
		"auth --agent refunds=a.b": `--agent "refunds=a.b"`,
		"auth --approver a*":       `--approver "a*"`,
		"auth --agent refunds=ada --approver ada":   `user "ada" named twice`,
		"auth --agent refunds --format yaml":        `--format "yaml"`,
		"auth --agent refunds --prefix bad..prefix": "--prefix",
	} {
		r := cli(t, strings.Fields(args)...)
		assert.Equal(t, exitUsage, r.code, args)
		assert.Contains(t, r.err, want, args)
	}
}

// TestAuthOtherPrefix: the subjects and stream names follow --prefix.
func TestAuthOtherPrefix(t *testing.T) {
	t.Parallel()
	r := cli(t, "--json", "--prefix", "acme.il", "auth", "--agent", "refunds")
	require.Equal(t, 0, r.code, r.err)
	var users []authUser
	require.NoError(t, json.Unmarshal([]byte(r.out), &users))
	require.Len(t, users, 1)
	assert.Equal(t, "agent_refunds", users[0].User)
	assert.Equal(t, "INTERLOCK_AGENT_REFUNDS_PASSWORD", users[0].PasswordEnv)
	assert.Contains(t, users[0].Publish, "acme.il.suspended.refunds.*")
	assert.Contains(t, users[0].Publish, "$JS.API.DIRECT.GET.ACME_IL_RUNS.acme.il.*.refunds.*")
	assert.Equal(t, []string{"_INBOX.agent_refunds.>"}, users[0].Subscribe)
}
