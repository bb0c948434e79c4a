package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/interlockhq/interlock/jetstream/jstest"
)

// TestServeConcurrentStartCluster starts the shipped three-node configs as
// three separate nats-server processes and, at the same moment, three
// `interlock serve --replicas 3` and an `interlock provision --replicas 3`
// (each its own command with its own connection, in this process): every
// serve comes up and the provision succeeds, without a restart.
func TestServeConcurrentStartCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	jstest.SetPasswords(t)
	nodes := jstest.ProcessCluster(t, 3, "../../deploy/nats/cluster/n1.conf", "../../deploy/nats/cluster/n2.conf",
		"../../deploy/nats/cluster/n3.conf")
	urls := jstest.NodeURLs(nodes)
	t.Setenv("NATS_USER", "coordinator")
	t.Setenv("NATS_PASSWORD", jstest.Password("coordinator"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const serves = 3
	logs := make([]*syncbuf.Buffer, serves)
	codes := make(chan int, serves)
	start := make(chan struct{})
	for i := range serves {
		logs[i] = &syncbuf.Buffer{}
		go func() {
			<-start
			codes <- run(ctx, []string{"serve", "--nats-url", urls, "--replicas", "3", "--log-level", "info"}, &bytes.Buffer{}, logs[i])
		}()
	}
	var prov result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		prov = cli(t, "provision", "--nats-url", urls, "--replicas", "3", "--agent", "refunds")
	}()
	close(start)
	wg.Wait()
	require.Zero(t, prov.code, "provision: %s", prov.err)
	assert.Contains(t, prov.out, "replicas at least 3")
	require.Eventually(t, func() bool {
		for _, l := range logs {
			if !strings.Contains(l.String(), "coordinator running") {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every serve comes up")
	require.Empty(t, codes, "no serve exited")
	cancel()
	for range serves {
		select {
		case code := <-codes:
			assert.Zero(t, code)
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not stop on cancel")
		}
	}
}
