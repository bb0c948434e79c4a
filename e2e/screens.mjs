// What the browser tests share: the two screen sizes every page is checked
// at, and the audit of a page (axe-core finds no WCAG 2 A/AA violation,
// nothing is wider than the screen, a screenshot is saved).
import { createRequire } from "node:module";
import { readFileSync, mkdirSync } from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export const sizes = {
  phone: { viewport: { width: 390, height: 844 }, deviceScaleFactor: 1, isMobile: true, hasTouch: true },
  desktop: { viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 },
};

// check fails with what when ok is false.
export function check(ok, what) {
  if (!ok) throw new Error(what);
}

// auditor returns audit(page, size, name), which checks the page as it is
// and saves its screenshot in shots (made if missing).
export function auditor(shots) {
  mkdirSync(shots, { recursive: true });
  return async function audit(page, size, name) {
    await page.evaluate(axeSource);
    const result = await page.evaluate(() =>
      window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
    if (result.violations.length) {
      const what = result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`);
      throw new Error(`${name} at ${size}: accessibility violations:\n  ` + what.join("\n  "));
    }
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    const screen = sizes[size].viewport.width;
    check(width <= screen, `${name} at ${size}: the page is ${width}px wide on a ${screen}px screen`);
    await page.screenshot({ path: path.join(shots, `${name}-${size}.png`), fullPage: true });
  };
}
