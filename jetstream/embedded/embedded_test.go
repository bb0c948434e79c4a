package embedded_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
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

// The shipped three-node configs form a cluster (on free ports), and
// Interlock provisions R3 streams on it.
func TestDeployClusterConfigs(t *testing.T) {
	servers := jstest.Cluster(t, 3, "../../deploy/nats/cluster/n1.conf", "../../deploy/nats/cluster/n2.conf",
		"../../deploy/nats/cluster/n3.conf")
	for i, s := range servers {
		require.Equal(t, fmt.Sprintf("interlock-n%d", i+1), s.Name(), "the config was loaded")
	}
	c := jstest.ClientURL(t, jstest.URLs(servers), jetstream.Config{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subject, _ := c.Namespace().Resume("r1")
	_, err := c.Publish(ctx, subject, []byte("{}"), "", nil)
	require.NoError(t, err)
}
