"""The UiPath request: a tool body that tells a person "please approve"
only on the suspend pass, never again when the run replays.

Two ways, both in one tool call:

- ``is_resuming()``: the predicate ``interrupt`` uses. False on the pass that
  will suspend, true on the replay that gets the decision, so the notice goes
  out once per interrupt and costs nothing to record.
- ``step``: the notice is a journaled step, recorded with the suspension;
  every replay returns the recorded result (here, the notice's id) without
  sending again. Use it when the body needs the notice's result later.

A crash after the notice and before the suspension is stored runs the pass
again, so the notice can go out twice in that window with either way; make
the notice idempotent (key it by ``run_info().run_id``) if that matters.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import interlock
from interlock import AgentFunc, Cancelled, Request

Notify = Callable[[str, str], Awaitable[str]]
"""Sends a notice (to, text) and returns its id: chat, e-mail, a ticket."""


def refund_tool_with_is_resuming(notify: Notify) -> AgentFunc:
    async def body(order: dict[str, Any]) -> dict[str, Any]:
        with interlock.tool_call("call_issue_refund"):
            if not interlock.is_resuming():
                await notify("finance", f"Please approve the refund of {order['amount']} for {order['id']}")
            try:
                d = interlock.interrupt(Request(message=f"Refund {order['amount']} for {order['id']}?"))
            except Cancelled as c:
                return {"refunded": False, "why": c.comment}
        return {"refunded": True, "by": d.approver}

    return body


def refund_tool_with_step(notify: Notify) -> AgentFunc:
    async def body(order: dict[str, Any]) -> dict[str, Any]:
        with interlock.tool_call("call_issue_refund"):
            notice = await interlock.step(
                "notify-finance",
                lambda: notify("finance", f"Please approve the refund of {order['amount']} for {order['id']}"),
            )
            try:
                d = interlock.interrupt(Request(message=f"Refund {order['amount']} for {order['id']}?"))
            except Cancelled as c:
                return {"refunded": False, "why": c.comment, "notice": notice}
        return {"refunded": True, "by": d.approver, "notice": notice}

    return body
