package jetstream_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// The message-id key is created once by the first provisioning and never
// replaced, so every coordinator of a deployment signs alike, before and
// after provisioning again; another deployment signs otherwise.
func TestIDSignerKeyIsCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := jstest.Server(t)
	first := jstest.Client(t, srv, jetstream.Config{})
	a, err := first.IDSigner(ctx)
	require.NoError(t, err)
	again := jstest.Client(t, srv, jetstream.Config{}) // provisions again
	b, err := again.IDSigner(ctx)
	require.NoError(t, err)
	id := "run-1:1:work"
	assert.Equal(t, a.Sign(id), b.Sign(id), "one key per deployment")
	assert.True(t, strings.HasPrefix(a.Sign(id), id+":"), "the id stays readable")
	assert.Len(t, strings.TrimPrefix(a.Sign(id), id+":"), 32)
	assert.NotEqual(t, a.Sign(id), a.Sign("run-1:2:work"))

	other, err := jstest.Client(t, jstest.Server(t), jetstream.Config{}).IDSigner(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, a.Sign(id), other.Sign(id), "another deployment's key")
}

// A client of a server nobody provisioned is told what to do.
func TestIDSignerNeedsProvisioning(t *testing.T) {
	t.Parallel()
	c, err := jetstream.Dial(context.Background(), jetstream.DialConfig{URL: jstest.Server(t).URL()}, jetstream.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.IDSigner(context.Background())
	require.ErrorIs(t, err, jetstream.ErrNotProvisioned)
}
