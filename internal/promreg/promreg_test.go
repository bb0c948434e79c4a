package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	reg := prometheus.NewRegistry()
	a, err := Register(reg, prometheus.NewCounter(opts))
	require.NoError(t, err)
	b, err := Register(reg, prometheus.NewCounter(opts))
	require.NoError(t, err)
	assert.Same(t, a, b, "the same metric is shared")

	_, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "other"}, []string{"l"}))
	assert.Error(t, err, "the name taken by another metric")

	c := prometheus.NewCounter(opts)
	got, err := Register[prometheus.Counter](nil, c)
	require.NoError(t, err)
	assert.Same(t, c, got)
}
