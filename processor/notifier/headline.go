package notifier

import (
	"fmt"
	"time"

	"github.com/interlockhq/interlock/subjects"
)

// headline says in one line what a notification is about, differently for
// each kind:
//
//	refunds is waiting for a decision, 30 minutes left
//	reminder: 10 minutes left
//	escalated: deadline moved to 13:02 UTC, 20 minutes left
//	expired: cancelled at 12:52 UTC, nothing to decide
//
// Times count from the notice, or from the suspension, so every retry
// says the same; now serves only a suspension that does not say when.
func headline(kind Kind, s *subjects.Suspension, notice *NoticeRef, now time.Time) string {
	at := now
	switch {
	case notice != nil:
		at = notice.At
	case !s.SuspendedAt.IsZero():
		at = s.SuspendedAt
	}
	deadline := earliestDeadline(s.Interrupts)
	switch kind {
	case KindReminder:
		if deadline == nil {
			return "reminder: still waiting for a decision"
		}
		return "reminder: " + timeLeft(deadline.Sub(at)) + " left"
	case KindEscalated:
		if deadline == nil {
			return "escalated: still waiting for a decision"
		}
		return "escalated: deadline moved to " + clock(*deadline, at) + ", " + timeLeft(deadline.Sub(at)) + " left"
	case KindExpired:
		what := "closed"
		if notice != nil {
			switch notice.Status {
			case subjects.StatusCancelled:
				what = "cancelled"
			case subjects.StatusResolved:
				what = "resolved with the agent's default"
			}
		}
		return "expired: " + what + " at " + clock(at, at) + ", nothing to decide"
	}
	h := s.Agent + " is waiting for a decision"
	if deadline != nil {
		h += ", " + timeLeft(deadline.Sub(at)) + " left"
	}
	return h
}

func earliestDeadline(ins []subjects.Interrupt) *time.Time {
	var out *time.Time
	for _, in := range ins {
		if in.ExpiresAt != nil && (out == nil || in.ExpiresAt.Before(*out)) {
			out = in.ExpiresAt
		}
	}
	return out
}

// clock formats t in UTC, with the date only when it is not ref's day.
func clock(t, ref time.Time) string {
	t, ref = t.UTC(), ref.UTC()
	if t.YearDay() == ref.YearDay() && t.Year() == ref.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("2006-01-02 15:04 UTC")
}

// timeLeft says d in the largest whole unit that fits, rounded.
func timeLeft(d time.Duration) string {
	if d <= 0 {
		return "no time"
	}
	unit := func(n int64, name string) string {
		if n == 1 {
			return "1 " + name
		}
		return fmt.Sprintf("%d %ss", n, name)
	}
	switch {
	case d >= 48*time.Hour:
		return unit(int64(d.Round(24*time.Hour)/(24*time.Hour)), "day")
	case d >= 2*time.Hour:
		return unit(int64(d.Round(time.Hour)/time.Hour), "hour")
	case d >= time.Minute:
		return unit(int64(d.Round(time.Minute)/time.Minute), "minute")
	}
	return unit(max(int64(d.Round(time.Second)/time.Second), 1), "second")
}
