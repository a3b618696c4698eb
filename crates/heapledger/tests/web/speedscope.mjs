// Judges a speedscope file with speedscope itself: validates it against
// the schema its npm package ships, then opens it in speedscope's page
// (the package's own build, served on 127.0.0.1) in headless Chromium,
// and prints what the page shows as one JSON line:
//   {"valid":true,"title":"...","frames":N,"errors":[...]}
// Usage: node speedscope.mjs PROFILE.json [CHROMIUM]
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join, extname } from "node:path";
import { createRequire } from "node:module";
import Ajv from "ajv";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const [profilePath, browserPath = "/usr/bin/chromium"] = process.argv.slice(2);
const release = join(require.resolve("speedscope/package.json"), "..", "dist", "release");

const schema = JSON.parse(readFileSync(join(release, "file-format-schema.json"), "utf8"));
const profileText = readFileSync(profilePath, "utf8");
const profile = JSON.parse(profileText);
const ajv = new Ajv({ allErrors: true, strict: false });
const validate = ajv.compile(schema);
const valid = validate(profile);

const types = {
  ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
  ".json": "application/json", ".wasm": "application/wasm", ".woff2": "font/woff2",
  ".png": "image/png", ".ico": "image/x-icon", ".txt": "text/plain",
};
const server = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  let body;
  try {
    body = path === "/profile.json"
      ? profileText
      : readFileSync(join(release, path === "/" ? "index.html" : path.replace(/^\/+/, "").replace(/\.\./g, "")));
  } catch {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { "content-type": types[extname(path)] || "application/octet-stream" });
  res.end(body);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: browserPath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const errors = [];
let title = "";
let frames = 0;
let sandwich = "";
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  await page.goto(`${base}/index.html#profileURL=${encodeURIComponent(base + "/profile.json")}`);
  // speedscope names the page after the profile once it has imported it.
  const want = profile.name ?? profile.profiles?.[0]?.name;
  await page.waitForFunction((w) => document.title.includes(w), want, { timeout: 20000 })
    .catch(() => errors.push(`the title never named the profile: "${want}"`));
  title = await page.title();
  // Its flame chart draws on canvases; and it says so when an import fails.
  frames = await page.locator("canvas").count();
  const text = await page.evaluate(() => document.body.innerText);
  if (/something went wrong|failed to import|unrecognized format/i.test(text)) {
    errors.push(`speedscope says: ${text.slice(0, 200)}`);
  }
  // Its sandwich view lists every function with its total and self
  // weights as text: what it made of the file.
  await page.keyboard.press("3");
  // Its table's rows are drawn a frame or more after its header, so wait
  // for a row with a share, then until the text stops changing.
  await page.waitForFunction(() => /Symbol Name[\s\S]*\(\S+%\)/.test(document.body.innerText), null,
    { timeout: 10000 })
    .catch(() => errors.push("the sandwich view did not list functions"));
  sandwich = await page.evaluate(() => document.body.innerText);
  for (let i = 0; i < 50; i++) {
    await page.waitForTimeout(100);
    const now = await page.evaluate(() => document.body.innerText);
    if (now === sandwich) break;
    sandwich = now;
  }
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify({ valid, schemaErrors: validate.errors ?? [], title, frames, errors, sandwich }));
