// A two-of-three quorum on a gated tool call, decided in the web inbox in
// headless Chromium at phone and desktop sizes, each screen checked with
// axe-core (WCAG 2 A/AA), no page wider than the screen, a screenshot of
// each. Run by processor/gateway's TestQuorumInBrowser, which raises the
// interrupts (approvers ada, bob and carol, two approvals, carol started
// the run) and checks what the replay received; it passes a JSON plan as
// the only argument, and the script prints "STEP <name>" per step passed.
import { chromium } from "playwright-core";
import { auditor, check, sizes } from "./screens.mjs";

const plan = JSON.parse(process.argv[2]);
const audit = auditor(plan.shots);
const step = (name) => console.log("STEP " + name);

// waitText waits until locator's text matches re, or fails with what it shows.
async function waitText(locator, re, what) {
  try {
    await locator.filter({ hasText: re }).first().waitFor();
  } catch {
    throw new Error(`${what}: wanted ${re}, the page shows: ${await locator.allInnerTexts().catch(() => [])}`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const errors = [];

// open logs who in (each approver with a browser of their own) and opens
// the interrupt's card from its deep link.
async function open(size, who, ref) {
  const ctx = await browser.newContext(sizes[size]);
  const page = await ctx.newPage();
  page.setDefaultTimeout(20000);
  page.on("pageerror", (e) => errors.push(`${who} at ${size}: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(`${who} at ${size}: ${m.text()}`);
  });
  await page.goto(plan.url + "/inbox");
  await page.waitForSelector("#login:not([hidden])");
  await page.fill("#token", plan.tokens[who]);
  await page.keyboard.press("Enter");
  await page.waitForSelector(`#who:has-text('Signed in as ${who}')`);
  await page.goto(`${plan.url}/inbox#${ref.run}/${ref.id}`);
  const card = page.locator(`article[data-interrupt="${ref.id}"]`);
  await card.locator("details[open]").waitFor();
  return { ctx, page, card };
}

try {
  for (const size of ["phone", "desktop"]) {
    const ref = plan.interrupts[size];

    // Ada: the call's arguments, its digest, no votes yet.
    const a = await open(size, "ada", ref);
    const args = a.card.locator("table[data-arguments]");
    for (const [k, v] of [["amount", "12400"], ["to", "ACME"], ["memo", "Invoice 2026-114"]]) {
      const cell = await args.locator(`th:text-is("${k}") + td`).textContent().catch(() => null);
      check(cell === v, `argument ${k}: wanted ${v}, shown ${cell}`);
    }
    check((await a.card.innerText()).includes(plan.digest), "the call's digest is not shown");
    const remaining = a.card.locator("[data-remaining]");
    await waitText(remaining, /^0 of 2 approvals; waiting on ada, bob$/, "before any vote");
    const head = await a.card.locator(".headline").textContent();
    check(head.startsWith("pay_invoice · asked by gate") && head.endsWith(" · 0 of 2 approvals"), "the header line: " + head);
    check(await a.card.locator("table[data-votes] tr").count() === 0, "votes are listed before any was cast");
    check(await a.card.getByRole("button", { name: "Approve", exact: true }).isEnabled(), "ada may not approve");
    await audit(a.page, size, "quorum-first");
    step(size + " first look");

    // The call changed since the card was drawn: the vote goes with the
    // digest of the call as it was, and is not counted.
    await a.page.route("**/decision", (route) => {
      const body = JSON.parse(route.request().postData());
      route.continue({ postData: JSON.stringify({ ...body, callDigest: plan.stale }) });
    });
    await a.card.getByRole("button", { name: "Approve", exact: true }).click();
    const refused = a.card.locator(".error").filter({ hasText: /your vote was not counted/ });
    await waitText(refused, /your vote was not counted/, "a stale digest");
    check(!(await refused.innerText()).includes(plan.stale), "the refusal shows raw digests, not words");
    await a.page.unroute("**/decision");
    await waitText(remaining, /^0 of 2 approvals/, "after the stale vote");
    check(await a.card.locator("table[data-votes] tr").count() === 0, "the stale vote is listed");
    await audit(a.page, size, "quorum-stale");
    step(size + " stale digest");

    // Her approval counts: the card stays, with her vote and what remains.
    await a.card.getByRole("button", { name: "Approve", exact: true }).click();
    await waitText(a.page.locator("#notice"), /Your vote is recorded/, "the vote's notice");
    await waitText(remaining, /^1 of 2 approvals; waiting on bob$/, "after ada's vote");
    await waitText(a.card.locator("table[data-votes] tr"), /ada\s*approved at \d\d:\d\d UTC/, "ada's vote");
    check((await a.card.locator(".headline").textContent()).includes("1 of 2 approvals"), "the header line did not move");
    check(await a.card.locator(".error").filter({ hasText: /not counted/ }).count() === 0, "the stale refusal outlives the vote");
    await waitText(a.card.locator("[data-you]"), /You approved at \d\d:\d\d UTC/, "ada's card says she voted");
    check(await a.card.getByRole("button", { name: "Approve", exact: true }).isDisabled(), "ada may approve twice");
    await audit(a.page, size, "quorum-voted");
    await a.ctx.close();
    step(size + " first vote");

    // Carol started the run: she sees it, may not vote, and is told why.
    const c = await open(size, "carol", ref);
    await waitText(c.card.locator(".banner"), /You started this run/, "the requester's card");
    check(await c.card.getByRole("button", { name: "Approve", exact: true }).isDisabled(), "the requester may approve");
    check(await c.card.getByRole("button", { name: "Deny…" }).isDisabled(), "the requester may deny");
    await waitText(c.card.locator("table[data-votes] tr"), /ada\s*approved/, "the requester sees the votes");
    await audit(c.page, size, "quorum-requester");
    await c.ctx.close();
    step(size + " requester");

    // Bob sees ada's vote and approves: the second approval decides.
    const b = await open(size, "bob", ref);
    await waitText(b.card.locator("table[data-votes] tr"), /ada\s*approved at \d\d:\d\d UTC/, "bob sees ada's vote");
    await waitText(b.card.locator("[data-remaining]"), /^1 of 2 approvals; waiting on bob$/, "bob's view");
    await audit(b.page, size, "quorum-second");
    await b.card.getByRole("button", { name: "Approve", exact: true }).click();
    await waitText(b.page.locator("#notice"), /^Approved/, "the deciding vote");
    await b.card.waitFor({ state: "detached" });
    await b.ctx.close();
    step(size + " second vote");
  }
  check(errors.length === 0, "errors in the page: " + errors.join("; "));
} finally {
  await browser.close();
}
process.exit(0);
