package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/approvers"
)

func TestTokenCommand(t *testing.T) {
	t.Parallel()
	r := cli(t, "token", "--json")
	require.Equal(t, 0, r.code, r.err)
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.out), &out))
	assert.Equal(t, approvers.Digest(out["token"]), out["digest"])
	dir, err := approvers.Parse("x", []byte("identities:\n  ada: {tokens: [\""+out["digest"]+"\"]}\n"))
	require.NoError(t, err)
	id, ok := dir.Authenticate(out["token"])
	assert.True(t, ok)
	assert.Equal(t, "ada", id.Name)
	assert.NotEqual(t, out["token"], cli(t, "token", "--json").out, "fresh every time")
}
