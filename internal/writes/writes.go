// Package writes counts what a scenario writes to JetStream: the messages
// every stream on a server stored (from each stream's last sequence before
// and after), and their bytes (subject, headers and body of each message
// published on a stream's subjects, seen by a tap subscription). It is how
// `interlock bench` puts Interlock's writes per cycle beside the floor's.
package writes

import (
	"context"
	"maps"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Totals are what the server's streams took in.
type Totals struct {
	// Msgs is the number of messages stored, summed over the streams.
	Msgs uint64
	// Bytes is the size of the messages published on the streams'
	// subjects: subject, encoded headers and body.
	Bytes uint64
	// Streams splits Bytes by stream (a bucket's stream is KV_<bucket>).
	Streams map[string]uint64
}

// Tap counts the writes to every stream on one server from Start to Stop.
type Tap struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	filters []filter
	before  map[string]uint64
	// marker is the subject Stop publishes on: the tap has counted
	// everything published before it once it sees it.
	marker string
	seen   chan struct{}

	mu      sync.Mutex
	bytes   uint64
	streams map[string]uint64
}

// filter is one of a stream's subjects, split into tokens.
type filter struct {
	stream string
	tokens []string
}

// Start reads every stream's last sequence and starts counting.
func Start(ctx context.Context, url string) (*Tap, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	t := &Tap{nc: nc, js: js, marker: nc.NewInbox(), seen: make(chan struct{}), streams: map[string]uint64{}}
	if t.before, t.filters, err = t.lastSeqs(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	// Only the streams' subjects (and the marker): what the tap costs the
	// process it measures stays small beside the traffic it counts.
	count := func(m *nats.Msg) {
		if m.Subject == t.marker {
			close(t.seen)
			return
		}
		// A consumer's delivery comes with the stored message's subject
		// (and an ack subject to reply to): it is a read, not a write.
		if strings.HasPrefix(m.Reply, "$JS.ACK.") {
			return
		}
		stream := t.stream(m.Subject)
		if stream == "" {
			return
		}
		n := uint64(len(m.Subject) + len(m.Data))
		if len(m.Header) > 0 {
			n += headerLen(m.Header)
		}
		t.mu.Lock()
		t.bytes += n
		t.streams[stream] += n
		t.mu.Unlock()
	}
	subjects := map[string]bool{t.marker: true}
	for _, f := range t.filters {
		subjects[strings.Join(f.tokens, ".")] = true
	}
	for s := range subjects {
		if _, err = nc.Subscribe(s, count); err != nil {
			break
		}
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return t, nil
}

// lastSeqs reads each stream's last sequence, and the subjects of all.
func (t *Tap) lastSeqs(ctx context.Context) (map[string]uint64, []filter, error) {
	out := map[string]uint64{}
	var filters []filter
	lister := t.js.ListStreams(ctx)
	for info := range lister.Info() {
		out[info.Config.Name] = info.State.LastSeq
		for _, s := range info.Config.Subjects {
			filters = append(filters, filter{stream: info.Config.Name, tokens: strings.Split(s, ".")})
		}
	}
	return out, filters, lister.Err()
}

// Stop ends the count and returns it: everything published before Stop
// is counted.
func (t *Tap) Stop(ctx context.Context) (Totals, error) {
	defer t.nc.Close()
	if err := t.nc.Publish(t.marker, nil); err != nil {
		return Totals{}, err
	}
	select {
	case <-t.seen:
	case <-ctx.Done():
		return Totals{}, ctx.Err()
	}
	after, _, err := t.lastSeqs(ctx)
	if err != nil {
		return Totals{}, err
	}
	var tot Totals
	for name, seq := range after {
		tot.Msgs += seq - t.before[name]
	}
	t.mu.Lock()
	tot.Bytes = t.bytes
	tot.Streams = maps.Clone(t.streams)
	t.mu.Unlock()
	return tot, nil
}

// stream is the stream whose subjects take subject, "" if none.
func (t *Tap) stream(subject string) string {
	toks := strings.Split(subject, ".")
	for _, f := range t.filters {
		if match(f.tokens, toks) {
			return f.stream
		}
	}
	return ""
}

// match reports whether the tokens of a subject match a filter's (with
// "*" for one token and a final ">" for one or more).
func match(filter, subject []string) bool {
	for i, f := range filter {
		if f == ">" {
			return len(subject) > i
		}
		if i >= len(subject) || (f != "*" && f != subject[i]) {
			return false
		}
	}
	return len(filter) == len(subject)
}

// headerLen is the size of h as encoded on the wire.
func headerLen(h nats.Header) uint64 {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return uint64(n)
}
