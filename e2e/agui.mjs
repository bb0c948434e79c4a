// Runs an Interlock agent through the published AG-UI client, HttpAgent:
// receive the interrupt outcome, resume it with "resolved" and with
// "cancelled", and validate every event received against @ag-ui/core's
// event schemas. Run by processor/gateway's TestAGUIClient.
//
//   node agui.mjs <gateway-url>/agui/<agent>
import { HttpAgent } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";

const url = process.argv[2];
const fail = (msg) => { console.error(msg); process.exit(1); };
let checked = 0;

async function run(agent, params) {
  const events = [];
  await agent.runAgent(params, {
    onEvent({ event }) {
      const parsed = EventSchemas.safeParse(event);
      if (!parsed.success) fail(`event ${event.type} fails the @ag-ui/core schema: ${JSON.stringify(parsed.error.issues)}`);
      checked++;
      events.push(event);
    },
  });
  return events;
}

const finished = (events) => events.find((e) => e.type === "RUN_FINISHED") || fail("no RUN_FINISHED: " + JSON.stringify(events));

for (const [status, payload, want] of [["resolved", true, true], ["cancelled", undefined, false]]) {
  const agent = new HttpAgent({ url, threadId: "node-" + status });
  let events = await run(agent, { runId: "first-" + status });
  const first = finished(events);
  if (first.outcome?.type !== "interrupt") fail("expected an interrupt outcome, got " + JSON.stringify(first.outcome));
  if (events.some((e) => e.type === "RUN_FINISHED" && e.outcome?.type === "success")) fail("an interrupted run reported success");
  const [interrupt] = first.outcome.interrupts;
  if (interrupt.toolCallId !== "call_1") fail("interrupt not bound to its tool call: " + JSON.stringify(interrupt));

  const entry = { interruptId: interrupt.id, status };
  if (payload !== undefined) entry.payload = payload;
  events = await run(agent, { runId: "second-" + status, resume: [entry] });
  const second = finished(events);
  if (second.outcome && second.outcome.type !== "success") fail("resumed run did not succeed: " + JSON.stringify(second.outcome));
  if (second.result?.refunded !== want) fail(`${status}: result ${JSON.stringify(second.result)}`);
  if (events.some((e) => e.type === "TOOL_CALL_START")) fail("the replay sent the tool call again");
  const result = events.find((e) => e.type === "TOOL_CALL_RESULT");
  if (!result || result.toolCallId !== "call_1") fail("no tool result against call_1");
}
console.log(`OK ${checked} events valid`);
