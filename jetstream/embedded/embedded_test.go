package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

func TestMain(m *testing.M) {
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

// The shipped single-node config starts, admits no anonymous client, and
// Interlock provisions on it as admin.
func TestDeploySingleConfig(t *testing.T) {
	t.Parallel()
	jstest.SetPasswords(t)
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf",
		DataDir: t.TempDir(), Port: -1})
	require.NoError(t, err)
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = jetstream.Dial(ctx, jetstream.DialConfig{URL: srv.URL()}, jetstream.Config{})
	require.ErrorIs(t, err, jetstream.ErrPermission, "no anonymous access")
	c, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: jstest.As("admin", srv.URL())}, jetstream.Config{})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Provision(ctx))
}

// A listener that cannot bind (client, cluster or monitoring port in use)
// fails Start at once with ErrListen naming the cause, not after
// StartTimeout.
func TestListenErrors(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	for name, adjust := range map[string]func(*server.Options){
		"client": func(o *server.Options) { o.Port = port },
		"cluster": func(o *server.Options) {
			o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "c", "127.0.0.1", port
			o.Routes = []*url.URL{{Scheme: "nats-route", Host: taken.Addr().String()}}
		},
		"monitoring": func(o *server.Options) { o.HTTPHost, o.HTTPPort = "127.0.0.1", port },
	} {
		began := time.Now()
		_, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: -1, StartTimeout: time.Minute, Adjust: adjust})
		require.ErrorIs(t, err, embedded.ErrListen, name)
		assert.Contains(t, err.Error(), "address already in use", name)
		assert.Less(t, time.Since(began), 20*time.Second, "%s: reported at once, not after StartTimeout", name)
	}
}

func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	_, err := embedded.Start(embedded.Config{ConfigFile: "no-such.conf"})
	require.ErrorIs(t, err, embedded.ErrConfig)
}

// The shipped three-node configs form a cluster (on free ports) that admits
// no anonymous client, Interlock provisions R3 streams on it, and a later
// provisioning with fewer replicas lowers nothing.
func TestDeployClusterConfigs(t *testing.T) {
	t.Parallel()
	jstest.SetPasswords(t)
	servers := jstest.Cluster(t, 3, "../../deploy/nats/cluster/n1.conf", "../../deploy/nats/cluster/n2.conf",
		"../../deploy/nats/cluster/n3.conf")
	for i, s := range servers {
		require.Equal(t, fmt.Sprintf("interlock-n%d", i+1), s.Name(), "the config was loaded")
		opts, err := server.ProcessConfigFile(fmt.Sprintf("../../deploy/nats/cluster/n%d.conf", i+1))
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", opts.HTTPHost, "monitoring on loopback only")
		assert.Equal(t, 8222+i, opts.HTTPPort, "monitoring shipped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: jstest.URLs(servers)}, jetstream.Config{})
	require.ErrorIs(t, err, jetstream.ErrPermission, "no anonymous access")
	c := jstest.ClientURL(t, jstest.As("admin", jstest.URLs(servers)), jetstream.Config{Replicas: 3})
	subject, _ := c.Namespace().Resume("r1")
	_, err = c.Publish(ctx, subject, []byte("{}"), "", nil)
	require.NoError(t, err)

	// A provisioning with the default (one replica) raises nothing and
	// lowers nothing.
	one := jstest.ClientURL(t, jstest.As("admin", jstest.URLs(servers)), jetstream.Config{Replicas: 1})
	nc, err := nats.Connect(jstest.As("admin", jstest.URLs(servers)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	for _, name := range []string{one.StreamName(jetstream.StreamWork), one.StreamName(jetstream.StreamEvents),
		"KV_" + one.BucketName(jetstream.RunsBucket), "KV_" + one.BucketName(jetstream.PendingBucket)} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 3, st.CachedInfo().Config.Replicas, name)
	}

	// The monitoring listener answers: health (once the node has caught up
	// with the streams just created), and which node leads what.
	for _, s := range servers {
		require.NotEmpty(t, s.MonitorURL(), s.Name())
		require.Eventually(t, func() bool { return httpGet(t, s.MonitorURL()+"/healthz").StatusCode == http.StatusOK },
			20*time.Second, 20*time.Millisecond, s.Name())
		var jsz struct {
			Meta struct {
				Leader      string `json:"leader"`
				ClusterSize int    `json:"cluster_size"`
			} `json:"meta_cluster"`
			Streams int `json:"streams"`
		}
		resp := httpGet(t, s.MonitorURL()+"/jsz")
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&jsz))
		assert.NotEmpty(t, jsz.Meta.Leader, s.Name())
		assert.Equal(t, 3, jsz.Meta.ClusterSize, s.Name())
		assert.Positive(t, jsz.Streams, s.Name())
	}
}

func httpGet(t *testing.T, url string) *http.Response {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
