package processor

import (
	"context"
	"fmt"
)

// Emit sends an AG-UI event (a value that marshals to an AG-UI event
// object, such as a map with "type") to the clients following the run
// through the AG-UI bridge, and keeps it in the run's AG-UI stream so a
// client that comes back later gets it too. A replay sends nothing twice:
// the Emit calls an earlier pass made before its first undecided interrupt
// are skipped by their order, and those it made after one are skipped when
// an event with the same body is kept and not yet met (the replay may emit
// them later, after acting on that interrupt). So a body emits the same
// events in the same order up to where its last pass got, and every Emit
// call between interrupts decided before is sent (docs/agui.md). Outside a
// run it returns ErrNotInRun.
func Emit(ctx context.Context, event any) error {
	p := passFrom(ctx)
	if p == nil {
		return fmt.Errorf("emit: %w", ErrNotInRun)
	}
	p.mu.Lock()
	n := p.emitted
	p.emitted++
	p.mu.Unlock()
	if p.emit == nil {
		return nil
	}
	return p.emit(n, event)
}

// EmitText emits one whole assistant text message.
func EmitText(ctx context.Context, messageID, text string) error {
	for _, ev := range []map[string]any{
		{"type": "TEXT_MESSAGE_START", "messageId": messageID, "role": "assistant"},
		{"type": "TEXT_MESSAGE_CONTENT", "messageId": messageID, "delta": text},
		{"type": "TEXT_MESSAGE_END", "messageId": messageID},
	} {
		if err := Emit(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// EmitToolCall emits a tool call the agent makes: start, arguments, end.
func EmitToolCall(ctx context.Context, toolCallID, name, args string) error {
	for _, ev := range []map[string]any{
		{"type": "TOOL_CALL_START", "toolCallId": toolCallID, "toolCallName": name},
		{"type": "TOOL_CALL_ARGS", "toolCallId": toolCallID, "delta": args},
		{"type": "TOOL_CALL_END", "toolCallId": toolCallID},
	} {
		if err := Emit(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// EmitToolResult emits a tool call's result against its original id, the
// way a continuation reports a tool that an interrupt gated.
func EmitToolResult(ctx context.Context, messageID, toolCallID, content string) error {
	return Emit(ctx, map[string]any{"type": "TOOL_CALL_RESULT", "messageId": messageID, "toolCallId": toolCallID,
		"content": content, "role": "tool"})
}
