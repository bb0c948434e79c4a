package processor

import (
	"context"
	"fmt"
)

// Emit sends an AG-UI event (a value that marshals to an AG-UI event
// object, such as a map with "type") to the clients following the run
// through the AG-UI bridge. On a replay pass, events are not sent until the
// body has come back past every interrupt decided before: what the client
// already saw is not sent twice. Outside a run it returns ErrNotInRun; with
// no bridge listening the event is dropped.
func Emit(ctx context.Context, event any) error {
	p := passFrom(ctx)
	if p == nil {
		return fmt.Errorf("emit: %w", ErrNotInRun)
	}
	p.mu.Lock()
	replaying := p.replaying > 0
	p.mu.Unlock()
	if replaying || p.emit == nil {
		return nil
	}
	return p.emit(event)
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
