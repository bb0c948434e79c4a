package attack_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/gateway"
)

// The billing agent's credentials and ada's token digest (what the
// identities file holds, never the token) gave an inbox session as ada: an
// answer the server stored under a session's key was taken for a session
// the gateway wrote. Sessions now carry a message id and are read only as
// a client's publish. Found by the fifth review of the eighth session.
func TestAttackPlantedInboxSession(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	digest := approvers.Digest("ada-secret-token-never-shown") // "sha256:<hex>", as identities.yaml holds it
	dir, err := approvers.Parse("identities", []byte(fmt.Sprintf("identities:\n  ada: {groups: [finance], tokens: [%q]}\n", digest)))
	require.NoError(t, err)
	gw, err := gateway.New(d.ctx, d.client("gateway"), gateway.Config{Directory: dir, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

	body, err := json.Marshal(map[string]string{"identity": "ada", "token": digest[len("sha256:"):]})
	require.NoError(t, err)
	a := d.attacker("agent_billing")
	admin := d.attacker("admin")
	// The answer as a direct get sends it, and with the server's headers
	// hidden after a blank line in its carrier's header block (nats.go
	// stopped reading there: third_party/nats.go).
	for _, hidden := range []bool{false, true} {
		cookie := fmt.Sprintf("attacker-chosen-session-id-%v", hidden)
		sum := sha256.Sum256([]byte(cookie))
		key := "$KV.interlock_sessions." + hex.EncodeToString(sum[:])
		carrier := fmt.Sprintf("interlock.agui.billing.session%v", hidden)
		if hidden {
			d.rawCarrier("agent_billing", "INTERLOCK_AGUI", carrier, hiddenHeaders("sess-forged-1", true), body)
			require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_AGUI."+carrier, key, nil))
			require.NoError(t, a.nc.Flush())
		} else {
			a.answer(t, carrier, carrier, body, key, false)
		}
		require.Eventually(t, func() bool {
			m, err := admin.js.GetLastMsg("KV_interlock_sessions", key)
			return err == nil && string(m.Data) == string(body)
		}, 10*time.Second, 20*time.Millisecond, "the answer is stored under the session's key")

		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/me", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: "__Host-interlock_session", Value: cookie})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the billing agent's planted session authenticates as ada (hidden %v): %s", hidden, b)
	}
}

// Answers stored under the notifier's delivery keys of a run's next
// suspension (<sink>.<run>.<pass>, computable from the run's id) read as
// deliveries made: the notifier counted the real suspension a duplicate
// and told no sink. Bob, an approver, needs only his read of the trail.
// Delivery marks are read only as a client's publish now. Found by the
// fifth review of the eighth session.
func TestAttackBobSuppressesNextPassNotification(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	rec := startNotifier(t, d) // provisions the deliveries bucket
	d.suspend(d.client("agent"), "run-1", "ada")
	bob := d.attacker("bob")
	admin := d.attacker("admin")
	for _, sink := range []string{"audit-log", "bus"} {
		key := "$KV.interlock_deliveries." + sink + ".run-2.0"
		require.NoError(t, bob.nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_EVENTS.interlock.events.run-1.>",
			key, []byte(`{"no_hdr":true}`)))
		require.NoError(t, bob.nc.Flush())
		require.Eventually(t, func() bool {
			_, err := admin.js.GetLastMsg("KV_interlock_deliveries", key)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "the answer is stored under %s", key)
	}
	d.suspend(d.client("agent"), "run-2", "ada")
	for {
		m, err := rec.bus.NextMsg(10 * time.Second)
		require.NoError(t, err, "run-2's suspension is notified on the bus sink")
		if strings.Contains(string(m.Data), "run-2") {
			return
		}
	}
}
