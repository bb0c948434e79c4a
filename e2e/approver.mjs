// The approver's experience in headless Chromium, at phone and desktop
// sizes: the web inbox and the decision-link pages, checked with axe-core
// (WCAG 2 A/AA) on every screen, no page wider than the screen, and a
// screenshot of each step. Run by processor/gateway's TestApproverInBrowser,
// which prepares the interrupts and checks what was decided; it passes a
// JSON plan as the only argument, and the script prints one line per step:
//   STEP <name>     a step passed
//   WAIT <name>     the Go side must act, then write a line to stdin
import { chromium } from "playwright-core";
import readline from "node:readline";
import { auditor, check, sizes } from "./screens.mjs";

const plan = JSON.parse(process.argv[2]);
const audit = auditor(plan.shots);
const rl = readline.createInterface({ input: process.stdin });
const lines = rl[Symbol.asyncIterator]();
const step = (name) => console.log("STEP " + name);
// gone waits for a card to leave the list, or fails with what it shows.
async function gone(card, what) {
  try {
    await card.waitFor({ state: "detached" });
  } catch (e) {
    throw new Error(`${what}: the card stayed: ${await card.innerText().catch(() => "")}`);
  }
}
async function wait(name) {
  console.log("WAIT " + name);
  await lines.next();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  for (const size of ["phone", "desktop"]) {
    const ctx = await browser.newContext(sizes[size]);
    const page = await ctx.newPage();
    page.setDefaultTimeout(20000);
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    // Script errors and content-policy refusals; refused requests are
    // expected (401 before login, 422 refusals, ...).
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) errors.push(m.text());
    });

    // `/` leads to the inbox, which asks for a token.
    await page.goto(plan.url + "/");
    check(page.url().endsWith("/inbox"), "/ did not lead to the inbox: " + page.url());
    await page.waitForSelector("#login:not([hidden])");
    await audit(page, size, "login");
    await page.fill("#token", plan.tokens.ada);
    await page.keyboard.press("Enter"); // keyboard operable
    await page.waitForSelector("#who:has-text('Signed in as ada')");
    await page.waitForSelector("#live:has-text('live')");
    step(size + " login");

    // A deep link opens and highlights its card; the fields start from the
    // tool's arguments, with choices, bounds and required marks.
    const pay = plan.interrupts[size + "-pay"];
    await page.goto(`${plan.url}/inbox#${pay.run}/${pay.id}`);
    const card = page.locator(`article[data-interrupt="${pay.id}"]`);
    await card.locator("details[open]").waitFor();
    check(await card.evaluate((c) => c.classList.contains("highlight")), "the deep-linked card is not highlighted");
    const amount = card.getByLabel("amount");
    const currency = card.getByLabel("currency");
    check(await amount.inputValue() === "12.5", "amount is not prefilled from the arguments");
    check(await amount.getAttribute("max") === "100" && await amount.getAttribute("min") === "0", "amount has no min/max");
    check(await amount.evaluate((e) => e.required), "amount is not required");
    check(await currency.evaluate((e) => e.options[e.selectedIndex].text) === "EUR", "currency does not start from the arguments");
    check(/^\d+ waiting$/.test(await page.locator("#count").textContent()), "no count");
    const head = await card.locator(".headline").textContent();
    check(/^issue_refund · asked by gate · may decide: ada · waiting (under a minute|\d+m) · expires in 1h[45]\dm \(\d\d:\d\d UTC\)$/.test(head),
      "the header line: " + head);
    await card.locator(".input th:has-text('Message') + td", { hasText: "Refund 12.50 to Lin" }).waitFor(); // the run's input
    await audit(page, size, "inbox-card");
    step(size + " deep link");

    // A refusal stays next to its field; what was typed stays too.
    await amount.fill("12.3");
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    const fieldError = card.locator(".field[data-name=amount] .error");
    await fieldError.filter({ hasText: "multiple" }).waitFor();
    check(await amount.inputValue() === "12.3", "the typed amount was cleared");
    check(await amount.getAttribute("aria-invalid") === "true", "the refused field is not marked");
    check(await currency.evaluate((e) => e.options[e.selectedIndex].text) === "EUR", "the currency was reset");
    await audit(page, size, "inbox-refused");
    await amount.fill("12.5");
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    await gone(card, "approve");
    await page.locator("#notice:has-text('Approved')").waitFor();
    await page.locator("#notice").getByRole("link", { name: "See the run" }).click();
    await page.locator("#run-view td:has-text('resolved')").waitFor(); // the run, with its decision
    step(size + " refused then approved");

    // Edit arguments: the diff from what the agent proposed, then approve.
    const mail = plan.interrupts[size + "-mail"];
    await page.goto(`${plan.url}/inbox#${mail.run}/${mail.id}`);
    const mailCard = page.locator(`article[data-interrupt="${mail.id}"]`);
    await mailCard.locator("details[open]").waitFor();
    await mailCard.getByRole("button", { name: "Edit arguments" }).click();
    await mailCard.getByLabel("subject").fill("hello");
    await mailCard.locator("ul.diff li", { hasText: "subject" }).waitFor();
    check((await mailCard.locator("ul.diff").textContent()).includes("hi → hello"), "the diff does not show the change");
    await audit(page, size, "inbox-edit");
    await mailCard.getByRole("button", { name: "Approve with these arguments" }).click();
    await gone(mailCard, "approve with edits");
    step(size + " edited");

    // Deny asks for a reason and a confirmation.
    const drop = plan.interrupts[size + "-drop"];
    await page.goto(`${plan.url}/inbox#${drop.run}/${drop.id}`);
    const dropCard = page.locator(`article[data-interrupt="${drop.id}"]`);
    await dropCard.locator("details[open]").waitFor();
    await dropCard.getByRole("button", { name: "Deny…" }).click();
    await dropCard.getByRole("button", { name: "Deny", exact: true }).click();
    await dropCard.locator(".confirm .error:has-text('Say why')").waitFor();
    await dropCard.getByLabel("Reason").fill("not this week");
    await audit(page, size, "inbox-deny");
    await dropCard.getByRole("button", { name: "Deny", exact: true }).click();
    await gone(dropCard, "deny");
    step(size + " denied");

    // A new interrupt appears by itself (server-sent events).
    await wait(size + " live");
    const liveCard = page.locator("article", { hasText: plan.live[size] });
    await liveCard.waitFor();
    await liveCard.locator("summary").focus(); // keyboard: open it with Enter
    await page.keyboard.press("Enter");
    await liveCard.locator("details[open]").waitFor();
    await page.keyboard.press("Tab");
    check(await page.evaluate(() => document.activeElement.closest("details") !== null), "Tab does not lead into the open card");
    step(size + " live");

    // A logout the server could not carry out (its session store down:
    // 503) leaves the page signed in and says so: showing the login form
    // would tell the approver they are out while their session still works.
    await page.route("**/inbox/logout", (route) => route.fulfill({ status: 503, contentType: "application/json",
      body: JSON.stringify({ code: "unavailable", message: "the session could not be ended: nats: timeout" }) }));
    await page.getByRole("button", { name: "Log out" }).click();
    await page.locator("#notice:has-text('Not logged out')").waitFor();
    check(await page.locator("#login").isHidden(), "the login form shows after a failed logout");
    check(await page.locator("#who").isVisible(), "the session line is gone after a failed logout");
    await audit(page, size, "inbox-logout-refused");
    await page.unroute("**/inbox/logout");
    step(size + " logout refused");

    // Log out; an auditor sees what they may not decide, disabled.
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForSelector("#login:not([hidden])");
    check(await page.locator("#notice").isHidden(), "the failed logout's notice outlives the logout");
    await page.reload();
    await page.waitForSelector("#login:not([hidden])");
    await page.fill("#token", plan.tokens.erin);
    await page.click("#login-form button");
    await page.waitForSelector("#who:has-text('Signed in as erin')");
    const other = plan.interrupts[size + "-bob"];
    await page.goto(`${plan.url}/inbox#${other.run}/${other.id}`);
    const otherCard = page.locator(`article[data-interrupt="${other.id}"]`);
    await otherCard.locator("details[open]").waitFor();
    check(await otherCard.getByRole("button", { name: "Approve", exact: true }).isDisabled(), "approve is enabled for a non-approver");
    check(await otherCard.getByRole("button", { name: "Edit arguments" }).isDisabled(), "edit is enabled for a non-approver");
    check(await otherCard.getByLabel("amount").isDisabled(), "fields are enabled for a non-approver");
    await audit(page, size, "inbox-auditor");
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForSelector("#login:not([hidden])");
    step(size + " auditor");

    // The link page: no JSON to type, whom one decides as, a refusal next to
    // its field, then a page repeating the decision with a link to the run.
    const link = plan.links[size];
    await page.goto(plan.url + link.approve);
    await page.locator(".banner:has-text('You are deciding as ada')").waitFor();
    check(await page.locator("textarea").count() === 0, "the link page asks for JSON");
    await page.getByLabel("tier").selectOption({ label: "2" });
    await page.getByLabel("amount").fill("3.3");
    await audit(page, size, "link");
    await page.getByRole("button", { name: "Approve" }).click();
    await page.locator(".field[data-name=amount] .error:has-text('multiple')").waitFor();
    check(await page.getByLabel("amount").inputValue() === "3.3", "the typed amount was not kept");
    check(await page.getByLabel("tier").evaluate((e) => e.options[e.selectedIndex].text) === "2", "the tier was not kept");
    await audit(page, size, "link-refused");
    await page.getByLabel("amount").fill("3.5");
    await page.getByLabel("amount").press("Enter"); // keyboard: Enter sends the form
    await page.locator("h1:has-text('Approved')").waitFor();
    check((await page.textContent("main")).includes("You approved as ada"), "the success page does not say who decided");
    check(await page.locator("th:has-text('tier') + td").textContent() === "2", "the success page does not repeat the answer");
    check(await page.getByRole("link", { name: "See the run" }).count() === 1, "no link to the run");
    await audit(page, size, "link-done");
    await page.goto(plan.url + link.approve);
    await page.locator("h1:has-text('already used')").waitFor();
    await page.goto(plan.url + link.approve.slice(0, -4) + "abcd");
    await page.locator("h1:has-text('not valid')").waitFor();
    check(await page.getByRole("link", { name: "Go to the inbox" }).count() === 1, "the error page has no way back");
    await audit(page, size, "link-error");
    step(size + " link");

    check(errors.length === 0, "errors in the page: " + errors.join("; "));
    await ctx.close();
  }
} finally {
  rl.close();
  await browser.close();
}
process.exit(0);
