package main

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestProvisionPendingStorage: `interlock provision` keeps the pending
// index on disk on a single server by default (a restart removes a memory
// bucket there, and under per-role permissions only provision creates it
// again), in memory when told; a bad value is a usage error.
func TestProvisionPendingStorage(t *testing.T) {
	t.Parallel()
	storage := func(url, prefix string) string {
		nc, err := nats.Connect(url)
		require.NoError(t, err)
		defer nc.Close()
		js, err := natsjs.New(nc)
		require.NoError(t, err)
		st, err := js.Stream(context.Background(), "KV_"+prefix+"_pending")
		require.NoError(t, err)
		return st.CachedInfo().Config.Storage.String()
	}
	srv := jstest.Server(t)
	require.Equal(t, 0, cli(t, "provision", "--nats-url", srv.URL()).code)
	assert.Equal(t, "File", storage(srv.URL(), "interlock"), "auto on a single server")

	mem := jstest.Server(t)
	require.Equal(t, 0, cli(t, "provision", "--nats-url", mem.URL(), "--pending-storage", "memory").code)
	assert.Equal(t, "Memory", storage(mem.URL(), "interlock"))

	bad := cli(t, "provision", "--nats-url", mem.URL(), "--pending-storage", "tape")
	assert.Equal(t, 2, bad.code)
	assert.Contains(t, bad.err, `--pending-storage "tape" is not memory, file or auto`)
}

// TestRecordsStorageFlag: --records-storage is memory or file, and memory
// takes one replica. "auto", or memory with --replicas 3, is a usage
// error, in provision and in serve, before anything is written: records
// are kept in memory only where asked for, on one replica
// (jetstream.ErrReplicatedMemoryRecords).
func TestRecordsStorageFlag(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	for _, cmd := range []string{"provision", "serve"} {
		r := cli(t, cmd, "--nats-url", srv.URL(), "--records-storage", "auto")
		assert.Equal(t, exitUsage, r.code, cmd)
		assert.Contains(t, r.err, "--records-storage is memory or file, not auto", cmd)
		r = cli(t, cmd, "--nats-url", srv.URL(), "--records-storage", "tape")
		assert.Equal(t, exitUsage, r.code, cmd)
		assert.Contains(t, r.err, `--records-storage "tape" is not memory or file`, cmd)
		r = cli(t, cmd, "--nats-url", srv.URL(), "--records-storage", "memory", "--replicas", "3")
		assert.Equal(t, exitUsage, r.code, cmd)
		assert.Contains(t, r.err, "--records-storage memory needs one replica, not --replicas 3", cmd)
	}
	assert.Empty(t, streamsOn(t, srv.URL()), "nothing provisioned")
}

// TestProvisionChecksBeforeWriting: an agent name that cannot be a subject
// token is a usage error found before provision writes anything (it used
// to be found after the streams, buckets and consumers were made).
func TestProvisionChecksBeforeWriting(t *testing.T) {
	t.Parallel()
	srv := jstest.Server(t)
	r := cli(t, "provision", "--nats-url", srv.URL(), "--agent", "re.funds")
	assert.Equal(t, 2, r.code, r.err)
	assert.Empty(t, streamsOn(t, srv.URL()), "nothing provisioned")
}

// streamsOn names the streams the server at url has.
func streamsOn(t *testing.T, url string) []string {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	names := js.StreamNames(context.Background())
	var made []string
	for n := range names.Name() {
		made = append(made, n)
	}
	require.NoError(t, names.Err())
	return made
}
