package jstest

import (
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := js.GetLastMsg(stream, to)
		if err == nil && string(m.Data) == string(body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer is not stored under %s: %v", to, err)
		}
		time.Sleep(10 * time.Millisecond) // polls the condition with a deadline
	}
}
