package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
