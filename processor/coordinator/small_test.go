package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// failingSuspensions is a store whose runs stream cannot be read.
type failingSuspensions struct{ store.Store }

var errStreamDown = errors.New("runs stream unavailable")

func (failingSuspensions) LastSuspension(context.Context, string) (uint64, error) {
	return 0, errStreamDown
}

// A decision for a run without a record asks whether its suspension is on
// the way; when that cannot be read the decision is retried, not rejected
// as unknown_run.
func TestSuspensionReadErrorRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.co.store = failingSuspensions{e.st}
	m := e.decision("r1", "", resolve("d1", "open", ""), "")
	require.ErrorIs(t, e.co.handleDecision(ctx(t), m), errStreamDown)
	assert.Empty(t, e.about("r1", m.Subject), "nothing audited")
}

// The timers input takes the due subjects from the subjects builder.
func TestInputsFilterDueTimers(t *testing.T) {
	t.Parallel()
	ns, err := subjects.New("acme.il")
	require.NoError(t, err)
	co := New(nil, Config{Store: newEnv(t, Config{}).st, NATS: nsNATS{&fakeNATS{}, ns}})
	for _, in := range co.inputs() {
		if in.stream == jetstream.StreamTimers {
			assert.Equal(t, []string{"acme.il.timers.due.>"}, in.filter)
			assert.Equal(t, []string{ns.TimersDue()}, in.filter)
		}
	}
}

type nsNATS struct {
	*fakeNATS
	ns subjects.Namespace
}

func (n nsNATS) Namespace() subjects.Namespace { return n.ns }

// The Via header is kept to 32 bytes in the audit trail, never cutting a
// character in two.
func TestViaCutOnACharacter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("r1", 0, open)
	m := e.decision("r1", "", resolve("d1", "open", ""), "")
	m.Header[jetstream.HeaderVia] = []string{strings.Repeat("a", 31) + "é-and-more"}
	require.NoError(t, e.co.handleDecision(ctx(t), m))
	via := e.verdictOf("r1", m).Via
	assert.True(t, utf8.ValidString(via), "%q", via)
	assert.Equal(t, strings.Repeat("a", 31), via)
}

// A registry that refuses the coordinator's metrics fails its start; two
// coordinators of one process share them.
func TestMetricsRegistration(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "interlock_runs_total",
			Help: "something else"}, []string{"other"})))
		e := newEnv(t, Config{Registry: reg})
		assert.Error(t, e.co.register(), "interlock_runs_total is another metric here")
	})
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		a, b := newEnv(t, Config{Registry: reg}), newEnv(t, Config{Registry: reg})
		require.NoError(t, a.co.register())
		require.NoError(t, b.co.register())
		a.suspend("r1", 0, open)
		b.suspend("r2", 0, open)
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "interlock_pass_outcomes_total" {
				assert.Equal(t, 2.0, f.GetMetric()[0].GetCounter().GetValue(), "both count into one metric")
				return
			}
		}
		t.Fatal("interlock_pass_outcomes_total not exported")
	})
}

// TestStopBeforeStart: Stop on a coordinator that never started returns at
// once, and Stopped is closed once it has, not before.
func TestStopBeforeStart(t *testing.T) {
	e := newEnv(t, Config{})
	select {
	case <-e.co.Stopped():
		t.Fatal("Stopped closed before Stop")
	default:
	}
	require.NoError(t, e.co.Stop(context.Background()))
	select {
	case <-e.co.Stopped():
	default:
		t.Fatal("Stopped not closed once Stop returned")
	}
	require.NoError(t, e.co.Stop(context.Background()), "a second Stop is harmless")
}
