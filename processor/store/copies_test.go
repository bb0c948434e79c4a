package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// TestDiskCopyPutBackOnlyWhenLatest: with records on disk, a record an
// answer replaced is put back from the latest copy in its run's trail, but
// only when no entry after that copy tells of a later write: one written
// by a coordinator that writes no copies (an older one, in a rolling
// upgrade), or one whose copy was not stored. Putting back the older copy
// then would open a decided interrupt again, to be decided twice; the run
// stays stopped instead, as it did before records on disk carried copies.
func TestDiskCopyPutBackOnlyWhenLatest(t *testing.T) {
	t.Parallel()
	for name, later := range map[string]func(t *testing.T, c *jetstream.Client, run string){
		"nothing after the copy": nil,
		"a write by a coordinator that writes no copies": func(t *testing.T, c *jetstream.Client, run string) {
			old := store.NewJetStream(c)
			rec, err := store.Update(context.Background(), old, run, func(r *subjects.Run) (*subjects.Run, error) {
				if r == nil {
					return nil, nil // its guess that the run is new: read, and asked again
				}
				next := *r
				next.Status = subjects.RunCompleted
				return &next, nil
			})
			require.NoError(t, err)
			require.NoError(t, old.Commit(context.Background(), store.Effects{Record: rec, Events: []store.Event{{
				Event: subjects.Event{Version: subjects.Version, Type: subjects.EventCompleted, RunID: run, Agent: "refunds",
					At: time.Now()}, Dedup: "done"}}}))
		},
		"a later write whose copy was not stored": func(t *testing.T, c *jetstream.Client, run string) {
			m, err := store.EventMsg(c.Namespace(), store.Event{Event: subjects.Event{Version: subjects.Version,
				Type: subjects.EventCompleted, RunID: run, Agent: "refunds", At: time.Now()}, Dedup: "done", Writes: 2})
			require.NoError(t, err)
			_, err = c.Publish(context.Background(), m.Subject, m.Data, m.MsgID, m.Header)
			require.NoError(t, err)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := jstest.Server(t)
			c := jstest.Client(t, srv)
			s := store.NewJetStream(c)
			s.UseRecordKey(sealKey, false, false)
			ctx := context.Background()
			rec, err := store.Update(ctx, s, "r1", func(*subjects.Run) (*subjects.Run, error) {
				return &subjects.Run{Version: subjects.Version, RunID: "r1", Agent: "refunds", Status: subjects.RunSuspended}, nil
			})
			require.NoError(t, err)
			require.NoError(t, s.Commit(ctx, transition("r1", rec.Writes, "suspended")))
			if later != nil {
				later(t, c, "r1")
			}
			// An answer the server stored over the record: no message id.
			nc, err := nats.Connect(srv.URL())
			require.NoError(t, err)
			defer nc.Close()
			require.NoError(t, nc.Publish("$KV."+c.BucketName(jetstream.RunsBucket)+".r1", []byte(`{"type":"io.nats.jetstream.api.v1.consumer_info_response"}`)))
			require.NoError(t, nc.Flush())
			require.Eventually(t, func() bool {
				_, _, err := store.NewJetStream(c).Run(ctx, "r1")
				return err != nil
			}, 10*time.Second, 10*time.Millisecond, "the answer is stored over the record")

			got, _, err := s.Run(ctx, "r1")
			if later == nil {
				require.NoError(t, err, "the latest copy is put back")
				require.Equal(t, subjects.RunSuspended, got.Status)
				require.Equal(t, uint64(1), got.Writes)
				return
			}
			require.ErrorIs(t, err, store.ErrForeignRecord, "an older copy than the last write is not put back")
		})
	}
}
