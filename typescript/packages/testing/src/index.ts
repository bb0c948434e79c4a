/**
 * Test fixtures for every package of the workspace: a real `interlock serve`
 * built from this repository, on a free port, with its embedded NATS server
 * (as python/tests/conftest.py).
 */

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

import type { NatsConnection } from "@nats-io/nats-core";
import { connect } from "@nats-io/transport-node";

/** The repository's root. */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

let built = false;

/**
 * The interlock binary: $INTERLOCK_BIN, or `go build` of ./cmd/interlock,
 * once per test process: Go's build cache makes a rebuild of unchanged
 * sources cheap, and a binary left from an older tree is never run.
 */
export function interlockBin(): string {
  const given = process.env["INTERLOCK_BIN"];
  if (given) return given;
  const out = join(REPO, "typescript", ".test-build", "interlock"); // shared by the packages' tests
  if (!built) {
    execFileSync("go", ["build", "-o", out, "./cmd/interlock"], { cwd: REPO, stdio: "inherit" });
    built = true;
  }
  return out;
}

/** A free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => ok(port));
    });
  });
}

/** A running `interlock serve`. */
export class Server {
  readonly url: string;
  readonly binary: string;
  private readonly proc: ChildProcess;
  private readonly dataDir: string;
  readonly log: string[] = [];

  private constructor(binary: string, port: number, dataDir: string, proc: ChildProcess) {
    this.binary = binary;
    this.url = `nats://127.0.0.1:${port}`;
    this.dataDir = dataDir;
    this.proc = proc;
  }

  /**
   * Start one and wait (at most 120 s) until its coordinator runs; with
   * `natsConfig`, its embedded server loads that configuration (users and
   * permissions) and `setup` runs first on the data directory (to provision
   * it as admin), with `env` for both.
   */
  static async start(
    options: { natsConfig?: string; env?: NodeJS.ProcessEnv; setup?: (binary: string, dataDir: string) => void } = {},
  ): Promise<Server> {
    const binary = interlockBin();
    const port = await freePort();
    const dataDir = mkdtempSync(join(tmpdir(), "interlock-ts-"));
    options.setup?.(binary, dataDir);
    const args = ["serve", "--nats-listen", `127.0.0.1:${port}`, "--data-dir", dataDir];
    if (options.natsConfig) args.push("--nats-config", options.natsConfig);
    const proc = spawn(binary, args, { stdio: ["ignore", "ignore", "pipe"], env: options.env ?? process.env });
    const srv = new Server(binary, port, dataDir, proc);
    await new Promise<void>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error("interlock serve did not start:\n" + srv.log.join(""))), 120_000);
      let buf = "";
      proc.stderr.setEncoding("utf8");
      proc.stderr.on("data", (chunk: string) => {
        srv.log.push(chunk);
        buf += chunk;
        if (buf.includes("coordinator running")) {
          clearTimeout(timer);
          ok();
        }
      });
      proc.once("exit", (code) => {
        clearTimeout(timer);
        fail(new Error(`interlock serve exited (${code}):\n` + srv.log.join("")));
      });
    });
    return srv;
  }

  /** Run the interlock CLI against this server. */
  cli(...args: string[]): string {
    return execFileSync(this.binary, ["--nats-url", this.url, ...args], { encoding: "utf8", timeout: 60_000 });
  }

  /** Stop it and remove its data. */
  async stop(): Promise<void> {
    if (this.proc.exitCode === null) {
      const exited = new Promise((ok) => this.proc.once("exit", ok));
      this.proc.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** A fresh agent name per test: each test has its own consumer and work. */
export function agentName(): string {
  return "ts_" + randomBytes(6).toString("hex");
}

/** Wait until `cond` holds, checking every 20 ms, for at most `timeoutMs`. */
export async function eventually(cond: () => boolean | Promise<boolean>, timeoutMs = 15_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((ok) => setTimeout(ok, 20));
  }
}

/**
 * A server under the shipped per-role permissions: `interlock serve
 * --nats-config deploy/nats/single.conf` as the coordinator, after
 * `interlock provision` as admin (agent `refunds` provisioned), with a
 * random password for every user auth.conf names (a server refuses to start
 * with any of them empty).
 */
export class Shipped {
  readonly server: Server;
  private readonly passwords: Record<string, string>;
  private readonly conns: NatsConnection[] = [];

  private constructor(server: Server, passwords: Record<string, string>) {
    this.server = server;
    this.passwords = passwords;
  }

  /** Starts the server, provisioned as admin for agent `refunds`. */
  static async start(): Promise<Shipped> {
    const auth = readFileSync(join(REPO, "deploy", "nats", "auth.conf"), "utf8");
    const users = [...new Set([...auth.matchAll(/\$INTERLOCK_([A-Z_]+)_PASSWORD/g)].map((m) => m[1] as string))];
    const passwords = Object.fromEntries(users.map((u) => [u, randomBytes(12).toString("hex")]));
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const u of users) env[`INTERLOCK_${u}_PASSWORD`] = passwords[u];
    const config = join(REPO, "deploy", "nats", "single.conf");
    const server = await Server.start({
      natsConfig: config,
      env: { ...env, NATS_USER: "coordinator", NATS_PASSWORD: passwords["COORDINATOR"] },
      setup: (binary, dataDir) => {
        execFileSync(binary, ["provision", "--nats-config", config, "--data-dir", dataDir, "--agent", "refunds"], {
          env: { ...env, NATS_USER: "admin", NATS_PASSWORD: passwords["ADMIN"] },
          stdio: "ignore",
          timeout: 120_000,
        });
      },
    });
    return new Shipped(server, passwords);
  }

  /** A connection as `user` (upper case, as in auth.conf's variables), with its own inbox prefix. */
  async as(user: string): Promise<NatsConnection> {
    const nc = await connect({
      servers: this.server.url,
      user: user.toLowerCase(),
      pass: this.passwords[user],
      inboxPrefix: `_INBOX.${user.toLowerCase()}`,
    });
    this.conns.push(nc);
    return nc;
  }

  /** Closes every connection and stops the server. */
  async stop(): Promise<void> {
    for (const nc of this.conns) await nc.close();
    await this.server.stop();
  }
}

