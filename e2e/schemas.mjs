// Compiles every JSON Schema in docs/schema with ajv (draft 2020-12) in
// strict mode (strictSchema, strictTypes, strictTuples, strictRequired all
// on) with ajv-formats, each registered under its $id and nothing fetched,
// and checks the conformance vectors' valid messages against them. Run by
// internal/wireschema's TestSchemasCompileUnderAjv.
import { readFileSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = join(root, "docs", "schema");
const base = "https://github.com/interlockhq/interlock/docs/schema/";
const fail = (msg) => { console.error(msg); process.exit(1); };

const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
const files = readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort();
if (files.length === 0) fail("no schemas in " + dir);
for (const f of files) {
  const schema = JSON.parse(readFileSync(join(dir, f), "utf8"));
  if (schema.$id !== base + f) fail(`${f}: $id is ${schema.$id}, want ${base + f}`);
  ajv.addSchema(schema);
}
for (const f of files) {
  try {
    ajv.getSchema(base + f) || fail(`${f}: not registered`);
  } catch (e) {
    fail(`${f}: does not compile under ajv's strict mode: ${e.message}`);
  }
}
const vectors = JSON.parse(readFileSync(join(root, "testdata", "conformance", "messages.json"), "utf8"));
let checked = 0;
for (const c of vectors.cases) {
  if (c.code !== null || !("message" in c) || c.name.includes("without version")) continue;
  const validate = ajv.getSchema(base + c.kind + ".schema.json");
  if (!validate(c.message)) fail(`${c.kind} ${c.name}: ${JSON.stringify(validate.errors)}`);
  checked++;
}
const decision = ajv.getSchema(base + "decision.schema.json");
if (decision({ version: 1, decisionId: "d", interruptId: "i", status: "resolved", payload: null })) {
  fail("decision schema accepts a null payload");
}
console.log(`${files.length} schemas compiled, ${checked} valid messages checked`);
