package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

func (g *Gateway) inbox(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", cspInbox)
	page, _ := web.ReadFile("web/inbox.html")
	_, _ = w.Write(page)
}

// stream sends the lifecycle and audit events the caller may read as
// server-sent events, so the inbox updates when interrupts arrive or are
// decided elsewhere: an auditor gets every event, anyone else the events of
// runs they may read.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, subjects.CodeUnavailable, "streaming unsupported")
		return
	}
	events := make(chan subjects.Event, 64)
	sub, err := g.nc.Subscribe(g.nc.Namespace().All(subjects.KindEvents), func(subject string, data []byte) {
		// Type and run from the subject the entry was published on.
		ev, err := subjects.StoredEvent(g.nc.Namespace(), subject, data)
		if err != nil {
			return
		}
		select {
		case events <- ev:
		default: // a slow client misses a refresh hint, not data: it re-reads the list
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "%v", err)
		return
	}
	defer sub.Unsubscribe()
	me := identityOf(r)
	// Runs found readable stay readable (interrupts are only ever added,
	// and escalations only add approvers), so one look-up per run, and
	// another when an event names an interrupt the record read lacked.
	readable := map[string]*subjects.Run{}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	flusher.Flush()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	// The credentials are checked again before each event sent and with
	// each keep-alive: a stream ends with its session (a logout, the
	// session's end) or its token's removal, as any new request would.
	valid := func() bool {
		id, err := g.Authenticate(r)
		return err == nil && id.Name == me.Name
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			if !valid() {
				return
			}
			fmt.Fprint(w, ": keep-alive\n\n")
		case ev := <-events:
			data, ok := g.viewEvent(r, me, ev, readable)
			if !ok {
				continue
			}
			if !valid() {
				return
			}
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
		}
		flusher.Flush()
	}
}

// viewEvent returns what p may see of the event ev, encoded, and whether
// p may see it at all: an auditor any event as it is, anyone else an event
// about a run they may read, as authz.View shows it to them. Runs found
// readable are remembered in readable with the record read.
func (g *Gateway) viewEvent(r *http.Request, p authz.Principal, ev subjects.Event, readable map[string]*subjects.Run) ([]byte, bool) {
	if p.Auditor {
		out, err := json.Marshal(ev)
		return out, err == nil
	}
	if subjects.ValidateToken("run id", ev.RunID) != nil || ev.RunID == subjects.NoRun {
		return nil, false
	}
	rec := readable[ev.RunID]
	if rec == nil || !knows(rec, ev) {
		var err error
		if rec, err = g.client.Run(r.Context(), ev.RunID); err != nil || !authz.MayReadRun(rec, p) {
			return nil, false
		}
		if len(readable) >= maxRemembered {
			clear(readable)
		}
		readable[ev.RunID] = rec
	}
	_, evs := authz.View(p, rec, []subjects.Event{ev})
	out, err := json.Marshal(evs[0])
	return out, err == nil
}

// knows reports whether rec has every interrupt ev names.
func knows(rec *subjects.Run, ev subjects.Event) bool {
	ids := slices.Clone(ev.InterruptIDs)
	if ev.Verdict != nil && ev.Verdict.InterruptID != "" {
		ids = append(ids, ev.Verdict.InterruptID)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(rec.Interrupts, func(st subjects.InterruptState) bool { return st.ID == id }) {
			return false
		}
	}
	return true
}

// maxRemembered bounds the runs one stream remembers as readable.
const maxRemembered = 10_000
