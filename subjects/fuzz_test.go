package subjects_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/interlockhq/interlock/subjects"
)

// Every decoder either accepts a message that re-encodes and decodes to the
// same value, or refuses it with one of the package's errors; none panics.
func checkDecoded[T any](t *testing.T, data []byte, v T, err error, decode func([]byte) (T, error)) {
	if err != nil {
		if !errors.Is(err, subjects.ErrMalformed) && !errors.Is(err, subjects.ErrTooLarge) &&
			!errors.Is(err, subjects.ErrUnsupportedVersion) {
			t.Fatalf("unclassified error for %q: %v", data, err)
		}
		return
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q but cannot re-encode: %v", data, err)
	}
	if _, err := decode(again); err != nil {
		t.Fatalf("accepted %q but not its re-encoding %q: %v", data, again, err)
	}
}

func FuzzDecodeDecision(f *testing.F) {
	f.Add([]byte(`{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","payload":{"a":1}}`))
	f.Add([]byte(`{"version":1,"decisionId":"d","interruptId":"i","status":"cancelled","comment":"no"}`))
	f.Add([]byte(`{"version":1,"decisionId":"d","interruptId":"i","status":"resolved","payload":null}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := subjects.DecodeDecision(data)
		checkDecoded(t, data, d, err, subjects.DecodeDecision)
	})
}

func FuzzDecodeSuspension(f *testing.F) {
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"interrupts":[{"id":"i","reason":"tool_call"}]}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":2,"input":[1],"interrupts":[{"id":"i","reason":"x","expiresAt":"2026-01-01T00:00:00Z","approvers":["al"]}],"journal":{"/s#0":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := subjects.DecodeSuspension(data)
		checkDecoded(t, data, s, err, subjects.DecodeSuspension)
	})
}

func FuzzDecodeWork(f *testing.F) {
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":1,"decisions":[{"version":1,"decisionId":"d","interruptId":"i","status":"resolved"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := subjects.DecodeWork(data)
		checkDecoded(t, data, w, err, subjects.DecodeWork)
	})
}

func FuzzDecodeOutcomes(f *testing.F) {
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"result":{"ok":true}}`))
	f.Add([]byte(`{"version":1,"runId":"r","agent":"a","pass":0,"error":"boom"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := subjects.DecodeCompletion(data)
		checkDecoded(t, data, c, err, subjects.DecodeCompletion)
		fl, err := subjects.DecodeFailure(data)
		checkDecoded(t, data, fl, err, subjects.DecodeFailure)
	})
}

// An observation is decoded into an event of its type, whatever the body
// claims, and never carries a verdict.
func FuzzDecodeObservation(f *testing.F) {
	f.Add("notification_failed", []byte(`{"version":1,"type":"notification_failed","runId":"r","pass":0,"at":"2026-12-01T10:00:00Z","sink":"s","attempts":3}`))
	f.Add("access_refused", []byte(`{"version":1,"type":"decision_accepted","runId":"r","pass":0,"at":"2026-12-01T10:00:00Z","verdict":{"version":1,"outcome":"accepted","at":"2026-12-01T10:00:00Z"}}`))
	f.Add("decision_accepted", []byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		ev, err := subjects.DecodeObservation(subjects.EventType(typ), data)
		if err != nil {
			if !errors.Is(err, subjects.ErrMalformed) && !errors.Is(err, subjects.ErrTooLarge) &&
				!errors.Is(err, subjects.ErrUnsupportedVersion) {
				t.Fatalf("unclassified error for %q: %v", data, err)
			}
			return
		}
		if string(ev.Type) != typ || ev.Verdict != nil || ev.Observer != subjects.ObservationTypes[ev.Type] || ev.Observer == "" {
			t.Fatalf("observation %q of type %q decoded as %+v", data, typ, ev)
		}
	})
}

// Parse accepts exactly the subjects the builders produce.
func FuzzParse(f *testing.F) {
	f.Add("interlock.suspended.refunds.r1")
	f.Add("interlock.resume.r1")
	f.Add("interlock.events._.input_rejected")
	f.Add("interlock.resume.a.b")
	f.Add("interlock.timers.at.r1.e-1")
	f.Add("interlock.timers.due.r1")
	f.Add("interlock.reminder.a.r1")
	f.Add("interlock.start.refunds")
	f.Add("interlock.start.refunds.ada")
	f.Add("interlock.ask.refunds.r1")
	f.Add("interlock.agui.refunds.r1")
	f.Add("interlock.observed.r1.notification_failed")
	f.Fuzz(func(t *testing.T, subject string) {
		ns := subjects.Default()
		a, err := ns.Parse(subject)
		if err != nil {
			if !errors.Is(err, subjects.ErrInvalidSubject) {
				t.Fatalf("unclassified error for %q: %v", subject, err)
			}
			return
		}
		var rebuilt string
		switch a.Kind {
		case subjects.KindWork:
			rebuilt, err = ns.Work(a.Agent)
		case subjects.KindStart:
			if a.Requester != "" {
				rebuilt, err = ns.StartAs(a.Agent, a.Requester)
			} else {
				rebuilt, err = ns.Start(a.Agent)
			}
		case subjects.KindAsk:
			rebuilt, err = ns.Ask(a.Agent, a.Run)
		case subjects.KindAGUI:
			rebuilt, err = ns.AGUI(a.Agent, a.Run)
		case subjects.KindSuspended:
			rebuilt, err = ns.Suspended(a.Agent, a.Run)
		case subjects.KindCompleted:
			rebuilt, err = ns.Completed(a.Agent, a.Run)
		case subjects.KindFailed:
			rebuilt, err = ns.Failed(a.Agent, a.Run)
		case subjects.KindResume:
			if a.Approver != "" {
				rebuilt, err = ns.ResumeAs(a.Run, a.Approver)
			} else {
				rebuilt, err = ns.Resume(a.Run)
			}
		case subjects.KindTimers:
			if a.Timer != "" {
				rebuilt, err = ns.TimerSchedule(a.Run, a.Timer)
			} else {
				rebuilt, err = ns.TimerDue(a.Run)
			}
		case subjects.KindReminder, subjects.KindEscalated, subjects.KindExpired:
			rebuilt, err = ns.Notice(a.Kind, a.Agent, a.Run)
		case subjects.KindEvents:
			rebuilt, err = ns.Events(a.Run, a.Event)
		case subjects.KindObserved:
			rebuilt, err = ns.Observed(a.Run, a.Event)
			if errors.Is(err, subjects.ErrInvalidSubject) {
				return // parses, but no role may publish that type
			}
		case subjects.KindDLQ:
			rebuilt, err = ns.DeadLetter(a.Source)
		}
		if err != nil || rebuilt != subject {
			t.Fatalf("parsed %q as %+v, rebuilt %q, %v", subject, a, rebuilt, err)
		}
	})
}

func FuzzValidateToken(f *testing.F) {
	f.Add("run-1")
	f.Add("a.b")
	f.Fuzz(func(t *testing.T, s string) {
		if subjects.ValidateToken("t", s) != nil {
			return
		}
		if _, err := subjects.Default().Resume(s); err != nil {
			t.Fatalf("valid token %q does not build a subject: %v", s, err)
		}
		if a, err := subjects.Default().Parse("interlock.resume." + s); err != nil || a.Run != s {
			t.Fatalf("valid token %q does not round-trip: %+v %v", s, a, err)
		}
	})
}

// An Interlock-Reply-To header is accepted only as a literal subject under
// the identity's own inbox prefix.
func FuzzReplyAllowed(f *testing.F) {
	f.Add("ada", "_INBOX.ada.x")
	f.Add("", "_INBOX.anonymous.x.y")
	f.Add("ada", "$KV.interlock_runs.run-2")
	f.Add("ada", "_INBOX.ada.>")
	f.Fuzz(func(t *testing.T, identity, reply string) {
		if !subjects.ReplyAllowed(identity, reply) {
			return
		}
		rest, ok := strings.CutPrefix(reply, subjects.InboxPrefix(identity)+".")
		if !ok {
			t.Fatalf("%q allowed for %q outside %s", reply, identity, subjects.InboxPrefix(identity))
		}
		for _, tok := range strings.Split(rest, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("%q allowed with token %q", reply, tok)
			}
		}
	})
}
