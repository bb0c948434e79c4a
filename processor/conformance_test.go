package processor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// TestConformanceIDs checks the ids every SDK must produce byte for byte
// against testdata/conformance/ids.json, which the Python SDK's tests read
// too.
func TestConformanceIDs(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "conformance", "ids.json"))
	require.NoError(t, err)
	var vec struct {
		InterruptIDs []struct {
			RunID, ToolCallID, ID string
			Ordinal               int
		}
		StepKeys []struct {
			ToolCallID, Name, Key string
			Ordinal               int
		}
		WorkMsgIDs []struct {
			RunID, MsgID string
			Pass         int
		}
		StartMsgIDs   []struct{ RunID, Nonce, MsgID string }
		PassKeys      []struct{ WorkMsgID, Work, Key string }
		OutcomeMsgIDs []struct {
			RunID, Key, MsgID string
			Pass              int
		}
		EmitMsgIDs []struct {
			RunID, Key, MsgID string
			N                 int
		}
		PendingKeys           []struct{ RunID, InterruptID, Key string }
		DecisionMsgIDs        []struct{ Approver, DecisionID, MsgID string }
		DecisionAttemptMsgIDs []struct {
			Approver, DecisionID, MsgID, Body string
			Rejected                          int
		}
		DeadLetterMsgIDs []struct {
			Consumer, Stream, MsgID string
			Sequence                uint64
		}
	}
	require.NoError(t, json.Unmarshal(data, &vec))
	require.NotEmpty(t, vec.InterruptIDs)
	for _, v := range vec.InterruptIDs {
		assert.Equal(t, v.ID, subjects.InterruptID(v.RunID, v.ToolCallID, v.Ordinal), "%+v", v)
	}
	require.NotEmpty(t, vec.StepKeys)
	for _, v := range vec.StepKeys {
		assert.Equal(t, v.Key, subjects.StepKey(v.ToolCallID, v.Name, v.Ordinal))
	}
	require.NotEmpty(t, vec.WorkMsgIDs)
	for _, v := range vec.WorkMsgIDs {
		assert.Equal(t, v.MsgID, subjects.WorkMsgID(v.RunID, v.Pass))
	}
	require.NotEmpty(t, vec.OutcomeMsgIDs)
	for _, v := range vec.OutcomeMsgIDs {
		assert.Equal(t, v.MsgID, subjects.OutcomeMsgID(v.RunID, v.Pass, v.Key))
	}
	require.NotEmpty(t, vec.StartMsgIDs)
	for _, v := range vec.StartMsgIDs {
		assert.Equal(t, v.MsgID, subjects.StartMsgID(v.RunID, v.Nonce))
	}
	require.NotEmpty(t, vec.PassKeys)
	for _, v := range vec.PassKeys {
		assert.Equal(t, v.Key, subjects.PassKey(v.WorkMsgID, []byte(v.Work)))
	}
	require.NotEmpty(t, vec.EmitMsgIDs)
	for _, v := range vec.EmitMsgIDs {
		assert.Equal(t, v.MsgID, subjects.EmitMsgID(v.RunID, v.N, v.Key))
	}
	require.NotEmpty(t, vec.PendingKeys)
	for _, v := range vec.PendingKeys {
		assert.Equal(t, v.Key, subjects.PendingKey(v.RunID, v.InterruptID))
	}
	require.NotEmpty(t, vec.DecisionMsgIDs)
	for _, v := range vec.DecisionMsgIDs {
		assert.Equal(t, v.MsgID, subjects.DecisionMsgID(v.Approver, v.DecisionID))
	}
	require.NotEmpty(t, vec.DecisionAttemptMsgIDs)
	for _, v := range vec.DecisionAttemptMsgIDs {
		assert.Equal(t, v.MsgID, subjects.DecisionAttemptMsgID(v.Approver, v.DecisionID, v.Rejected, []byte(v.Body)))
	}
	require.NotEmpty(t, vec.DeadLetterMsgIDs)
	for _, v := range vec.DeadLetterMsgIDs {
		assert.Equal(t, v.MsgID, subjects.DeadLetterMsgID(v.Consumer, v.Stream, v.Sequence))
	}
}
