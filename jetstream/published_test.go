package jetstream

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/interlockhq/interlock/subjects"
)

func TestCheckPublished(t *testing.T) {
	t.Parallel()
	assert.NoError(t, CheckPublished(Header{HeaderMsgID: {"ada:d-1:abc"}, "traceparent": {"00-x"}}))
	for name, h := range map[string]Header{
		"no headers":           nil,
		"no message id":        {HeaderReplyTo: {"_INBOX.ada.x"}},
		"a direct get's":       {HeaderMsgID: {"x"}, "Nats-Stream": {"S"}, "Nats-Subject": {"a"}, "Nats-Sequence": {"1"}},
		"a batch's":            {HeaderMsgID: {"x"}, "Nats-Num-Pending": {"0"}},
		"any case of its name": {HeaderMsgID: {"x"}, "nats-time-stamp": {"2026-12-03T00:00:00Z"}},
		"last sequence alone":  {HeaderMsgID: {"x"}, "Nats-Last-Sequence": {"9"}},
	} {
		err := CheckPublished(h)
		assert.Error(t, err, name)
		assert.Equal(t, subjects.CodeNotAllowed, subjects.CodeOf(err), name)
		assert.Contains(t, err.Error(), "not a client's publish", name)
	}
}

func TestCheckFired(t *testing.T) {
	t.Parallel()
	assert.NoError(t, CheckFired(Header{HeaderScheduler: {"interlock.timers.at.run-1.t"}, "Nats-Schedule-Next": {"purge"}}))
	for name, h := range map[string]Header{
		"no headers (an answer asked for without them)": nil,
		"a client's publish":                            {HeaderMsgID: {"run-1:t"}},
		"a direct get's answer of a fired timer": {HeaderScheduler: {"interlock.timers.at.run-1.t"}, "Nats-Stream": {"S"},
			"Nats-Subject": {"interlock.timers.due.run-1"}, "Nats-Sequence": {"1"}},
	} {
		err := CheckFired(h)
		assert.Error(t, err, name)
		assert.Equal(t, subjects.CodeNotAllowed, subjects.CodeOf(err), name)
		assert.Contains(t, err.Error(), "not a timer the scheduler fired", name)
	}
}
