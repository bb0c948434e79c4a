package approvers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDirectory(t *testing.T) {
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
	d, err := Load("../../deploy/identities.yaml")
	require.NoError(t, err)
	assert.Equal(t, []string{"finance"}, d.Groups("ada"))
}
