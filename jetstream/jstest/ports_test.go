package jstest

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A restart whose port another socket holds for a moment starts once the
// port is free again; one held for good fails with ErrListen.
func TestSamePortWaitsForThePort(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := held.Addr().(*net.TCPAddr).Port
	released := time.AfterFunc(300*time.Millisecond, func() { held.Close() })
	defer released.Stop()
	var srv *embedded.Server
	err = samePort(restartWithin, func() (err error) {
		srv, err = embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: port})
		return err
	})
	require.NoError(t, err)
	srv.Shutdown()

	forGood, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer forGood.Close()
	err = samePort(time.Second, func() error {
		_, err := embedded.Start(embedded.Config{DataDir: t.TempDir(), Port: forGood.Addr().(*net.TCPAddr).Port})
		return err
	})
	assert.ErrorIs(t, err, embedded.ErrListen)
}

// A cluster start that lost a route port is made again; another error is
// not.
func TestOnNewPortsStartsAgainOnConflicts(t *testing.T) {
	t.Parallel()
	calls := 0
	onNewPorts(t, func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("node n1: %w", embedded.ErrListen)
		}
		return nil
	})
	assert.Equal(t, 3, calls)

	boom := errors.New("boom")
	stopped := 0
	err := startAll(3, func(i int) error {
		if i == 1 {
			return boom
		}
		return nil
	}, func(int) { stopped++ })
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, 3, stopped, "every node stopped")
}
