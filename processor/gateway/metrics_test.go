package gateway

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/approvers"
)

// A registry that refuses the gateway's metrics (the name taken by another
// metric) fails New instead of leaving them unexported.
func TestMetricsRegistrationRefused(t *testing.T) {
	t.Parallel()
	dir, err := approvers.Parse("test", []byte(fmt.Sprintf("identities:\n  ada: {tokens: [%q]}\n", approvers.Digest("ada-token"))))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "interlock_gateway_request_seconds", Help: "other"})))
	gw, err := New(context.Background(), jstest.Client(t, jstest.Server(t)), Config{Directory: dir, Logger: quiet, Registry: reg})
	if err == nil {
		gw.Close()
	}
	assert.Error(t, err)
}
