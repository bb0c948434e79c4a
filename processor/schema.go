package processor

import (
	"encoding/json"
	"fmt"

	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/subjects"
)

var sharedSchemas schema.Cache

// CheckAnswer applies the coordinator's responseSchema rule to an answer:
// a resolve of an interrupt with a responseSchema needs a payload (absent
// when empty) that satisfies it. The AG-UI bridge uses it to refuse a
// resume batch before anything changes. Errors match the processor/schema
// sentinels and never contain the payload.
func CheckAnswer(in subjects.Interrupt, status subjects.Status, payload json.RawMessage) error {
	return checkAnswer(&sharedSchemas, in, status, payload)
}

func checkAnswer(c *schema.Cache, in subjects.Interrupt, status subjects.Status, payload json.RawMessage) error {
	if status != subjects.StatusResolved || len(in.ResponseSchema) == 0 {
		return nil
	}
	if len(payload) == 0 {
		return fmt.Errorf("%w: interrupt %s has a responseSchema; a resolve needs a payload", schema.ErrMismatch, in.ID)
	}
	return c.Validate(in.ResponseSchema, payload)
}
