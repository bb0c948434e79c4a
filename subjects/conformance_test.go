package subjects_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// The conformance vectors in testdata/conformance are read by these tests
// and by the Python SDK's (python/tests/test_conformance.py), so the two
// cannot drift.

func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "conformance", name))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v))
}

func TestConformanceTokens(t *testing.T) {
	var vec struct {
		Tokens []struct {
			Token string
			Valid bool
		}
		Subjects []struct {
			Prefix, Op, Subject, Error string
			Args                       []string
		}
		InboxPrefixes []struct{ Identity, Prefix string }
		Workers       []struct {
			Prefix, Agent, Durable, Error string
			Subjects                      []string
		}
		Backlog []struct {
			Prefix   string
			Subjects []string
		}
	}
	readVectors(t, "subjects.json", &vec)
	require.NotEmpty(t, vec.Tokens)
	for _, v := range vec.Tokens {
		err := subjects.ValidateToken("token", v.Token)
		if v.Valid {
			assert.NoError(t, err, "%q", v.Token)
		} else {
			assert.ErrorIs(t, err, subjects.ErrInvalidToken, "%q", v.Token)
		}
	}
	require.NotEmpty(t, vec.InboxPrefixes)
	for _, v := range vec.InboxPrefixes {
		assert.Equal(t, v.Prefix, subjects.InboxPrefix(v.Identity))
	}
	require.NotEmpty(t, vec.Subjects)
	for _, v := range vec.Subjects {
		got, err := buildSubject(v.Prefix, v.Op, v.Args)
		if v.Error != "" {
			require.Equal(t, "invalid_token", v.Error)
			assert.ErrorIs(t, err, subjects.ErrInvalidToken, "%s %s %q", v.Prefix, v.Op, v.Args)
			continue
		}
		if assert.NoError(t, err, "%s %s %q", v.Prefix, v.Op, v.Args) {
			assert.Equal(t, v.Subject, got)
		}
	}
	require.NotEmpty(t, vec.Workers)
	for _, v := range vec.Workers {
		ns, err := subjects.New(v.Prefix)
		require.NoError(t, err)
		got, err := ns.AgentWork(v.Agent)
		if v.Error != "" {
			require.Equal(t, "invalid_token", v.Error)
			assert.ErrorIs(t, err, subjects.ErrInvalidToken, "%s %q", v.Prefix, v.Agent)
			continue
		}
		if assert.NoError(t, err, "%s %q", v.Prefix, v.Agent) {
			assert.Equal(t, v.Subjects, got)
		}
		assert.Equal(t, v.Durable, subjects.WorkerDurable(v.Agent))
	}
	require.NotEmpty(t, vec.Backlog)
	for _, v := range vec.Backlog {
		ns, err := subjects.New(v.Prefix)
		require.NoError(t, err)
		assert.Equal(t, v.Subjects, ns.Backlog())
	}
}

func buildSubject(prefix, op string, a []string) (string, error) {
	ns, err := subjects.New(prefix)
	if err != nil {
		return "", err
	}
	switch op {
	case "work":
		return ns.Work(a[0])
	case "start":
		return ns.Start(a[0])
	case "startAs":
		return ns.StartAs(a[0], a[1])
	case "suspended":
		return ns.Suspended(a[0], a[1])
	case "completed":
		return ns.Completed(a[0], a[1])
	case "failed":
		return ns.Failed(a[0], a[1])
	case "resume":
		return ns.Resume(a[0])
	case "resumeAs":
		return ns.ResumeAs(a[0], a[1])
	case "events":
		return ns.Events(a[0], subjects.EventType(a[1]))
	case "runEvents":
		return ns.RunEvents(a[0])
	case "runOutcomes":
		return ns.RunOutcomes(a[0], a[1])
	case "agui":
		return ns.AGUI(a[0], a[1])
	case "deadLetter":
		return ns.DeadLetter(a[0])
	}
	return "", errors.New("unknown op " + op)
}

func TestConformanceMessages(t *testing.T) {
	var vec struct {
		Cases []struct {
			Kind, Name string
			Message    map[string]any
			Raw        *string
			RawBase64  *string
			Pad        *struct {
				In    []any
				Field string
				Bytes int
			}
			Code *string
		}
	}
	readVectors(t, "messages.json", &vec)
	decoders := map[string]func([]byte) error{
		"decision":   func(b []byte) error { _, err := subjects.DecodeDecision(b); return err },
		"suspension": func(b []byte) error { _, err := subjects.DecodeSuspension(b); return err },
		"completion": func(b []byte) error { _, err := subjects.DecodeCompletion(b); return err },
		"failure":    func(b []byte) error { _, err := subjects.DecodeFailure(b); return err },
		"work":       func(b []byte) error { _, err := subjects.DecodeWork(b); return err },
	}
	require.NotEmpty(t, vec.Cases)
	for _, c := range vec.Cases {
		t.Run(c.Kind+": "+c.Name, func(t *testing.T) {
			decode, ok := decoders[c.Kind]
			require.True(t, ok, "kind %q", c.Kind)
			var data []byte
			switch {
			case c.RawBase64 != nil:
				var err error
				data, err = base64.StdEncoding.DecodeString(*c.RawBase64)
				require.NoError(t, err)
			case c.Raw != nil:
				data = []byte(*c.Raw)
			default:
				if c.Pad != nil {
					var at any = c.Message
					for _, step := range c.Pad.In {
						switch k := step.(type) {
						case string:
							at = at.(map[string]any)[k]
						case float64:
							at = at.([]any)[int(k)]
						}
					}
					at.(map[string]any)[c.Pad.Field] = strings.Repeat("x", c.Pad.Bytes)
				}
				var err error
				data, err = json.Marshal(c.Message)
				require.NoError(t, err)
			}
			err := decode(data)
			if c.Code == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, subjects.Code(*c.Code), subjects.CodeOf(err), "%v", err)
		})
	}
}

func TestConformanceStoredEvents(t *testing.T) {
	var vec struct {
		Cases []struct {
			Name, Subject, Raw string
			Data, Event        json.RawMessage
		}
	}
	readVectors(t, "events.json", &vec)
	require.NotEmpty(t, vec.Cases)
	for _, c := range vec.Cases {
		t.Run(c.Name, func(t *testing.T) {
			data := []byte(c.Raw)
			if c.Raw == "" {
				data = c.Data
			}
			ev, err := subjects.StoredEvent(subjects.Default(), c.Subject, data)
			if string(c.Event) == "null" {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			got, err := json.Marshal(ev)
			require.NoError(t, err)
			assert.JSONEq(t, string(c.Event), string(got))
		})
	}
}
