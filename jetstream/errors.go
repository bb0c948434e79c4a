package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrNotFound means a key, message or stream does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a compare-and-set lost: the record changed since it
	// was read, or a key to create already exists.
	ErrConflict = errors.New("revision conflict")
	// ErrForeign means a bucket entry is not a client's write but an answer
	// the server stored under its key for another user (CheckWritten);
	// reads that return it wrap ErrNotFound too: the key holds no entry.
	ErrForeign = errors.New("an answer the server stored for another user, not a client's write")
	// ErrTooLarge means the server refused a message over its size limit.
	ErrTooLarge = errors.New("message too large for the server")
	// ErrTimeout means the server did not answer in time.
	ErrTimeout = errors.New("timed out waiting for NATS")
	// ErrClosed means the connection is closed.
	ErrClosed = errors.New("connection closed")
	// ErrNoStream means no stream captures the subject: the streams are not
	// provisioned, or the subject is outside Interlock's namespace.
	ErrNoStream = errors.New("no stream for subject")
	// ErrPermission means the server refused the operation for this user.
	ErrPermission = errors.New("permission denied")
	// ErrEmptyPassword means Dial was given a user with an empty password
	// (DialConfig.User with an empty Password, or a URL's "user:@"). A
	// stock nats-server admits an empty password when its configuration
	// reads the password from an unset variable, so Interlock refuses to
	// send one rather than rely on it.
	ErrEmptyPassword = errors.New("empty password")
	// ErrHandlerTimeout is the default cause of a consumer handler's
	// context cancelled at its Timeout.
	ErrHandlerTimeout = errors.New("handler timed out")
	// ErrNotProvisioned means a stream, consumer or bucket this process
	// binds to does not exist (or is not what it needs), and it has no
	// right to create it.
	ErrNotProvisioned = errors.New("not provisioned (run `interlock provision` with admin credentials)")
	// ErrUnavailable means JetStream cannot serve the request for now: a
	// cluster is forming or electing a leader. It passes within seconds;
	// retry with a short backoff.
	ErrUnavailable = errors.New("JetStream temporarily unavailable (cluster forming or electing a leader)")
	// ErrReplicatedMemoryRecords refuses a runs bucket kept in memory with
	// more than one replica: when a majority of its replicas restart at
	// once, the bucket can come back from a replica that had not yet
	// stored the last writes, older but not empty, which putting records
	// back from the audit trail cannot see (Config.RecordsStorage).
	ErrReplicatedMemoryRecords = errors.New("run records in memory need a runs bucket with one replica")
)

// translate maps nats.go errors onto this package's sentinels, keeping the
// original text.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch {
	case errors.Is(err, ErrReplicatedMemoryRecords):
		return err // already this package's own
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %s", context.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w: %s", ErrTimeout, context.DeadlineExceeded, err.Error())
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrMsgNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrKeyDeleted), errors.Is(err, jetstream.ErrBucketNotFound):
		sentinel = ErrNotFound
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		sentinel = ErrConflict
	case errors.Is(err, nats.ErrMaxPayload):
		sentinel = ErrTooLarge
	case errors.Is(err, nats.ErrTimeout):
		sentinel = ErrTimeout
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		sentinel = ErrClosed
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		sentinel = ErrNoStream
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization):
		sentinel = ErrPermission
	default:
		var apiErr *jetstream.APIError
		switch {
		case !errors.As(err, &apiErr):
			return natsError(err)
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
			sentinel = ErrTooLarge
		case slices.Contains(unavailableCodes, apiErr.ErrorCode):
			sentinel = ErrUnavailable
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence,
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			sentinel = ErrConflict
		default:
			return natsError(err)
		}
	}
	return fmt.Errorf("%w: %s", sentinel, err.Error())
}

// unavailableCodes are the JetStream API errors of a cluster that is
// forming or electing: no suitable peers (yet), system temporarily
// unavailable, cluster can not handle request.
var unavailableCodes = []jetstream.ErrorCode{10005, 10008, 10009}

// natsError keeps an unclassified error's text, marked as coming from NATS.
func natsError(err error) error {
	if strings.HasPrefix(err.Error(), "nats:") {
		return errors.New(err.Error())
	}
	return fmt.Errorf("nats: %s", err.Error())
}

// electionProbe bounds the stream lookup that tells an election from a
// missing stream.
const electionProbe = 2 * time.Second

// written is the error of a write to subject, translated. When the server
// found no stream to take it (ErrNoStream), or did not answer in time, and
// the stream that captures subject exists without a leader, or cannot be
// looked up for a reason other than not existing, its leader is being
// elected: the error is ErrUnavailable. So is a write cut off by the loss
// of the connection while the client reconnects to another server.
func (c *Client) written(subject string, err error) error {
	if (errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected)) && !c.nc.IsClosed() {
		return fmt.Errorf("%w: connection lost, reconnecting (%s)", ErrUnavailable, err.Error())
	}
	err = translate(err)
	timedOut := errors.Is(err, ErrTimeout)
	if !errors.Is(err, ErrNoStream) && !timedOut {
		return err
	}
	stream := c.streamOf(subject)
	if stream == "" {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(electionProbe, c.cfg.Timeout))
	defer cancel()
	st, perr := c.js.Stream(ctx, stream)
	last := c.nc.LastError()
	switch {
	case errors.Is(perr, jetstream.ErrStreamNotFound),
		last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), stream):
		return err // not provisioned, or this user may not tell
	case timedOut && perr == nil && !leaderless(st.CachedInfo().Cluster):
		return err // the stream has a leader and a quorum: a plain timeout
	}
	return fmt.Errorf("%w: stream %s exists but no leader took the write (%s)", ErrUnavailable, stream, err.Error())
}

// leaderless reports whether a clustered stream has no leader, or one
// without a quorum of current replicas.
func leaderless(ci *jetstream.ClusterInfo) bool {
	if ci == nil {
		return false
	}
	if ci.Leader == "" {
		return true
	}
	current := 1
	for _, r := range ci.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	return current <= (len(ci.Replicas)+1)/2
}

// streamOf names the stream of Interlock's that captures subject, or "".
func (c *Client) streamOf(subject string) string {
	if rest, ok := strings.CutPrefix(subject, "$KV."); ok {
		bucket, _, _ := strings.Cut(rest, ".")
		return "KV_" + bucket
	}
	for _, sc := range c.streamConfigs(0) {
		for _, pattern := range sc.Subjects {
			if subjectMatches(pattern, subject) {
				return sc.Name
			}
		}
	}
	return ""
}

// subjectMatches reports whether subject (no wildcards) matches pattern,
// whose tokens may be "*" (one token) or a final ">" (one or more).
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return len(st) > i
		case i >= len(st) || (p != "*" && p != st[i]):
			return false
		}
	}
	return len(pt) == len(st)
}
