// Package links makes and checks one-click decision links: signed (HMAC-
// SHA256), bound to one interrupt, one action and one approver, and
// expiring. Only the gateway holds the secret: it mints links (for a
// notifier that asks, after checking the request against what it holds
// itself), makes them usable once and never decides on a GET.
package links

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrTampered means a link's signature does not match its contents.
	ErrTampered = errors.New("decision link is not valid")
	// ErrExpired means a link is past its expiry.
	ErrExpired = errors.New("decision link has expired")
)

// Actions a link can carry.
const (
	Approve = "approve"
	Deny    = "deny"
)

// Link is what a decision link says.
type Link struct {
	Run       string `json:"r"`
	Interrupt string `json:"i"`
	Action    string `json:"a"`
	// Approver the link decides as; every link names one.
	Approver string `json:"p,omitempty"`
	// Sink is the notifier's sink the link was minted for (the mailbox it
	// goes to); every link names one, and decides only while that sink
	// carries its approver's links.
	Sink    string `json:"s,omitempty"`
	Expires int64  `json:"e"`
}

// Signer signs and verifies links with one secret.
type Signer struct{ secret []byte }

// NewSigner returns a signer; the secret must be at least 16 bytes.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < 16 {
		return nil, errors.New("link secret: use at least 16 bytes")
	}
	return &Signer{secret: secret}, nil
}

// domain separates the MACs of this scheme from any other use of the
// secret, and from links signed before only the gateway held it (a
// notifier then signed with the same secret, without this prefix), and
// (v3) from links that named no sink: those no longer verify, even where
// the secret was kept.
const domain = "interlock decision link v3\n"

func (s *Signer) mac(payload string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(domain))
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign returns the link's token: base64url(JSON) "." base64url(HMAC).
func (s *Signer) Sign(l Link) string {
	body, _ := json.Marshal(l)
	payload := base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + s.mac(payload)
}

// Verify checks a token and returns its link. Errors wrap ErrTampered or
// ErrExpired.
func (s *Signer) Verify(token string, now time.Time) (Link, error) {
	payload, sig, ok := strings.Cut(token, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.mac(payload))) {
		return Link{}, ErrTampered
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Link{}, ErrTampered
	}
	var l Link
	if err := json.Unmarshal(body, &l); err != nil || (l.Action != Approve && l.Action != Deny) || l.Approver == "" || l.Sink == "" {
		return Link{}, ErrTampered
	}
	if now.Unix() >= l.Expires {
		return l, fmt.Errorf("%w: it was good until %s", ErrExpired, time.Unix(l.Expires, 0).UTC().Format(time.RFC1123))
	}
	return l, nil
}

// ID is a short name for a token: its use is recorded under it, and the
// decision it makes has the id "link-<ID>", so a double click decides once.
func ID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:16])
}
