package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStopAllOneDeadline: stopAll stops the parts in the reverse of their
// start, every one within the same context, and reports every error.
func TestStopAllOneDeadline(t *testing.T) {
	t.Parallel()
	var order []string
	var deadlines []time.Time
	errLate := errors.New("late")
	part := func(name string, err error) stopFunc {
		return func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			require.True(t, ok, "%s stops within a deadline", name)
			order = append(order, name)
			deadlines = append(deadlines, d)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := stopAll([]stopFunc{part("coordinator", nil), part("notifier", errLate), part("gateway", nil)})(ctx)
	require.ErrorIs(t, err, errLate)
	assert.Equal(t, []string{"gateway", "notifier", "coordinator"}, order)
	want, _ := ctx.Deadline()
	for _, d := range deadlines {
		assert.Equal(t, want, d, "one deadline for all")
	}
}
