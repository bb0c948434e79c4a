/**
 * The example runs (so it cannot rot): it prints the approve command for
 * its tool's suspension; the Go CLI answers with a payload, which reaches
 * the tool as its resume data.
 */

import { strict as assert } from "node:assert";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { agentName, Script, Server } from "@interlock/testing";

const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
const NODE_OK = major > 22 || (major === 22 && minor >= 13);

describe("the Mastra example", { skip: NODE_OK ? false : "Mastra needs Node 22.13" }, () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    await server.stop();
  });

  test("prints the approve command; the Go CLI's answer reaches the suspended tool", async () => {
    const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "refund-tool.js");
    const script = new Script(process.execPath, [example], { NATS_URL: server.url, INTERLOCK_AGENT: agentName(), CALL_ID: `${agentName()}-call` });
    try {
      const m = await script.waitFor(/interlock approve (\S+) --payload '\{"amount": 35\}'/);
      assert.match(script.output, /How much should order A-1 get back\? \(run \S+\) waits for a decision:/);
      server.cli("approve", m[1]!, "--payload", '{"amount": 35}', "--approver", "ada");
      await script.waitFor(/^done: .*$/m);
      assert.match(script.output, /done: \{"type":"text","value":"refunded 35 for A-1"\}/);
      assert.equal(await script.exited, 0);
    } finally {
      script.kill();
    }
  });
});
