"""Claude Agent SDK on Interlock: a ``can_use_tool`` permission callback that
asks a person through Interlock and answers allow, deny or allow with
edited input.

Each permission request becomes an Interlock run of a small permissions
agent (default ``claude_permissions``) whose one pass raises one interrupt:
its suspension and its decision live in JetStream, so neither is lost when
the process asking, the worker or the coordinator restarts. The run id is
derived from the Claude session id and the tool use id
(:func:`permission_run_id`), so asking again for the same tool use (after a
restart) finds the same run: the decision made meanwhile, or the same
pending question, never a second one.

Decisions map to the SDK's results:

- the default request gates the call (protocol version 2): the interrupt
  carries the tool and input with their call digest, so every vote is bound
  to them; resolved with edited ``arguments`` (``interlock approve RUN
  --arguments '{...}'``, or ``Client.approve(..., arguments=...)``): allow,
  with the edited input, whose own digest the decision approved; resolved
  with a JSON object payload instead (a version 1 edit, ``--edit``): deny,
  for that edit is bound to no digest and running the asked input would
  ignore it; resolved otherwise: allow, input unchanged. Before answering allow, the callback
  checks that the input it allows has the approved digest (a decision that
  approved another call is a deny). A request without a ``call`` keeps the
  version 1 mapping: a JSON object payload is the edited input;
- a quorum: set ``policy`` on the request (``request=`` callback), e.g.
  ``Policy(approvals=2)``;
- cancelled (denied or expired), a failed run, or no decision within
  ``timeout``: deny, with the approver's comment. Silence is never approval.
- a run under this id that asked another question (another tool or input):
  deny; an approval never carries over to a call it was not given for.

Wire it up: register :meth:`ClaudePermissions.agent` with an Interlock
:class:`~interlock.Worker` (in this process or any other), and pass the
instance as ``ClaudeAgentOptions(can_use_tool=...)``.

A restarted process picks the session up by resuming the Claude session
(``ClaudeAgentOptions(resume=session_id)``, with
``session_store=JetStreamSessionStore(nc)`` when the transcript must survive
the machine: it keeps the transcript in JetStream too) and passing the same
:class:`ClaudePermissions`: when the resumed session asks again for the
pending tool use, the callback returns the decision recorded in JetStream,
or waits for it. :meth:`ClaudePermissions.pending` lists the questions that
wait (``interlock pending --agent claude_permissions`` does too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import nats.js.errors
from claude_agent_sdk import (
    PermissionResultAllow,
    PermissionResultDeny,
    SessionKey,
    SessionStore,
    SessionStoreEntry,
    ToolPermissionContext,
)
from nats.aio.client import Client as NATS
from nats.js import api

import interlock
from interlock import AgentFunc, Call, Cancelled, Client, Request, RunNotFound

from .._subjects import DEFAULT_PREFIX

PermissionResult = PermissionResultAllow | PermissionResultDeny
DEFAULT_AGENT = "claude_permissions"


def permission_run_id(session_id: str, tool_use_id: str) -> str:
    """The run id of the permission request for one tool use of a session."""
    digest = hashlib.sha256(f"{session_id}\x00{tool_use_id}".encode()).hexdigest()[:32]
    return "claude-" + digest


def default_request(question: dict[str, Any]) -> Request:
    """The Interlock request for a permission question (the permissions run's
    input: ``tool``, ``input``, ``title``, ``sessionId``, ``toolUseId`` and
    the context's ``agentId``, ``blockedPath``, ``decisionReason``)."""
    message = question.get("title") or f"Claude wants to use {question['tool']}"
    metadata = {"tool": question["tool"], "arguments": question["input"]}
    for k in ("sessionId", "agentId", "blockedPath", "decisionReason"):
        if question.get(k):
            metadata[k] = question[k]
    return Request(
        message=message, reason="tool_call", metadata=metadata, call=Call(question["tool"], question["input"])
    )


class ClaudePermissions:
    """A ``can_use_tool`` callback for one Claude session, asking through
    Interlock. ``request`` maps a question to the Interlock request (set
    ``approvers``, a deadline with ``timeout``/``on_expiry``, a schema).
    ``timeout`` bounds how long the callback waits for a decision (None:
    as long as it takes); then it denies."""

    def __init__(
        self,
        nc: NATS,
        *,
        session_id: str,
        agent: str = DEFAULT_AGENT,
        prefix: str = DEFAULT_PREFIX,
        inbox_prefix: str | None = None,
        request: Callable[[dict[str, Any]], Request] = default_request,
        timeout: float | None = None,
    ) -> None:
        interlock.validate_token("agent", agent)
        self.session_id = session_id
        self.agent_name = agent
        self._client = Client(nc, prefix=prefix, inbox_prefix=inbox_prefix)
        self._request = request
        self._timeout = timeout

    @property
    def agent(self) -> AgentFunc:
        """The permissions agent's body, to register with a Worker under
        ``agent_name``. Any permissions object can serve it: the question
        travels in the run's input."""
        return _ask(self._request)

    async def __call__(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        tool_use_id = context.tool_use_id or ""
        run_id = permission_run_id(self.session_id, tool_use_id)
        question: dict[str, Any] = {
            "tool": tool_name,
            "input": tool_input,
            "sessionId": self.session_id,
            "toolUseId": tool_use_id,
        }
        for key, value in (
            ("title", context.title),
            ("agentId", context.agent_id),
            ("blockedPath", context.blocked_path),
            ("decisionReason", context.decision_reason),
        ):
            if value:
                question[key] = value
        try:
            await self._client.run(run_id)
        except RunNotFound:
            await self._client.start(self.agent_name, question, run_id=run_id)
        try:
            rec = await self._client.wait(run_id, timeout=self._timeout if self._timeout is not None else 10**9)
        except TimeoutError:
            return PermissionResultDeny(
                message=f"no decision within {self._timeout}s; denied (silence is not approval)"
            )
        asked = rec.raw.get("input") or {}
        if asked.get("tool") != tool_name or asked.get("input") != tool_input:
            # The decision answers another question asked under this id:
            # it never approves this one.
            return PermissionResultDeny(message=f"permission run {run_id} decided a different tool call; denied")
        if rec.status != "completed" or not isinstance(rec.result, dict):
            return PermissionResultDeny(message=f"permission run {run_id} {rec.status}: {rec.error}")
        if rec.result.get("behavior") == "allow":
            updated = rec.result.get("updatedInput")
            approved = rec.result.get("callDigest")
            if approved is not None:
                # The input about to run must be the call the approvers
                # approved (this stops mistakes; the agent's own process
                # could skip it).
                try:
                    interlock.check_call(
                        interlock.Decision(interrupt_id=run_id, status="resolved", call_digest=approved),
                        tool_name,
                        updated if updated is not None else tool_input,
                    )
                except (interlock.CallMismatch, interlock.InvalidRequest) as e:
                    return PermissionResultDeny(message=f"permission run {run_id}: {e}; denied")
            return PermissionResultAllow(updated_input=updated)
        return PermissionResultDeny(message=str(rec.result.get("message", "denied")))

    async def pending(self) -> list[interlock.PendingInterrupt]:
        """The permission questions of this session that wait for a decision."""
        return [
            p
            for p in await self._client.pending()
            if p.agent == self.agent_name and (p.metadata or {}).get("sessionId") == self.session_id
        ]

    async def close(self) -> None:
        await self._client.close()


def _ask(request: Callable[[dict[str, Any]], Request]) -> AgentFunc:
    async def body(question: dict[str, Any]) -> dict[str, Any]:
        with interlock.tool_call(question["toolUseId"]):
            req = request(question)
            try:
                # On the replay this checks the approved call (CallMismatch
                # fails the run: a deny).
                d = interlock.interrupt(req)
            except Cancelled as c:
                why = c.comment or ("nobody decided in time" if c.reason == "expired" else "denied")
                return {"behavior": "deny", "message": why, "approver": c.approver}
        out: dict[str, Any] = {"behavior": "allow", "approver": d.approver}
        if req.call is not None:
            if d.arguments is None and isinstance(d.payload, dict):
                # An edit sent as the answer is bound to no digest; running
                # the asked input would ignore it.
                return {
                    "behavior": "deny",
                    "message": "the approver edited the input as an answer; edits of a gated call are sent as "
                    "arguments (interlock approve --arguments)",
                    "approver": d.approver,
                }
            out["callDigest"] = d.call_digest
            if d.arguments is not None:
                out["updatedInput"] = d.arguments
            if d.execution_key:
                out["executionKey"] = d.execution_key
        elif isinstance(d.payload, dict):
            out["updatedInput"] = d.payload
        return out

    return body


class JetStreamSessionStore(SessionStore):
    """A Claude Agent SDK ``SessionStore`` keeping session transcripts in
    JetStream (``ClaudeAgentOptions(session_store=...)``), so a process on
    another machine can resume a session (``resume=session_id``).

    Entries go to the stream ``<PREFIX>_CLAUDE_SESSIONS`` (created when
    missing: file storage, limits retention, kept until deleted; set
    ``max_age`` for a retention window), one message per entry on
    ``<prefix>.claude.<tenant>.<digest of the session key>``, in commit
    order. An entry's ``uuid`` is its idempotency key: the stream's duplicate
    window drops a resend, and ``load`` keeps the first of any later copy.
    ``tenant`` (a token) separates stores sharing one server.
    """

    # The optional methods stay the protocol's own "not implemented" markers.
    list_sessions = SessionStore.list_sessions
    list_session_summaries = SessionStore.list_session_summaries
    delete = SessionStore.delete
    list_subkeys = SessionStore.list_subkeys

    def __init__(self, nc: NATS, *, prefix: str = DEFAULT_PREFIX, tenant: str = "default", max_age: float = 0) -> None:
        interlock.validate_token("tenant", tenant)
        ns = interlock.Namespace(prefix)
        self._js = nc.jetstream()
        self._stream = ns.stream("CLAUDE_SESSIONS")
        self._base = f"{ns.prefix}.claude"
        self._tenant = tenant
        self._max_age = max_age
        self._ready = False

    def _subject(self, key: SessionKey) -> str:
        parts = [key["project_key"], key["session_id"], key.get("subpath") or ""]
        digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]
        return f"{self._base}.{self._tenant}.{digest}"

    async def _ensure(self) -> None:
        if self._ready:
            return
        try:
            await self._js.stream_info(self._stream)
        except nats.js.errors.NotFoundError:
            await self._js.add_stream(
                api.StreamConfig(
                    name=self._stream,
                    subjects=[f"{self._base}.>"],
                    storage=api.StorageType.FILE,
                    retention=api.RetentionPolicy.LIMITS,
                    max_age=self._max_age or None,
                    duplicate_window=600,
                )
            )
        self._ready = True

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch of transcript entries, in order."""
        await self._ensure()
        subject = self._subject(key)
        for entry in entries:
            headers = None
            if entry.get("uuid"):
                headers = {"Nats-Msg-Id": f"{subject}:{entry['uuid']}"}
            await self._js.publish(subject, json.dumps(entry).encode(), headers=headers)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The session's entries in commit order, or None if never written."""
        await self._ensure()
        subject = self._subject(key)
        out: list[SessionStoreEntry] = []
        seen: set[str] = set()
        seq = 1
        while True:
            try:
                m = await self._js.get_msg(self._stream, seq, subject=subject, next=True)
            except nats.js.errors.NotFoundError:
                break
            entry = json.loads(m.data or b"null")
            uid = entry.get("uuid") if isinstance(entry, dict) else None
            if not uid or uid not in seen:
                out.append(entry)
                if uid:
                    seen.add(uid)
            if m.seq is None:
                break
            seq = m.seq + 1
        return out or None
