package processor

import "github.com/interlockhq/interlock/processor/schema"

var sharedSchemas schema.Cache

// ValidatePayload checks payload against a responseSchema, as the
// coordinator will; the AG-UI bridge uses it to refuse a resume batch before
// anything changes. Errors match the processor/schema sentinels and never
// contain the payload.
func ValidatePayload(responseSchema, payload []byte) error {
	return sharedSchemas.Validate(responseSchema, payload)
}
