package attack_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/chat/slack"
)

// The gateway reads the notifier's deliveries bucket, where the Slack sink
// lists the messages it posted, to update them once their question is
// decided; it may not write there (it would forge the notifier's delivery
// records or point the updates at other messages).
func TestAttackGatewayWritesDeliveries(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	admin := d.provisioner()
	deliveries, err := admin.Bucket(d.ctx, "deliveries", "test", 0)
	require.NoError(t, err)
	key := slack.MessagesKey("run-1", "ask")
	require.NoError(t, deliveries.Put(d.ctx, key, []byte(`[{"channel":"C1","ts":"1.1"}]`)))

	gw := d.client("gateway")
	b, err := gw.OpenBucket(d.ctx, "deliveries")
	require.NoError(t, err, "the gateway opens the deliveries bucket")
	got, err := b.Get(d.ctx, key)
	require.NoError(t, err, "and reads it")
	require.JSONEq(t, `[{"channel":"C1","ts":"1.1"}]`, string(got))

	a := d.attacker("gateway")
	require.NoError(t, a.nc.Publish("$KV.interlock_deliveries."+key, []byte(`[{"channel":"C9","ts":"9.9"}]`)))
	a.refused(t, "$KV.interlock_deliveries")
	_, err = a.js.Publish("$KV.interlock_deliveries.other", []byte("x"), nats.AckWait(2*time.Second))
	require.Error(t, err)
	got, err = b.Get(d.ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, `[{"channel":"C1","ts":"1.1"}]`, string(got), "nothing changed")
}
