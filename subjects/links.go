package subjects

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// KindLinks carries the link service: a notifier asks the gateway, on
// <prefix>.links.mint (core NATS request/reply, stored nowhere), for the
// one-click decision links of one interrupt and one of its sinks. Only the
// notifier user may ask and only the gateway user may answer (deploy/nats/auth.conf).
const KindLinks Kind = "links"

// LinkMint is the subject of the link service's requests.
func (n Namespace) LinkMint() string { return n.join(KindLinks, "mint") }

// Codes of the link service's refusals (besides unknown_run,
// unknown_interrupt, already_decided, expired and not_allowed, which mean
// what they mean for a decision).
const (
	// CodeLinkNotRouted: the sink is not one the gateway sends anyone's
	// links to (its identities file lists the personal sinks of each
	// identity), so no link is made for it.
	CodeLinkNotRouted Code = "link_not_routed"
	// CodeLinksOff: the interrupt asked for no one-click links
	// (oneClickLinks: false); decide it in the inbox or with the CLI.
	CodeLinksOff Code = "links_off"
)

// LinkRequest asks the link service for the links of one interrupt, to be
// delivered through one sink.
type LinkRequest struct {
	Version     int    `json:"version"`
	RunID       string `json:"runId"`
	InterruptID string `json:"interruptId"`
	// Sink is the notifier's sink the links are for; the gateway, not the
	// notifier, knows whom it reaches.
	Sink string `json:"sink"`
}

// LinkReply is the link service's answer: the links made, or why none.
type LinkReply struct {
	Version int `json:"version"`
	// Links are one approve and one deny link per approver the sink
	// reaches who may decide the interrupt.
	Links []MintedLink `json:"links,omitempty"`
	// Code and Detail say why no link was made.
	Code   Code   `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// MintedLink is an approver's pair of link tokens; a link is the
// gateway's URL, "/l/" and the token.
type MintedLink struct {
	Approver  string    `json:"approver"`
	Approve   string    `json:"approve"`
	Deny      string    `json:"deny"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// DecodeLinkRequest decodes and checks a link request: known fields only,
// this version, run and sink valid tokens, the interrupt a valid id.
func DecodeLinkRequest(data []byte) (LinkRequest, error) {
	var r LinkRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, malformed("link request: %v", err)
	}
	if r.Version != Version {
		return r, &ProtocolError{Code: CodeUnsupportedVersion, err: ErrUnsupportedVersion,
			Detail: fmt.Sprintf("link request version %d; this build speaks %d", r.Version, Version)}
	}
	for _, f := range []struct{ what, v string }{{"run id", r.RunID}, {"sink", r.Sink}} {
		if err := ValidateToken(f.what, f.v); err != nil {
			return r, malformedBy(err)
		}
	}
	if err := validateID("interruptId", r.InterruptID); err != nil {
		return r, err
	}
	return r, nil
}
