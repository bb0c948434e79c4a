"""Strands Agents on Interlock.

:class:`StrandsAgent` is an Interlock agent body that runs a Strands agent.
When a tool calls Strands' native ``tool_context.interrupt(name, reason)``
and the agent stops with ``stop_reason == "interrupt"``, every interrupt of
that stop becomes an Interlock interrupt of one suspension (tool-call scope:
the Strands interrupt id, so parallel identical tool calls are independent).
The agent's state (messages, interrupt state) is kept in the JetStream KV
bucket ``<prefix>_strands``, one snapshot per pass that suspends (key
``<run>.<pass>``), written before the suspension is published. The replay
pass, on any worker process, loads the snapshot of the pass before and
resumes the agent with Strands' native ``interruptResponse`` list: the
approver's payload is the ``response``; a cancelled decision is the distinct
value :func:`cancelled_response` makes (check it with :func:`is_cancelled`),
never an approval.

A pass that crashes before its suspension is published runs again from the
snapshot of the pass before, so the model and the tools of that pass may run
again: the same at-least-once window as every Interlock pass.

Decision policies (protocol version 2): the ``request`` callback may set
``call`` (the gated tool and its arguments, which the interrupt then carries
with its call digest) and ``policy`` (a quorum). The call is kept in the
snapshot, and on the replay the decision must have approved it
(:class:`~interlock.CallMismatch` fails the run otherwise). The approved
call's execution key is :func:`execution_key` of the tool's context: pass it
to the outside system as the idempotency key of the tool's side effect.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import nats.js.errors
from nats.aio.client import Client as NATS
from strands import Agent
from strands.interrupt import Interrupt as StrandsInterrupt
from strands.types import Snapshot
from strands.types.interrupt import InterruptResponseContent

import interlock
from interlock import Call, Cancelled, Request, Suspended

from .._run import _current
from .._subjects import DEFAULT_PREFIX, Namespace

CANCELLED_KEY = "interlock.cancelled"
"""The key that marks a cancelled decision's response."""


def cancelled_response(c: Cancelled) -> dict[str, Any]:
    """The response a Strands tool gets for a cancelled decision (a denial or
    an expiry): ``{"interlock.cancelled": true, "reason": ..., "comment": ...}``."""
    return {CANCELLED_KEY: True, "reason": c.reason, "comment": c.comment}


def is_cancelled(response: Any) -> bool:
    """Whether a Strands interrupt response is a cancellation."""
    return isinstance(response, dict) and response.get(CANCELLED_KEY) is True


def tool_use_id(interrupt_id: str) -> str:
    """The tool use a Strands interrupt id belongs to (``v1:tool_call:<tool
    use id>:...`` from a tool, ``v1:before_tool_call:<tool use id>:...`` from
    a hook), or "" for one raised outside a tool call."""
    parts = interrupt_id.split(":")
    if len(parts) >= 4 and parts[1] in ("tool_call", "before_tool_call"):
        return parts[2]
    return ""


def execution_key(tool_context: Any) -> str:
    """The execution key of the approved call a Strands tool runs (from its
    ``ToolContext``), "" when none: the same on every replay of the run,
    unguessable without the coordinator's key. Give it to the outside system
    as the idempotency key of the tool's side effect."""
    return interlock.execution_key(str(tool_context.tool_use["toolUseId"]))


def default_request(i: StrandsInterrupt) -> Request:
    """The Interlock request for a Strands interrupt: its reason as the
    message when it is a string, else its name; the interrupt in metadata."""
    message = i.reason if isinstance(i.reason, str) else i.name
    return Request(message=message, metadata={"strands": {"id": i.id, "name": i.name, "reason": i.reason}})


class StrandsAgent:
    """An Interlock agent body running the Strands agent ``make_agent`` builds.

    ``make_agent`` is called once per pass and must build the same agent
    (model, tools, system prompt) every time; its conversation comes from the
    snapshot. The run's input is the first prompt (a string, or a dict with
    ``"prompt"``). The run's result is the agent's final text.
    ``request`` maps a Strands interrupt to the Interlock request (message,
    approvers, response schema, deadline).
    """

    def __init__(
        self,
        nc: NATS,
        make_agent: Callable[[], Agent],
        *,
        prefix: str = DEFAULT_PREFIX,
        request: Callable[[StrandsInterrupt], Request] = default_request,
    ) -> None:
        self._js = nc.jetstream()
        self._bucket_name = Namespace(prefix).bucket("strands")
        self._make = make_agent
        self._request = request
        self._kv: Any = None

    async def _bucket(self) -> Any:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self._bucket_name)
            except nats.js.errors.BucketNotFoundError:
                self._kv = await self._js.create_key_value(
                    bucket=self._bucket_name, history=1, description="Strands agent snapshots by run and pass"
                )
        return self._kv

    async def __call__(self, input: Any) -> Any:
        info = interlock.run_info()
        if info is None:
            raise interlock.NotInRun("StrandsAgent runs inside an Interlock worker")
        kv = await self._bucket()
        agent = self._make()
        if info.pass_ == 0:
            prompt = input["prompt"] if isinstance(input, dict) and "prompt" in input else input
            result = await agent.invoke_async(prompt)
        else:
            try:
                entry = await kv.get(f"{info.run_id}.{info.pass_ - 1}")
            except nats.js.errors.KeyNotFoundError:
                raise RuntimeError(f"run {info.run_id}: no Strands snapshot of pass {info.pass_ - 1}") from None
            saved = json.loads(entry.value)
            agent.load_snapshot(Snapshot.from_dict(saved["snapshot"]))
            responses: list[InterruptResponseContent] = []
            for pending in saved["interrupts"]:
                with interlock.tool_call(pending["id"]):
                    # A replay: the request is read only for its call, which
                    # the decision must have approved.
                    call = pending.get("call")
                    req = Request(call=Call(call["tool"], call.get("arguments"))) if call else None
                    try:
                        d = interlock.interrupt(req)
                        response = d.payload if d.has_payload else None
                    except Cancelled as c:
                        response = cancelled_response(c)
                    else:
                        if d.execution_key and (use := tool_use_id(pending["id"])):
                            _register_key(use, d.execution_key)
                responses.append({"interruptResponse": {"interruptId": pending["id"], "response": response}})
            result = await agent.invoke_async(responses)
        if result.stop_reason != "interrupt":
            return str(result).strip()
        stopped = list(result.interrupts or [])
        requests = [self._request(i) for i in stopped]
        kept: list[dict[str, Any]] = []
        for i, req in zip(stopped, requests, strict=True):
            item: dict[str, Any] = {"id": i.id, "name": i.name, "reason": i.reason}
            if req.call is not None:
                item["call"] = {"tool": req.call.tool, "arguments": req.call.arguments}
            kept.append(item)
        snapshot = {
            "version": 1,
            "snapshot": agent.take_snapshot(preset="session").to_dict(),
            "interrupts": kept,
        }
        await kv.put(f"{info.run_id}.{info.pass_}", json.dumps(snapshot).encode())
        ids: list[str] = []
        for i, req in zip(stopped, requests, strict=True):
            with interlock.tool_call(i.id):
                try:
                    interlock.interrupt(req)
                except Suspended as s:
                    ids += s.interrupt_ids
        raise Suspended(ids)


def _register_key(tool_use: str, key: str) -> None:
    """Make ``key`` the execution key of tool use ``tool_use`` in this pass."""
    p = _current.get()
    if p is not None:
        with p.lock:
            p.keys[tool_use] = key
