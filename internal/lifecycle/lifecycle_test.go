package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWaitForTheWork: the work finishing while ctx lasts ends Wait without
// cancelling anything.
func TestWaitForTheWork(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() { close(done) })
	cancelled := false
	require.NoError(t, Wait(context.Background(), done, func() { cancelled = true }))
	assert.False(t, cancelled)
}

// TestWaitCancelsAtTheDeadline: ctx ending first cancels the work once and
// returns ctx's cause, at once; work that already finished is not
// cancelled even under an ended ctx.
func TestWaitCancelsAtTheDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	calls := 0
	err := Wait(ctx, make(chan struct{}), func() { calls++ })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, calls)

	done := make(chan struct{})
	close(done)
	require.NoError(t, Wait(ctx, done, func() { t.Fatal("finished work cancelled") }))

	cause := errors.New("shutting down")
	cctx, ccancel := context.WithCancelCause(context.Background())
	ccancel(cause)
	assert.ErrorIs(t, Wait(cctx, make(chan struct{}), func() {}), cause)
}

func TestStopped(t *testing.T) {
	t.Parallel()
	var s Stopped
	c := s.C()
	select {
	case <-c:
		t.Fatal("closed before Close")
	default:
	}
	s.Close()
	s.Close()
	<-c
	<-s.C()
}
