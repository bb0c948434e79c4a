package attack_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

	cookie := "attacker-chosen-session-id"
	sum := sha256.Sum256([]byte(cookie))
	key := "$KV.interlock_sessions." + hex.EncodeToString(sum[:])
	body, err := json.Marshal(map[string]string{"identity": "ada", "token": digest[len("sha256:"):]})
	require.NoError(t, err)
	carrier := "interlock.agui.billing.session"
	d.attacker("agent_billing").answer(t, carrier, carrier, body, key, false)
	admin := d.attacker("admin")
	require.Eventually(t, func() bool {
		_, err := admin.js.GetLastMsg("KV_interlock_sessions", key)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the answer is stored under the session's key")

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/me", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: "__Host-interlock_session", Value: cookie})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the billing agent's planted session authenticates as ada: %s", b)
}
