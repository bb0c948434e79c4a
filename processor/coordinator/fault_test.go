package coordinator

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// step is one input of a scenario: its delivery, built when it is due, and
// the handler it goes to.
type step struct {
	msg    func(e *env) *jetstream.Delivery
	handle func(co *Coordinator) jetstream.Handler
}

func outcomeStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleOutcome }}
}

func decisionStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleDecision }}
}

func timerStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleTimer }}
}

// lifecycle is a run through every input kind: a suspension on two
// interrupts, a decision on one, the other's expiry (which replays), and
// the replay's completion.
var lifecycle = []step{
	outcomeStep(func(e *env) *jetstream.Delivery { return e.suspension("r1", 0, expiring, open) }),
	decisionStep(func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "open", ""), "") }),
	timerStep(func(e *env) *jetstream.Delivery {
		e.now = deadline
		return e.timer("r1", "expiring", subjects.TimerExpire)
	}),
	outcomeStep(func(e *env) *jetstream.Delivery { return e.completion("r1", 1) }),
}

// refusal is a suspension refused for the record's size: the run fails.
var refusal = []step{
	outcomeStep(func(e *env) *jetstream.Delivery {
		e.st.SetMaxRecord(8 << 10)
		return e.suspension("r1", 0, open)
	}),
}

// play runs steps on e, each delivered again while the coordinator
// abandons it (a redelivery after a crash), and, with twice, once more
// after it was handled (an ack that was lost). It returns each step's last
// answer.
func play(t *testing.T, e *env, steps []step, twice bool) []error {
	t.Helper()
	var out []error
	for _, s := range steps {
		m := s.msg(e)
		err := handleUntilDone(t, s.handle(e.co), m)
		if twice {
			assert.Equal(t, err, s.handle(e.co)(ctx(t), again(m)), "handled again")
		}
		out = append(out, err)
	}
	return out
}

// TestFaultPointsConverge abandons the message at every named fault point
// the coordinator has, then delivers it again, as the server does after a
// crash: what the coordinator leaves behind is what it leaves without the
// crash, nothing missing and nothing twice.
func TestFaultPointsConverge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		point string
		steps []step
	}{
		{"outcome-start", lifecycle},
		{"outcome-after-record", lifecycle},
		{"outcome-after-index", lifecycle},
		{"outcome-refused-after-record", refusal},
		{"decision-after-record", lifecycle},
		{"decision-after-work", lifecycle},
		{"timer-after-record", lifecycle},
	}
	for _, tc := range tests {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			clean := newEnv(t, Config{})
			want := play(t, clean, tc.steps, false)

			hook, fired := fault.Once(tc.point)
			e := newEnv(t, Config{}).withFault(hook)
			got := play(t, e, tc.steps, false)
			select {
			case <-fired:
			default:
				t.Fatalf("fault point %s never reached", tc.point)
			}
			assert.Equal(t, 1, e.nats.closed, "the connection dropped once")
			assert.Equal(t, errorKinds(want), errorKinds(got))
			assert.Equal(t, clean.state("r1"), e.state("r1"))
		})
	}
}

// TestRedeliveredAfterAck delivers every input again after it was handled
// (the ack lost): nothing changes the second time.
func TestRedeliveredAfterAck(t *testing.T) {
	t.Parallel()
	for name, steps := range map[string][]step{"lifecycle": lifecycle, "refusal": refusal} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clean := newEnv(t, Config{})
			play(t, clean, steps, false)
			e := newEnv(t, Config{})
			play(t, e, steps, true)
			assert.Equal(t, clean.state("r1"), e.state("r1"))
		})
	}
}

// TestFaultWhileWaiting: the fault point of a decision that waits for its
// suspension drops the connection and leaves the decision unacked.
func TestFaultWhileWaiting(t *testing.T) {
	t.Parallel()
	hook, fired := fault.Once("decision-wait")
	e := newEnv(t, Config{}).withFault(hook)
	e.suspension("r1", 0, open)
	err := e.co.handleDecision(ctx(t), e.decision("r1", "", resolve("d1", "open", ""), ""))
	<-fired
	assert.Equal(t, 1, e.nats.closed)
	require.ErrorIs(t, err, errAbandoned, "abandoned, as at every fault point")
	assert.Empty(t, e.events("r1"))
}

// errorKinds names how each answer ends its message.
func errorKinds(errs []error) []string {
	var out []string
	for _, err := range errs {
		switch _, retry := jetstream.RetryDelay(err); {
		case err == nil:
			out = append(out, "ack")
		case retry:
			out = append(out, "retry")
		case jetstream.DeadLettered(err):
			out = append(out, "dead-letter")
		case errors.Is(err, errAbandoned):
			out = append(out, "abandoned")
		default:
			out = append(out, "error: "+err.Error())
		}
	}
	return out
}
