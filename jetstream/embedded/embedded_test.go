package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

// The shipped single-node config starts, and Interlock provisions on it.
func TestDeploySingleConfig(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf",
		DataDir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Provision(ctx))
}

func TestConfigFileErrors(t *testing.T) {
	_, err := embedded.Start(embedded.Config{ConfigFile: "no-such.conf"})
	require.ErrorIs(t, err, embedded.ErrConfig)
}
