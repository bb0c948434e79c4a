package jstest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Answer has the server store body on subject to, of stream, as a direct
// get's answer: what any user allowed one direct get can do, since
// nats-server sends a JetStream API answer to whatever reply subject a
// request names, with its own rights (docs/security.md, "Answers the
// server sends for you"). body is first published on carrier, a subject of
// carrierStream, with header h (a message id is added); bare asks for the
// answer without headers. It waits until to's last message in stream is
// the answer.
func Answer(t testing.TB, nc *nats.Conn, carrierStream, carrier string, h nats.Header, body []byte, stream, to string, bare bool) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: carrier, Data: body, Header: nats.Header{}}
	for k, v := range h {
		msg.Header[k] = v
	}
	msg.Header.Set(nats.MsgIdHdr, carrier)
	if _, err := js.PublishMsg(msg); err != nil {
		t.Fatalf("store the answer's carrier on %s: %v", carrier, err)
	}
	answer(t, nc, carrierStream, carrier, body, stream, to, bare)
}

// AnswerRaw is Answer with a carrier whose header block is hdr byte for
// byte (RawPublish), published as the user natsURL names.
func AnswerRaw(t testing.TB, nc *nats.Conn, natsURL, carrierStream, carrier, hdr string, body []byte, stream, to string) {
	t.Helper()
	RawPublish(t, natsURL, carrier, hdr, body)
	// The server has the publish once it answers the PING after it; the
	// stream stores it a moment later, and a direct get before that is
	// answered 404 (stored as such).
	stored(t, nc, carrierStream, carrier, body)
	answer(t, nc, carrierStream, carrier, body, stream, to, false)
}

// answer asks for a direct get of carrier's last message with reply
// subject to, and waits until to's last message in stream is body.
func answer(t testing.TB, nc *nats.Conn, carrierStream, carrier string, body []byte, stream, to string, bare bool) {
	t.Helper()
	var req []byte
	if bare {
		req = []byte(`{"no_hdr":true}`)
	}
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+carrierStream+"."+carrier, to, req); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	stored(t, nc, stream, to, body)
}

// stored waits until subject's last message in stream is body.
func stored(t testing.TB, nc *nats.Conn, stream, subject string, body []byte) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := js.GetLastMsg(stream, subject)
		if err == nil && string(m.Data) == string(body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q is not stored on %s: %v", body, subject, err)
		}
		time.Sleep(10 * time.Millisecond) // polls the condition with a deadline
	}
}

// RawPublish publishes on subject, as the user natsURL names (if any), a
// message whose header block is hdr byte for byte, over a plain protocol
// connection: what any holder of credentials can send, a header block
// nats.go would not encode (a blank line inside it, a bare LF) included.
// It returns once the server has answered a PING sent after it, and fails
// t on an -ERR.
func RawPublish(t testing.TB, natsURL, subject, hdr string, body []byte) {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	connect := map[string]any{"verbose": false, "pedantic": false, "headers": true, "protocol": 1}
	if u.User != nil {
		connect["user"] = u.User.Username()
		connect["pass"], _ = u.User.Password()
	}
	opts, _ := json.Marshal(connect)
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nHPUB %s %d %d\r\n%s%s\r\nPING\r\n", opts, subject, len(hdr),
		len(hdr)+len(body), hdr, body); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("publish %s: the server refused it: %s", subject, line)
		}
		if strings.HasPrefix(line, "PONG") {
			return
		}
	}
}
