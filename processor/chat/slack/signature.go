package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Request headers Slack signs its requests with.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
)

// MaxSkew is how far a request's timestamp may be from now: Slack's five
// minutes. A request replayed inside it verifies; its receiver must
// remember what it has handled (the gateway marks each signature).
const MaxSkew = 5 * time.Minute

var (
	// ErrSignature: the signature is missing or does not match the body.
	ErrSignature = errors.New("slack request signature does not match")
	// ErrStale: the timestamp is missing, not a number, or outside MaxSkew.
	ErrStale = errors.New("slack request timestamp is outside the five-minute window")
)

// Sign returns the X-Slack-Signature of body sent at timestamp (Unix
// seconds): "v0=" and the hex HMAC-SHA256, keyed with the app's signing
// secret, of "v0:<timestamp>:<body>".
func Sign(secret []byte, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v0:" + strconv.FormatInt(timestamp, 10) + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a request Slack signed: the timestamp is within MaxSkew of
// now (ErrStale), then the signature matches the raw body, compared in
// constant time (ErrSignature). Nothing of the body is parsed.
func Verify(secret []byte, timestampHeader, signatureHeader string, body []byte, now time.Time) error {
	ts, err := strconv.ParseInt(timestampHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrStale, HeaderTimestamp, timestampHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("%w: it is %s away from now", ErrStale, d.Round(time.Second))
	}
	if signatureHeader == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, HeaderSignature)
	}
	if !hmac.Equal([]byte(Sign(secret, ts, body)), []byte(signatureHeader)) {
		return fmt.Errorf("%w: the body was not signed with the app's signing secret", ErrSignature)
	}
	return nil
}
