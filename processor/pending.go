package processor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// The pending index: one KV entry per interrupt waiting for a decision, put
// and deleted in the same batch as the effects of the record change that
// opens or closes it. It makes listing the pending interrupts cost what is
// pending, not every run ever recorded.

func pendingKey(run, interrupt string) string {
	sum := sha256.Sum256([]byte(interrupt))
	return run + "." + hex.EncodeToString(sum[:12])
}

// pendingPuts index every interrupt of rec that waits.
func (co *Coordinator) pendingPuts(rec *subjects.Run) ([]jetstream.OutMsg, error) {
	var out []jetstream.OutMsg
	for _, in := range rec.Pending() {
		data, err := json.Marshal(PendingInterrupt{RunID: rec.RunID, Agent: rec.Agent, ThreadID: rec.ThreadID,
			InterruptState: in, SuspendedAt: rec.UpdatedAt})
		if err != nil {
			return nil, err
		}
		key := pendingKey(rec.RunID, in.ID)
		out = append(out, co.client.KVPutMsg(jetstream.PendingBucket, key, data,
			"pending:"+key+":"+strconv.Itoa(in.Escalations)))
	}
	return out, nil
}

// pendingDelete removes interrupt from the index.
func (co *Coordinator) pendingDelete(run, interrupt string) jetstream.OutMsg {
	return co.client.KVDeleteMsg(jetstream.PendingBucket, pendingKey(run, interrupt))
}
