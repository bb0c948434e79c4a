package notifier

import (
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// parsedMail is a received message split into its headers and the decoded
// parts of its multipart/alternative body.
type parsedMail struct {
	header   mail.Header
	boundary string
	parts    []mailPart
}

type mailPart struct {
	contentType string
	body        string
}

func parseMail(t *testing.T, raw string) parsedMail {
	t.Helper()
	m, err := mail.ReadMessage(strings.NewReader(raw))
	require.NoError(t, err)
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/alternative", mt)
	out := parsedMail{header: m.Header, boundary: params["boundary"]}
	r := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := r.NextPart() // decodes quoted-printable
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(p)
		require.NoError(t, err)
		out.parts = append(out.parts, mailPart{contentType: p.Header.Get("Content-Type"), body: string(b)})
	}
	return out
}

func (m parsedMail) text() string { return m.parts[0].body }
func (m parsedMail) html() string { return m.parts[1].body }

func (mb *mailbox) envelopeFroms() []string {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return append([]string(nil), mb.froms...)
}

// A display name in from (as deploy/notifier.yaml ships it) stays in the
// From: header; the envelope sender is the bare address, which a strict
// server (RFC 5321) requires.
func TestEmailEnvelopeSenderIsBare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	n := e.start(fmt.Sprintf(`
sinks:
  mail:
    type: email
    smtp: {host: %s, port: %s}
    from: Interlock <interlock@example.test>
    to: [Ada Lovelace <ada@example.test>, bo@example.test]
routes:
  - {match: "true", sinks: [mail]}
`+fastRetry, host, port), nil)
	e.suspend("refunds")
	require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"interlock@example.test"}, mb.envelopeFroms())
	m := parseMail(t, mb.got()[0])
	assert.Equal(t, `"Interlock" <interlock@example.test>`, m.header.Get("From"))
	assert.Equal(t, `"Ada Lovelace" <ada@example.test>, <bo@example.test>`, m.header.Get("To"))
	assert.Zero(t, n.Count("mail", OutcomeDeadLettered))
}

func TestEmailAddressesAreChecked(t *testing.T) {
	t.Parallel()
	for want, yaml := range map[string]string{
		`x.yaml:5: sink "mail": from "Interlock <interlock@" is not an e-mail address`: "from: 'Interlock <interlock@'\n    to: [a@example.test]",
		`x.yaml:6: sink "mail": to "not an address" is not an e-mail address`:          "from: a@example.test\n    to: [a@example.test, 'not an address']",
	} {
		_, err := ParseConfig("x.yaml", []byte("sinks:\n  mail:\n    type: email\n    smtp: {host: h}\n    "+yaml+"\nroutes: []\n"))
		assert.ErrorIs(t, err, ErrConfig, want)
		assert.ErrorContains(t, err, want)
	}
}

// A question that contains a MIME boundary cannot end the message and
// substitute a part of its own: each message has a random boundary.
func TestEmailHostileQuestionCannotForgeAPart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mb := newMailbox(t, false, false)
	host, port, _ := net.SplitHostPort(mb.addr)
	e.start(fmt.Sprintf(`
sinks:
  mail:
    type: email
    smtp: {host: %s, port: %s}
    from: interlock@example.test
    to: [ada@example.test]
routes:
  - {match: "true", sinks: [mail]}
`+fastRetry, host, port), nil)
	const evil = `<a href="https://evil.example/">Approve here</a>`
	hostile := "Refund?\r\n--interlock-alternative-boundary\r\nContent-Type: text/html\r\n\r\n" + evil +
		"\r\n--interlock-alternative-boundary--\r\n"
	e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: "confirmation", Message: hostile})
	e.suspend("refunds", subjects.Interrupt{ID: "int-1", Reason: "confirmation", Message: hostile})
	require.Eventually(t, func() bool { return len(mb.got()) == 2 }, 15*time.Second, 10*time.Millisecond)
	var boundaries []string
	for _, raw := range mb.got() {
		m := parseMail(t, raw)
		boundaries = append(boundaries, m.boundary)
		require.Len(t, m.parts, 2, "a plain-text and an HTML part, nothing else")
		assert.True(t, strings.HasPrefix(m.parts[0].contentType, "text/plain"))
		assert.True(t, strings.HasPrefix(m.parts[1].contentType, "text/html"))
		assert.Contains(t, m.text(), "--interlock-alternative-boundary", "the question is shown as it was asked")
		assert.NotContains(t, m.html(), evil, "the attacker's markup is escaped")
		assert.Contains(t, m.html(), "&lt;a href=")
	}
	assert.NotEqual(t, boundaries[0], boundaries[1], "a new boundary for each message")
}
