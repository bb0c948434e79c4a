// Runs Interlock agents through the published AG-UI client, HttpAgent, the
// way a front end does, and validates every event received against
// @ag-ui/core's event schemas. Run by processor/agui's TestAGUIClient,
// which registers the agents and answers the "WAIT" lines this script
// prints (deciding from another path, waiting for an expiry) with "go".
//
//   node agui.mjs <gateway-url> <eve-token> <ada-token> <mal-token>
import { createInterface } from "node:readline";
import { HttpAgent } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";

const [base, eve, ada, mal] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL " + msg); process.exit(1); };
let checked = 0;

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
// wait asks the Go test to do something outside AG-UI and waits until it has.
async function wait(what) {
  console.log("WAIT " + what);
  const { value } = await lines.next();
  if (value !== "go") fail(`${what}: the test answered ${value}`);
}

const agentFor = (agent, threadId, token, initialMessages) =>
  new HttpAgent({ url: `${base}/agui/${agent}`, threadId, initialMessages,
    headers: token ? { Authorization: `Bearer ${token}` } : {} });

// run sends one RunAgentInput; it returns the events received and the
// error the client raised, if any.
async function run(agent, params) {
  const events = [];
  let error;
  const timeout = AbortSignal.timeout(20000); // an answer, never a hang
  try {
    await agent.runAgent({ ...params, abortController: { signal: timeout, abort() {} } }, {
      onEvent({ event }) {
        const parsed = EventSchemas.safeParse(event);
        if (!parsed.success) fail(`event ${event.type} fails the @ag-ui/core schema: ${JSON.stringify(parsed.error.issues)}`);
        checked++;
        events.push(event);
      },
      onRunFailed({ error: e }) { error = e; },
    });
  } catch (e) {
    error = e;
  }
  if (timeout.aborted) fail("no answer within 20s: " + JSON.stringify(params));
  return { events, error };
}

const finished = ({ events, error }) =>
  events.find((e) => e.type === "RUN_FINISHED") || fail("no RUN_FINISHED: " + JSON.stringify(events) + " " + error);
const runError = ({ events }, code) => {
  if (events.length !== 1 || events[0].type !== "RUN_ERROR") fail(`expected one RUN_ERROR ${code}, got ${JSON.stringify(events)}`);
  if (events[0].code !== code) fail(`expected code ${code}, got ${JSON.stringify(events[0])}`);
};
const count = ({ events }, type, toolCallId) =>
  events.filter((e) => e.type === type && (toolCallId === undefined || e.toolCallId === toolCallId)).length;

// consistent: every tool message follows an assistant message holding its
// tool call. It returns the tool call ids.
function consistent(messages, where) {
  const calls = new Set();
  for (const m of messages) {
    if (m.role === "assistant") for (const tc of m.toolCalls || []) calls.add(tc.id);
    if (m.role === "tool" && !calls.has(m.toolCallId)) fail(`${where}: tool result ${m.id} without its tool call: ${JSON.stringify(messages)}`);
  }
  return [...calls];
}

// The round trip: interrupt outcome, resume with resolved and cancelled.
for (const [status, payload, want] of [["resolved", true, true], ["cancelled", undefined, false]]) {
  const agent = agentFor("assistant", "node-" + status, eve);
  let r = await run(agent, { runId: "first-" + status });
  const first = finished(r);
  if (first.outcome?.type !== "interrupt") fail("expected an interrupt outcome, got " + JSON.stringify(first.outcome));
  if (r.events.some((e) => e.type === "RUN_FINISHED" && e.outcome?.type === "success")) fail("an interrupted run reported success");
  const [interrupt] = first.outcome.interrupts;
  if (interrupt.toolCallId !== "call_1") fail("interrupt not bound to its tool call: " + JSON.stringify(interrupt));

  const entry = { interruptId: interrupt.id, status };
  if (payload !== undefined) entry.payload = payload;
  r = await run(agent, { runId: "second-" + status, resume: [entry] });
  const second = finished(r);
  if (second.outcome && second.outcome.type !== "success") fail("resumed run did not succeed: " + JSON.stringify(second.outcome));
  if (second.result?.refunded !== want) fail(`${status}: result ${JSON.stringify(second.result)}`);
  if (count(r, "TOOL_CALL_START")) fail("the replay sent the tool call again");
  if (count(r, "TOOL_CALL_RESULT", "call_1") !== 1) fail("no tool result against call_1");
  consistent(agent.messages, status + " round trip");
}

// 1. Transcript: the snapshot keeps the pass's assistant message and tool
// calls, and the resumed run's transcript holds no result without its call.
{
  const agent = agentFor("sequential", "node-transcript", eve);
  const r = await run(agent, { runId: "t1" });
  const [interrupt] = finished(r).outcome.interrupts;
  const calls = consistent(agent.messages, "first pass");
  if (calls.join() !== "tool_a,tool_b") fail("the snapshot lost the tool calls: " + JSON.stringify(agent.messages));
  if (!agent.messages.some((m) => m.id === "s1" && m.content === "One, then the other.")) fail("the snapshot lost the assistant's text");
  const r2 = await run(agent, { runId: "t2", resume: [{ interruptId: interrupt.id, status: "resolved" }] });
  if (finished(r2).outcome?.type !== "interrupt") fail("the second pass should ask again");
  consistent(agent.messages, "resumed run");
  if (agent.messages.filter((m) => m.role === "tool").length !== 1) fail("tool_a's result is not in the transcript: " + JSON.stringify(agent.messages));
}

