package processor

import (
	"context"
	"errors"
	"slices"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// Runs returns every run record, least recently updated first. It reads the
// whole runs bucket: an operator's tool, not a hot path.
func (cl *Client) Runs(ctx context.Context) ([]*subjects.Run, error) {
	keys, err := cl.c.RunKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*subjects.Run, 0, len(keys))
	for _, k := range keys {
		rec, err := cl.Run(ctx, k)
		if errors.Is(err, ErrRunNotFound) || errors.Is(err, jetstream.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b *subjects.Run) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	return out, nil
}