/** A script run by a test (an example): its output, read as it comes. */
export class Script {
  private out = "";
  private onData: (() => void) | undefined;
  /** Its exit code, once it exits. */
  readonly exited: Promise<number | null>;
  private readonly proc: ChildProcess;

  /**
   * Run `command` with `args` (its stdout read, its stderr passed through),
   * `env` added to this process's environment; with `stdin`, its standard
   * input is a pipe that {@link endInput} closes.
   */
  constructor(command: string, args: readonly string[], env: NodeJS.ProcessEnv = {}, options: { stdin?: boolean } = {}) {
    this.proc = spawn(command, args, { env: { ...process.env, ...env }, stdio: [options.stdin ? "pipe" : "ignore", "pipe", "inherit"] });
    this.exited = new Promise((ok) => this.proc.once("exit", ok));
    this.proc.stdout?.setEncoding("utf8");
    this.proc.stdout?.on("data", (chunk: string) => {
      this.out += chunk;
      this.onData?.();
    });
  }

  /** What it printed so far. */
  get output(): string {
    return this.out;
  }

  /** Wait (at most `timeoutMs`) until its output matches `re`; fails with the output so far, or when it exits first. */
  waitFor(re: RegExp, timeoutMs = 60_000): Promise<RegExpMatchArray> {
    return new Promise((ok, fail) => {
      const done = (): void => {
        clearTimeout(timer);
        this.onData = undefined;
      };
      const timer = setTimeout(() => {
        done();
        fail(new Error(`no ${String(re)} in ${timeoutMs} ms, in:\n${this.out}`));
      }, timeoutMs);
      const check = (): void => {
        const m = re.exec(this.out);
        if (m) {
          done();
          ok(m);
        }
      };
      this.onData = check;
      check();
      void this.exited.then((code) => {
        if (this.onData !== check) return;
        check();
        if (this.onData === check) {
          done();
          fail(new Error(`exited (${String(code)}) before ${String(re)}, having printed:\n${this.out}`));
        }
      });
    });
  }

  /** Close its standard input (started with `stdin`). */
  endInput(): void {
    this.proc.stdin?.end();
  }

  /** Stop it if it still runs. */
  kill(): void {
    if (this.proc.exitCode === null) this.proc.kill();
  }
}
