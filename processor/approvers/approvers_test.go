package approvers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/authz"
)

func TestDirectory(t *testing.T) {
	t.Parallel()
	d, err := Parse("x", []byte("identities:\n  ada:\n    groups: [finance]\n    tokens: [\""+Digest("ada-token")+"\"]\n  bob: {}\n"))
	require.NoError(t, err)
	id, ok := d.Authenticate("ada-token")
	require.True(t, ok)
	assert.Equal(t, Identity{Name: "ada", Groups: []string{"finance"}}, id)
	_, ok = d.Authenticate("bob-token")
	assert.False(t, ok)
	_, ok = d.Authenticate("")
	assert.False(t, ok)
	assert.Equal(t, []string{"finance"}, d.Groups("ada"))
	assert.Empty(t, d.Groups("bob"))

	d, err = Parse("x", []byte("identities:\n  erin:\n    roles: [auditor]\n"))
	require.NoError(t, err)
	erin, ok := d.Identity("erin")
	require.True(t, ok)
	assert.True(t, erin.Auditor)
	_, ok = d.Identity("nobody")
	assert.False(t, ok)

	for _, bad := range []string{
		"identities:\n  a.b: {}\n",
		"identities:\n  ada: {tokens: [plain]}\n",
		"identities:\n  ada: {group: [x]}\n",
		"identities:\n  ada: {roles: [admin]}\n",
		"identities:\n  a: {tokens: [\"" + Digest("t") + "\"]}\n  b: {tokens: [\"" + Digest("t") + "\"]}\n",
	} {
		_, err := Parse("x", []byte(bad))
		assert.ErrorIs(t, err, ErrConfig, bad)
	}
}

func TestDeployExampleLoads(t *testing.T) {
	t.Parallel()
	d, err := Load("../../deploy/identities.yaml")
	require.NoError(t, err)
	assert.Equal(t, []string{"finance"}, d.Groups("ada"))
}

// The agents an identity may start through the AG-UI bridge: listed, all
// ("*"), or none when the key is absent (fail closed).
func TestAgents(t *testing.T) {
	t.Parallel()
	d, err := Parse("x", []byte(`identities:
  ada: {tokens: ["`+Digest("a")+`"], agents: ["*"]}
  eve: {tokens: ["`+Digest("e")+`"], agents: [assistant]}
  bob: {tokens: ["`+Digest("b")+`"]}
`))
	require.NoError(t, err)
	ada, _ := d.Authenticate("a")
	eve, _ := d.Authenticate("e")
	bob, _ := d.Authenticate("b")
	assert.True(t, authz.MayStart("anything", ada))
	assert.True(t, authz.MayStart("assistant", eve))
	assert.False(t, authz.MayStart("refunds", eve))
	assert.False(t, authz.MayStart("assistant", bob), "no agents key: no agent")
	_, err = Parse("x", []byte("identities:\n  ada: {agents: [\"a.b\"]}\n"))
	assert.ErrorIs(t, err, ErrConfig)
}

// The sinks an identity's one-click links go through: listed per identity,
// each reaching one identity only.
func TestLinkRecipient(t *testing.T) {
	t.Parallel()
	d, err := Parse("x", []byte("identities:\n  ada: {groups: [finance], links: [ada-mail, ada-dm]}\n  bob: {}\n"))
	require.NoError(t, err)
	ada, ok := d.LinkRecipient("ada-dm")
	require.True(t, ok)
	assert.Equal(t, "ada", ada.Name)
	assert.Equal(t, []string{"finance"}, ada.Groups)
	_, ok = d.LinkRecipient("team-chat")
	assert.False(t, ok, "a sink nobody lists gets no links")
	for _, bad := range []string{
		"identities:\n  ada: {links: [a.b]}\n",
		"identities:\n  ada: {links: [shared]}\n  bob: {links: [shared]}\n",
	} {
		_, err := Parse("x", []byte(bad))
		assert.ErrorIs(t, err, ErrConfig, bad)
	}
}

func TestSlackIdentity(t *testing.T) {
	t.Parallel()
	d, err := Parse("x", []byte("identities:\n  ada: {groups: [finance], slack: {team: T01, user: U01}}\n  bob: {}\n"))
	require.NoError(t, err)
	ada, ok := d.SlackIdentity("T01", "U01")
	require.True(t, ok)
	assert.Equal(t, Identity{Name: "ada", Groups: []string{"finance"}}, ada)
	// The same user id in another workspace is somebody else.
	_, ok = d.SlackIdentity("T02", "U01")
	assert.False(t, ok)
	_, ok = d.SlackIdentity("T01", "U02")
	assert.False(t, ok)
	d, err = Parse("x", []byte("identities:\n  ada: {email: Ada@Example.com, slack: {team: T01, user: U01}}\n  bob: {email: Bob@Example.com}\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"bob": "bob@example.com"}, d.SlackEmails(), "only identities naming no Slack user")
	for _, bad := range []string{
		"identities:\n  ada: {slack: {team: T01}}\n",
		"identities:\n  ada: {slack: {team: t01, user: U01}}\n",
		"identities:\n  ada: {slack: {team: T01, user: X01}}\n",
		"identities:\n  ada: {slack: {team: T01, user: U01, email: a@b}}\n",
		"identities:\n  a: {slack: {team: T01, user: U01}}\n  b: {slack: {team: T01, user: U01}}\n",
		"identities:\n  ada: {email: not-an-address}\n",
		"identities:\n  ada: {email: \"Ada <ada@example.com>\"}\n",
		// One address is one person: with the e-mail lookup on, the Slack
		// user of carol@example.com decided as either identity, changing
		// with each refresh.
		"identities:\n  carol: {email: carol@example.com}\n  carol_admin: {email: Carol@Example.com}\n",
		"identities:\n  ada: {email: ada@example.com, slack: {team: T01, user: U01}}\n  bob: {email: ada@example.com}\n",
	} {
		_, err := Parse("x", []byte(bad))
		assert.ErrorIs(t, err, ErrConfig, bad)
	}
}