// 2. Expiry: resolving an expired interrupt gets "expired" before the run
// starts; cancelling it is accepted and the replay streams.
{
  const agent = agentFor("assistant", "node-expiry", eve);
  const [interrupt] = finished(await run(agent, { runId: "e1", forwardedProps: { Timeout: "1s" } })).outcome.interrupts;
  if (!interrupt.expiresAt) fail("no expiresAt");
  await wait("expired " + interrupt.id);
  // A client that does not check expiresAt itself gets the server's answer.
  const fresh = agentFor("assistant", "node-expiry", eve, agent.messages);
  runError(await run(fresh, { runId: "e2", resume: [{ interruptId: interrupt.id, status: "resolved", payload: true }] }), "expired");
  const r = await run(agent, { runId: "e3", resume: [{ interruptId: interrupt.id, status: "cancelled" }] });
  const done = finished(r);
  if (done.result?.refunded !== false) fail("cancelled expired interrupt: " + JSON.stringify(done));
  if (count(r, "TOOL_CALL_RESULT", "call_1") !== 1) fail("the replay's events did not stream: " + JSON.stringify(r.events));
}

// 3. No lost events: results emitted between decided interrupts arrive, and
// what a run emitted while no client listened reaches the next run.
{
  const agent = agentFor("gated", "node-gated", eve);
  const ins = finished(await run(agent, { runId: "g1" })).outcome.interrupts;
  const r = await run(agent, { runId: "g2", resume: ins.map((i) => ({ interruptId: i.id, status: "resolved" })) });
  if (count(r, "TOOL_CALL_RESULT", "tool_a") !== 1 || count(r, "TOOL_CALL_RESULT", "tool_b") !== 1)
    fail("a tool result was lost: " + JSON.stringify(r.events.map((e) => e.type)));
  if (count(r, "TOOL_CALL_START")) fail("the replay sent the tool calls again");

  const away = agentFor("assistant", "node-away", eve);
  const [interrupt] = finished(await run(away, { runId: "w1" })).outcome.interrupts;
  await wait("decide " + interrupt.id);
  // The page reloads: a new client with the transcript it had.
  const back = agentFor("assistant", "node-away", eve, away.messages);
  const r2 = await run(back, { runId: "w2" });
  if (count(r2, "TOOL_CALL_RESULT", "call_1") < 1) fail("the events emitted while away were lost: " + JSON.stringify(r2.events.map((e) => e.type)));
  if (!back.messages.some((m) => m.role === "tool" && m.content === "refunded")) fail("the result is not in the transcript");
  consistent(back.messages, "after coming back");
}

// 4. Batch atomicity includes authorization.
{
  const agent = agentFor("assistant", "node-authz", eve);
  const ins = finished(await run(agent, { runId: "b1", forwardedProps: { Two: true, Approvers: ["ada"] } })).outcome.interrupts;
  const fresh = agentFor("assistant", "node-authz", eve, agent.messages);
  runError(await run(fresh, { runId: "b2", resume: ins.map((i) => ({ interruptId: i.id, status: "resolved", payload: true })) }), "not_allowed");
  await wait("unchanged-then-ada-decides " + ins[1].id);
  const r = await run(fresh, { runId: "b3", resume: [{ interruptId: ins[0].id, status: "resolved", payload: true }] });
  if (finished(r).outcome?.type !== "success") fail("the allowed batch did not go through");
}

// 5. Ownership.
{
  const anon = await run(agentFor("assistant", "node-own", ""), { runId: "o1" });
  if (!String(anon.error).includes("401")) fail("no token should get 401: " + anon.error);
  runError(await run(agentFor("assistant", "node-own", mal), { runId: "o1" }), "agent_not_allowed");
  const mine = agentFor("assistant", "node-own", eve);
  const [interrupt] = finished(await run(mine, { runId: "o1" })).outcome.interrupts;
  runError(await run(agentFor("assistant", "node-own", ada), { runId: "o2" }), "not_owner");
  const r = await run(mine, { runId: "o3", resume: [{ interruptId: interrupt.id, status: "resolved", payload: true }] });
  if (finished(r).outcome?.type !== "success") fail("resume failed");
  // Re-sending the first request, now finished: answered at once.
  const again = await run(mine, { runId: "o1" });
  if (finished(again).outcome?.type !== "success") fail("re-sent request: " + JSON.stringify(again.events));
  if (count(again, "TOOL_CALL_RESULT") || count(again, "TOOL_CALL_START")) fail("re-sent request sent events twice");
}
console.log(`OK ${checked} events valid`);
process.exit(0);
