/**
 * Every package the workspace publishes packs as it should (`npm pack
 * --dry-run`, on the build `npm run build` made): its built entry point and
 * types, its sources for the source maps, a README; no tests, examples or
 * build leftovers; and a package.json with what a registry and an installer
 * need (license, repository, exports with types, engines, public access, a
 * build before packing, and the SDK at the workspace's own version).
 */

import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { REPO } from "@interlock/testing";

const ROOT = join(REPO, "typescript");
const PUBLISHED = ["sdk", "langgraph", "openai-agents", "ai-sdk", "mastra"];

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  license?: string;
  type?: string;
  main?: string;
  types?: string;
  files?: string[];
  engines?: { node?: string };
  repository?: { type?: string; url?: string; directory?: string };
  publishConfig?: { access?: string };
  scripts?: Record<string, string>;
  exports?: Record<string, unknown>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

const sdkVersion = (JSON.parse(readFileSync(join(ROOT, "packages", "sdk", "package.json"), "utf8")) as Manifest).version;
const workspaces = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { workspaces: string[] }).workspaces;

test("the workspace's packages are the published ones and the private test fixtures", () => {
  assert.deepEqual(
    workspaces.filter((w) => !w.endsWith("/testing")).sort(),
    PUBLISHED.map((p) => `packages/${p}`).sort(),
  );
  const testing = JSON.parse(readFileSync(join(ROOT, "packages", "testing", "package.json"), "utf8")) as Manifest;
  assert.equal(testing.private, true, "@interlock/testing is never published");
});

for (const dir of PUBLISHED) {
  test(`npm pack of packages/${dir}`, () => {
    const m = JSON.parse(readFileSync(join(ROOT, "packages", dir, "package.json"), "utf8")) as Manifest;
    assert.notEqual(m.private, true);
    assert.ok(m.license, "a license field");
    assert.equal(m.type, "module");
    assert.match(m.engines?.node ?? "", /^>=\d/);
    assert.deepEqual(m.repository, { type: "git", url: "git+https://github.com/interlockhq/interlock.git", directory: `typescript/packages/${dir}` });
    assert.equal(m.publishConfig?.access, "public", "a scoped package is published public");
    assert.match(m.scripts?.["prepack"] ?? "", /tsc -p tsconfig\.json/, "packing builds first");
    assert.deepEqual(m.exports?.["."], { types: "./dist/index.d.ts", import: "./dist/index.js" });
    assert.equal(m.exports["./package.json"], "./package.json");
    assert.equal(m.main, "./dist/index.js");
    assert.equal(m.types, "./dist/index.d.ts");
    if (dir !== "sdk") {
      assert.equal(m.dependencies?.["@interlock/sdk"], sdkVersion, "an adapter depends on the SDK of the same release");
      assert.ok(Object.keys(m.peerDependencies ?? {}).length > 0, "its framework is a peer dependency");
    }
    for (const deps of [m.dependencies ?? {}, m.peerDependencies ?? {}]) {
      for (const [name, range] of Object.entries(deps)) {
        assert.ok(!/^(file:|link:|workspace:|\.|\/)/.test(range), `${name}: ${range} resolves only in this repository`);
        assert.notEqual(name, "@interlock/testing");
      }
    }

    const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts", "-w", m.name], { cwd: ROOT, encoding: "utf8" });
    const [packed] = JSON.parse(out) as [{ name: string; version: string; files: { path: string }[] }];
    assert.equal(packed.name, m.name);
    const files = packed.files.map((f) => f.path).sort();
    for (const want of ["package.json", "README.md", "dist/index.js", "dist/index.d.ts", "src/index.ts"]) {
      assert.ok(files.includes(want), `${want} in ${files.join(", ")}`);
    }
    for (const f of files) {
      assert.match(f, /^(package\.json|README\.md|LICENSE|dist\/[\w.-]+\.(js|d\.ts)(\.map)?|src\/[\w.-]+\.ts)$/, `${f} does not belong in the package`);
    }
    for (const f of files.filter((f) => f.startsWith("src/"))) {
      assert.ok(files.includes(f.replace(/^src\/(.*)\.ts$/, "dist/$1.js")), `${f} is built`);
    }
  });
}
