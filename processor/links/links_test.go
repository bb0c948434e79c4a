package links

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSignAndVerify(t *testing.T) {
	s, err := NewSigner([]byte("0123456789abcdef"))
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	l := Link{Run: "r1", Interrupt: "int-1", Action: Approve, Approver: "ada", Sink: "ada-mail", Expires: now.Add(time.Hour).Unix()}
	tok := s.Sign(l)
	got, err := s.Verify(tok, now)
	require.NoError(t, err)
	assert.Equal(t, l, got)

	_, err = s.Verify(tok, now.Add(2*time.Hour))
	assert.ErrorIs(t, err, ErrExpired)
	// Flip the action inside the payload: the signature no longer fits.
	other := s.Sign(Link{Run: "r1", Interrupt: "int-1", Action: Deny, Approver: "ada", Sink: "ada-mail", Expires: l.Expires})
	forged := strings.Split(other, ".")[0] + "." + strings.Split(tok, ".")[1]
	_, err = s.Verify(forged, now)
	assert.ErrorIs(t, err, ErrTampered)
	for _, bad := range []string{"", "nodot", tok + "x", "x" + tok} {
		_, err = s.Verify(bad, now)
		assert.ErrorIs(t, err, ErrTampered, bad)
	}
	s2, _ := NewSigner([]byte("another-secret-16"))
	_, err = s2.Verify(tok, now)
	assert.ErrorIs(t, err, ErrTampered)
	_, err = NewSigner([]byte("short"))
	assert.Error(t, err)
	assert.Len(t, ID(tok), 32)
}

// A link signed the way notifiers signed them, with the same secret but
// without the scheme's domain, does not verify: keeping the old secret on
// the gateway does not keep the notifier's power to mint. Nor does a link
// that names no approver, or no sink.
func TestOldNotifierLinksRefused(t *testing.T) {
	secret := []byte("0123456789abcdef")
	s, err := NewSigner(secret)
	require.NoError(t, err)
	now := time.Unix(1_800_000_000, 0)
	body, _ := json.Marshal(Link{Run: "r1", Interrupt: "int-1", Action: Approve, Approver: "ada", Expires: now.Add(time.Hour).Unix()})
	payload := base64.RawURLEncoding.EncodeToString(body)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(payload))
	old := payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	_, err = s.Verify(old, now)
	assert.ErrorIs(t, err, ErrTampered)

	anyone := s.Sign(Link{Run: "r1", Interrupt: "int-1", Action: Approve, Sink: "ada-mail", Expires: now.Add(time.Hour).Unix()})
	_, err = s.Verify(anyone, now)
	assert.ErrorIs(t, err, ErrTampered)

	// Nor one that names no sink (v2, before links named theirs), signed
	// the way the gateway signed them then.
	body, _ = json.Marshal(Link{Run: "r1", Interrupt: "int-1", Action: Approve, Approver: "ada", Expires: now.Add(time.Hour).Unix()})
	payload = base64.RawURLEncoding.EncodeToString(body)
	m = hmac.New(sha256.New, secret)
	m.Write([]byte("interlock decision link v2\n"))
	m.Write([]byte(payload))
	_, err = s.Verify(payload+"."+base64.RawURLEncoding.EncodeToString(m.Sum(nil)), now)
	assert.ErrorIs(t, err, ErrTampered)
	nowhere := s.Sign(Link{Run: "r1", Interrupt: "int-1", Action: Approve, Approver: "ada", Expires: now.Add(time.Hour).Unix()})
	_, err = s.Verify(nowhere, now)
	assert.ErrorIs(t, err, ErrTampered)
}
