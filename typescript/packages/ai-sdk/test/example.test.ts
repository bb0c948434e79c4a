/**
 * The example runs (so it cannot rot): it prints an approve command for
 * each of its two parallel tool calls, asked together; the Go CLI decides
 * them in reverse order, and the generation ends with the approved refund
 * done and the denied one not.
 */

import { strict as assert } from "node:assert";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { agentName, Script, Server } from "@interlock/testing";

const NODE_22 = Number(process.versions.node.split(".")[0]) >= 22;

describe("the AI SDK example", { skip: NODE_22 ? false : "the AI SDK 7 needs Node 22" }, () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    await server.stop();
  });

  test("prints both approve commands at once; decided in reverse order from the Go CLI, it finishes", async () => {
    const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "approve-tools.js");
    const prefix = agentName();
    const script = new Script(process.execPath, [example], { NATS_URL: server.url, INTERLOCK_AGENT: agentName(), CALL_PREFIX: prefix });
    try {
      const m = await script.waitFor(/A-1.*waits for a decision:\n\s+interlock approve (\S+)\n[\s\S]*A-2.*waits for a decision:\n\s+interlock approve (\S+)\n/);
      const [first, second] = [m[1]!, m[2]!];
      server.cli("deny", second, "--approver", "ada", "--comment", "too small");
      server.cli("approve", first, "--approver", "ada");
      await script.waitFor(/^done: .*$/m);
      assert.match(script.output, new RegExp(`done: ${prefix}-A-1: \\{"type":"text","value":"refunded 40 for A-1"\\}; ${prefix}-A-2: .*too small`));
      assert.equal(await script.exited, 0);
    } finally {
      script.kill();
    }
  });
});
