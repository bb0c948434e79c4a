// The official MCP TypeScript SDK's client, used by cmd/interlock's
// TestMCPProxyTasksTypeScript: it connects to `interlock mcp proxy` (over
// stdio, spawning it, or over streamable HTTP), lists the tools, calls an
// ungated one as a plain call (when named), and a gated one as a
// 2025-11-25 task with client.experimental.tasks.callToolStream. Each
// message is printed as one JSON line on stdout for the Go test to read.
//
// Usage: node client.mjs http URL GATED_TOOL [UNGATED_TOOL]
//        node client.mjs stdio GATED_TOOL COMMAND ARGS...
//        node client.mjs resume URL TASK_ID   (poll a task another process
//        created: tasks/get until finished, then tasks/result)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const [mode, ...rest] = process.argv.slice(2);
let transport, gated, ungated;
if (mode === "http") {
  const [url, g, u] = rest;
  transport = new StreamableHTTPClientTransport(new URL(url));
  gated = g;
  ungated = u;
} else if (mode === "stdio") {
  const [g, command, ...args] = rest;
  transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
  gated = g;
} else if (mode === "resume") {
  const [url, taskId] = rest;
  const client = new Client({ name: "interlock-ts-test", version: "1" }, { capabilities: {} });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  for (;;) {
    const task = await client.experimental.tasks.getTask(taskId);
    say({ type: "taskStatus", taskId: task.taskId, status: task.status });
    if (task.status !== "working" && task.status !== "input_required") break;
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 1000));
  }
  const res = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
  say({ type: "result", text: res.content?.[0]?.text ?? null, isError: res.isError ?? false });
  await client.close();
  process.exit(0);
} else {
  throw new Error(`unknown mode ${mode}`);
}

const client = new Client({ name: "interlock-ts-test", version: "1" }, { capabilities: {} });
await client.connect(transport);
say({ type: "connected", protocolVersion: transport.protocolVersion ?? null, tasks: client.getServerCapabilities()?.tasks ?? null });
const { tools } = await client.listTools();
say({ type: "tools", tools: tools.map((t) => ({ name: t.name, taskSupport: t.execution?.taskSupport ?? null })) });
if (ungated) {
  const res = await client.callTool({ name: ungated, arguments: { target: "moon" } });
  say({ type: "plain", text: res.content?.[0]?.text ?? null, isError: res.isError ?? false });
}
for await (const m of client.experimental.tasks.callToolStream({ name: gated, arguments: { target: "moon" } })) {
  switch (m.type) {
    case "taskCreated":
    case "taskStatus":
      say({ type: m.type, taskId: m.task.taskId, status: m.task.status });
      break;
    case "result":
      say({ type: "result", text: m.result.content?.[0]?.text ?? null, isError: m.result.isError ?? false });
      break;
    case "error":
      say({ type: "error", message: String(m.error?.message ?? m.error) });
      break;
  }
}
await client.close();
