"""A scripted Strands model: no network, the same answers in every process.
Turn n (the number of assistant messages so far) answers with script[n]."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

from strands.models import Model
from strands.types.streaming import StreamEvent


class ScriptedModel(Model):
    def __init__(self, script: list[list[dict[str, Any]]]) -> None:
        self.script = script

    def update_config(self, **model_config: Any) -> None:
        return None

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError("the scripted model has no structured output")

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kw: Any
    ) -> AsyncIterable[StreamEvent]:
        turn = self.script[sum(1 for m in messages if m["role"] == "assistant")]
        yield {"messageStart": {"role": "assistant"}}
        stop = "end_turn"
        for block in turn:
            if "tool" in block:
                stop = "tool_use"
                start = {"toolUse": {"toolUseId": block["id"], "name": block["tool"]}}
                yield {"contentBlockStart": {"start": start}}  # type: ignore[typeddict-item]
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(block["input"])}}}}
            else:
                yield {"contentBlockDelta": {"delta": {"text": block["text"]}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}  # type: ignore[typeddict-item]
