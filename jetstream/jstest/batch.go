package jstest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishBatch stores size copies of body on subject as one atomic batch
// (the Nats-Batch-* headers of ADR-50; nats.go has no API for them yet),
// for the experiments that measure what a batch costs,
// and waits for the batch's acknowledgement.
func PublishBatch(nc *nats.Conn, id, subject string, body []byte, size int) error {
	for seq := 1; seq <= size; seq++ {
		m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(seq))
		if seq < size {
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		reply, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			return err
		}
		var ack struct {
			Count int                 `json:"count"`
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return err
		}
		if ack.Error != nil {
			return ack.Error
		}
		if ack.Count != size {
			return fmt.Errorf("batch %s: %d of %d messages stored", id, ack.Count, size)
		}
	}
	return nil
}
