// Drives the web inbox in headless Chromium, as an approver on a phone:
// log in, see a new interrupt appear (pushed by server-sent events), approve
// it. Run by processor/gateway's TestInboxInBrowser, which starts Interlock
// and waits for "READY" on stdout before it suspends a run.
//
//   node inbox.mjs <gateway-url> <token> <message> <screenshot.png>
import { chromium } from "playwright-core";
import readline from "node:readline";

const [url, token, message, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  page.setDefaultTimeout(20000);
  await page.goto(url + "/inbox");
  await page.fill("#token", token);
  await page.click("#login-form button");
  await page.waitForSelector("#who:has-text('Signed in as ada')");
  await page.waitForSelector("#empty:not([hidden])");
  await page.waitForSelector("#live:has-text('live')");
  console.log("READY");
  // The Go side suspends a run now; it must appear without a reload.
  const card = page.locator(".card", { hasText: message });
  await card.waitFor();
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  if (width > 390) throw new Error(`the page is ${width}px wide on a 390px screen`);
  await card.locator("input[data-field=amount]").fill("12.5");
  await page.screenshot({ path: shot, fullPage: true });
  await card.locator("button.approve").click();
  // Accepted: the card says so, then leaves the list (the interrupt no
  // longer waits). A refusal would show its reason in the card instead.
  const gone = page.locator(".card[data-interrupt]", { hasText: message }).waitFor({ state: "detached" });
  const refused = card.locator(".error:not(:empty)").waitFor().then(async () => {
    throw new Error("refused: " + await card.locator(".error").textContent());
  }, () => new Promise(() => {})); // no error shown: never settles
  await Promise.race([gone, refused]);
  console.log("APPROVED");
  // Decided elsewhere: another interrupt appears and disappears by itself.
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.startsWith("GONE ")) {
      const text = line.slice(5);
      await page.locator(".card", { hasText: text }).waitFor();
      console.log("SEEN");
    } else if (line === "WAIT-GONE") {
      await page.waitForFunction(() => document.querySelectorAll(".card[data-interrupt]").length === 0);
      console.log("CLEARED");
      break;
    }
  }
  rl.close();
} finally {
  await browser.close();
}
process.exit(0);
