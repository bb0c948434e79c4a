"""Subject names and token validation, as in the Go ``subjects`` package."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidToken

DEFAULT_PREFIX = "interlock"
MAX_TOKEN_LEN = 128
NO_RUN = "_"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")


def validate_token(kind: str, value: str) -> None:
    """Raise :class:`InvalidToken` unless ``value`` is 1 to 128 bytes of ASCII
    letters, digits, '-' and '_'."""
    if not isinstance(value, str) or value == "":
        raise InvalidToken(f"{kind} is empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_TOKEN_LEN:
        raise InvalidToken(f"{kind} is {size} bytes, longer than {MAX_TOKEN_LEN}")
    if _TOKEN.fullmatch(value) is None:
        bad = next(c for c in value if _TOKEN.fullmatch(c) is None)
        raise InvalidToken(f"{kind} {value!r} has {bad!r}; use letters, digits, '-' and '_'")


@dataclass(frozen=True)
class Namespace:
    """The subjects under one prefix (one or more tokens joined by '.')."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        for part in self.prefix.split("."):
            validate_token("prefix token", part)

    def _join(self, *tokens: str) -> str:
        return ".".join((self.prefix, *tokens))

    def stream(self, name: str) -> str:
        """Server-side name of stream ``name`` (WORK, RUNS, DECISIONS, EVENTS, DLQ, TIMERS)."""
        return self.prefix.replace(".", "_").upper() + "_" + name

    def bucket(self, name: str) -> str:
        """Server-side name of KV bucket ``name`` (runs, pending, ...)."""
        return self.prefix.replace(".", "_") + "_" + name

    def work(self, agent: str) -> str:
        """Where the coordinator publishes an agent's replays."""
        validate_token("agent", agent)
        return self._join("work", agent)

    def start(self, agent: str) -> str:
        """Where whoever starts a run publishes its first pass."""
        validate_token("agent", agent)
        return self._join("start", agent)

    def start_as(self, agent: str, requester: str) -> str:
        """Where ``requester`` starts a run of ``agent`` (protocol version 2):
        ``<prefix>.start.<agent>.<requester>``. NATS permissions bind the last
        token to the user who may publish it, and the worker reports it as
        the run's requester, whom a decision policy can exclude from
        approving."""
        validate_token("agent", agent)
        validate_token("requester", requester)
        return self._join("start", agent, requester)

    def requester_of(self, agent: str, subject: str) -> str | None:
        """The requester a first pass of ``agent`` received on ``subject``
        names: "" on ``start.<agent>``, the last token on
        ``start.<agent>.<requester>``, None on any other subject. A start
        subject whose requester token the protocol refuses (the worker's
        filter matches any token there) raises InvalidToken: the item is
        malformed, not a replay."""
        start = self.start(agent)
        if subject == start:
            return ""
        if subject.startswith(start + "."):
            token = subject[len(start) + 1 :]
            validate_token("requester", token)
            return token
        return None

    def agent_work(self, agent: str) -> list[str]:
        """The subjects of ``agent``'s work, replays, then first passes, then
        first passes started by a requester: the filter of the durable
        consumer its workers share (:func:`worker_durable`)."""
        return [self.work(agent), self.start(agent), self.start(agent) + ".*"]

    def backlog(self) -> list[str]:
        """The wildcards matching every agent's waiting work, first passes then
        replays; the token after the kind is the agent (a first pass's subject
        may end in its requester)."""
        return [self.all("start"), self.all("work")]

    def _agent_run(self, kind: str, agent: str, run: str) -> str:
        validate_token("agent", agent)
        validate_token("run id", run)
        return self._join(kind, agent, run)

    def suspended(self, agent: str, run: str) -> str:
        return self._agent_run("suspended", agent, run)

    def ask(self, agent: str, run: str) -> str:
        """The subject a worker asks on, before suspending, whether an
        operator rule settles an interrupt of ``run`` (protocol version 2)."""
        return self._agent_run("ask", agent, run)

    def completed(self, agent: str, run: str) -> str:
        return self._agent_run("completed", agent, run)

    def failed(self, agent: str, run: str) -> str:
        return self._agent_run("failed", agent, run)

    def resume(self, run: str, approver: str | None = None) -> str:
        """The resume subject of ``run``; with ``approver``, the one that
        identifies the decider (NATS permissions bind it to the user)."""
        validate_token("run id", run)
        if approver is None or approver == "":
            return self._join("resume", run)
        validate_token("approver", approver)
        return self._join("resume", run, approver)

    def events(self, run: str, event_type: str) -> str:
        if run != NO_RUN:
            validate_token("run id", run)
        validate_token("event type", event_type)
        return self._join("events", run, event_type)

    def observed(self, run: str, event_type: str) -> str:
        """The subject a role reports an observation of ``event_type`` on."""
        if run != NO_RUN:
            validate_token("run id", run)
        if event_type not in OBSERVATION_TYPES:
            raise InvalidToken(f"{event_type!r} is not an observation type")
        return self._join("observed", run, event_type)

    def stored_event(self, subject: str, data: bytes) -> dict[str, Any] | None:
        """The event stored as ``data`` under ``subject``, or None when the
        subject is not an events subject or the body is not a JSON object.
        Its type and run come from the subject, which NATS permissions vouch
        for, never from the body; a verdict is kept only on decision events,
        the observer of an observation is the one role that may publish it,
        and a run record's sealed copy (``record``) is left out."""
        rest = subject.removeprefix(self.prefix + ".")
        tokens = rest.split(".")
        if rest == subject or len(tokens) != 3 or tokens[0] != "events":
            return None
        try:
            ev = json.loads(data or b"")
        except ValueError:
            return None
        if not isinstance(ev, dict):
            return None
        run, event_type = tokens[1], tokens[2]
        body_run = ev.get("runId")
        if run != NO_RUN or _is_token(body_run):
            ev["runId"] = run
        ev["type"] = event_type
        if event_type not in DECISION_EVENT_TYPES:
            ev.pop("verdict", None)
        ev.pop("observer", None)
        ev.pop("record", None)  # a run record's sealed copy: the coordinator's alone
        if event_type in OBSERVATION_TYPES:
            ev["observer"] = OBSERVATION_TYPES[event_type]
        return ev

    def run_events(self, run: str) -> str:
        validate_token("run id", run)
        return self._join("events", run, "*")

    def run_outcomes(self, agent: str, run: str) -> str:
        validate_token("agent", agent)
        validate_token("run id", run)
        return self._join("*", agent, run)

    def agui(self, agent: str, run: str) -> str:
        """``<prefix>.agui.<agent>.<run>``: the AG-UI events of agent's run."""
        return self._agent_run("agui", agent, run)

    def dead_letter(self, source: str) -> str:
        validate_token("dead-letter source", source)
        return self._join("dlq", source)

    def all(self, kind: str) -> str:
        return self._join(kind, ">")


#: Event types other roles report as observations, with the one role whose
#: NATS permissions let it publish each.
OBSERVATION_TYPES = {"notification_failed": "notifier", "access_refused": "gateway"}

#: Event types that carry a verdict.
DECISION_EVENT_TYPES = frozenset({"decision_accepted", "decision_rejected", "decision_duplicate", "vote_recorded"})


def _is_token(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        validate_token("run id", value)
    except InvalidToken:
        return False
    return True


def worker_durable(agent: str) -> str:
    """The durable consumer on the work stream through which ``agent``'s
    workers take its work (:meth:`Namespace.agent_work`), in every SDK; it also
    names their dead letters' source."""
    return "worker_" + agent


ANONYMOUS_INBOX = "anonymous"


def inbox_prefix(identity: str) -> str:
    """The inbox prefix of NATS user ``identity``: ``_INBOX.<identity>``
    (``_INBOX.anonymous`` for ``""``). The coordinator sends the verdict of a
    decision published as ``identity`` only under it."""
    return "_INBOX." + (identity or ANONYMOUS_INBOX)
