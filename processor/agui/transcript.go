package agui

// fold returns base (the client's messages) with the messages that events
// (AG-UI events, in the order emitted) describe: assistant text messages,
// assistant tool calls and tool results. A message the events describe
// replaces the base message with its id; the others follow base, in order.
// Tool calls attach the way @ag-ui/client applies them: to the parent
// assistant message when named, else to a new assistant message with the
// tool call's id.
func fold(base []map[string]any, events []map[string]any) []map[string]any {
	var built []map[string]any
	byID := map[string]map[string]any{}
	calls := map[string]map[string]any{} // tool call id → its function object
	add := func(m map[string]any) map[string]any {
		built = append(built, m)
		byID[m["id"].(string)] = m
		return m
	}
	str := func(ev map[string]any, key string) string { s, _ := ev[key].(string); return s }
	for _, ev := range events {
		switch ev["type"] {
		case "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT":
			id := str(ev, "messageId")
			if id == "" {
				continue
			}
			m := byID[id]
			if m == nil {
				role := str(ev, "role")
				if role == "" {
					role = "assistant"
				}
				m = add(map[string]any{"id": id, "role": role, "content": ""})
			}
			if ev["type"] == "TEXT_MESSAGE_CONTENT" {
				content, _ := m["content"].(string)
				m["content"] = content + str(ev, "delta")
			}
		case "TOOL_CALL_START":
			id := str(ev, "toolCallId")
			if id == "" || calls[id] != nil {
				continue
			}
			parent := str(ev, "parentMessageId")
			m := byID[parent]
			if m == nil || m["role"] != "assistant" {
				mid := id
				if parent != "" && m == nil {
					mid = parent
				}
				m = add(map[string]any{"id": mid, "role": "assistant"})
			}
			fn := map[string]any{"name": str(ev, "toolCallName"), "arguments": ""}
			tcs, _ := m["toolCalls"].([]any)
			m["toolCalls"] = append(tcs, map[string]any{"id": id, "type": "function", "function": fn})
			calls[id] = fn
		case "TOOL_CALL_ARGS":
			if fn := calls[str(ev, "toolCallId")]; fn != nil {
				fn["arguments"] = fn["arguments"].(string) + str(ev, "delta")
			}
		case "TOOL_CALL_RESULT":
			id := str(ev, "messageId")
			if id == "" || byID[id] != nil {
				continue
			}
			add(map[string]any{"id": id, "role": "tool", "toolCallId": str(ev, "toolCallId"), "content": str(ev, "content")})
		}
	}
	out := make([]map[string]any, 0, len(base)+len(built))
	used := map[string]bool{}
	for _, m := range base {
		id, _ := m["id"].(string)
		if b := byID[id]; b != nil {
			m, used[id] = b, true
		}
		out = append(out, m)
	}
	for _, m := range built {
		if !used[m["id"].(string)] {
			out = append(out, m)
		}
	}
	return out
}
