package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrForged: a button's value or a form's metadata was not signed by the
// gateway for what it names (its run, interrupt, action and channel).
var ErrForged = errors.New("slack card value not signed by the gateway")

// Seal signs what the gateway puts in the cards it draws: each button's
// value, bound to its run, interrupt, action and channel, and the
// metadata of the "Answer…" form, bound to the message it was opened
// from. Its key is derived from the app's signing secret, which only the
// gateway (and Slack) hold: the notifier, or anyone else who can post in
// the channel, cannot make a value the gateway accepts.
type Seal struct{ key []byte }

// NewSeal derives the seal's key from the app's signing secret.
func NewSeal(signingSecret []byte) Seal {
	mac := hmac.New(sha256.New, signingSecret)
	mac.Write([]byte("interlock slack card seal v1"))
	return Seal{key: mac.Sum(nil)}
}

func (s Seal) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		// Length-prefixed, so no two lists of parts sign alike.
		fmt.Fprintf(m, "%d:%s;", len(p), p)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// Value is the value of the button action on ref's card in channel:
// "<run>/<mac>/<interrupt>".
func (s Seal) Value(ref Ref, action, channel string) string {
	return ref.Run + "/" + s.mac("button", ref.Run, ref.Interrupt, action, channel) + "/" + ref.Interrupt
}

// Open reads a clicked button's value: the interrupt it names, once its
// mac matches the action clicked and the channel the click came from
// (compared in constant time). A value that does not parse is
// ErrPayload; one that parses and does not match is ErrForged, with the
// reference it claims (for the audit trail).
func (s Seal) Open(value, action, channel string) (Ref, error) {
	run, rest, ok1 := strings.Cut(value, "/")
	mac, interrupt, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 {
		// A value of another form ("<run>/<interrupt>", unsigned) still
		// names what it claims, for the record.
		if r, err := ParseRef(value); err == nil {
			return r, fmt.Errorf("%w: the value %q carries no signature", ErrForged, value)
		}
		return Ref{}, fmt.Errorf("%w: value %q does not name a run and an interrupt", ErrPayload, value)
	}
	r := Ref{Run: run, Interrupt: interrupt}
	if err := r.validate(); err != nil {
		return Ref{}, err
	}
	if !hmac.Equal([]byte(mac), []byte(s.mac("button", run, interrupt, action, channel))) {
		return r, fmt.Errorf("%w: the value does not match action %s in channel %s", ErrForged, action, channel)
	}
	return r, nil
}

// sealedRef is a form's private_metadata: the reference and its mac.
type sealedRef struct {
	Ref
	MAC string `json:"mac"`
}

// Metadata is ref (its message's channel and ts included) as the
// private_metadata of its "Answer…" form, signed.
func (s Seal) Metadata(ref Ref) string {
	out, _ := json.Marshal(sealedRef{Ref: ref, MAC: s.mac("form", ref.Run, ref.Interrupt, ref.Channel, ref.TS)})
	return string(out)
}

// OpenMetadata reads a submitted form's private_metadata, once its mac
// matches (ErrForged otherwise, with the reference it claims).
func (s Seal) OpenMetadata(md string) (Ref, error) {
	var r sealedRef
	if err := json.Unmarshal([]byte(md), &r); err != nil {
		return Ref{}, fmt.Errorf("%w: private_metadata is not a reference: %v", ErrPayload, err)
	}
	if err := r.Ref.validate(); err != nil {
		return Ref{}, err
	}
	if !hmac.Equal([]byte(r.MAC), []byte(s.mac("form", r.Run, r.Interrupt, r.Channel, r.TS))) {
		return r.Ref, fmt.Errorf("%w: the form's metadata does not match", ErrForged)
	}
	return r.Ref, nil
}
