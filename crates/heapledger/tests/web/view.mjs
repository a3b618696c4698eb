// Looks at heapledger's viewer in headless Chromium, as a user would, and
// prints what each page shows as one JSON line, for tests/viewer.rs.
// Usage: node view.mjs URL [CHROMIUM]
// URL: the one `heapledger view` printed, or file:///...html from
// `export --format html`.
import { chromium } from "playwright-core";

const [url, browserPath = "/usr/bin/chromium"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: browserPath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const errors = [];
const requests = [];
const seen = {};
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.on("request", (r) => requests.push(r.url()));
  // A frame sent to a new graph before the last one finished loading has
  // that load aborted by the browser: the user's choice, not a failure.
  page.on("requestfailed", (r) => {
    const why = r.failure()?.errorText || "";
    if (!(r.url().startsWith("blob:") && why === "net::ERR_ABORTED")) errors.push(`request failed: ${r.url()} (${why})`);
  });

  // Overview: the cards' exact numbers, the warnings, the top sites.
  await page.goto(url + "#overview");
  await page.waitForSelector("#cards .card", { timeout: 20000 });
  seen.title = await page.title();
  seen.cards = await page.$$eval("#cards .card", (cs) => Object.fromEntries(cs.map((c) =>
    [c.dataset.card, { shown: c.querySelector(".value").textContent, exact: c.dataset.exact }])));
  seen.warnings = await page.$$eval("#warnings .warning", (ws) => ws.map((w) => w.textContent));
  seen.sites = await page.$$eval("#sites tr", (rs) => rs.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
  seen.jitShown = await page.isVisible("#jit-sites");
  seen.jitSites = await page.$$eval("#jit-sites tr", (rs) => rs.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));

  // The flame graph asked for and left before it loaded: its frame loads
  // hidden, without a width (inferno's script drew negative widths and
  // "Infinity%" positions there, errors in the console), and draws once
  // shown, below.
  await page.evaluate(() => { location.hash = "#flame"; });
  await page.waitForTimeout(5);
  await page.evaluate(() => { location.hash = "#overview"; });
  await page.waitForTimeout(1000);

  // Sources, from the first top site whose "where" names
  // $HEAPLEDGER_SOURCE (served, or embedded in the HTML file).
  const hint = process.env.HEAPLEDGER_SOURCE;
  if (hint) {
    await page.locator("#sites a", { hasText: hint }).first().click();
    await page.waitForSelector("#source-text tr.target", { timeout: 20000 });
    seen.sourceName = await page.textContent("#source-name");
    seen.sourceTarget = await page.$eval("#source-text tr.target", (r) => [...r.cells].map((c) => c.textContent));
    seen.sourceFiles = await page.$$eval("#sources-files tr", (rs) => rs.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
  }

  // Flame graph: inferno's SVG in its frame; its frames' titles.
  await page.click('nav a[data-page="flame"]');
  // (The frame's document through the browser's own view of it: a page
  // opened from a file has an opaque origin, which scripts cannot cross.)
  const svgFrame = async () => (await page.$("#flame-frame")).contentFrame();
  const flameTitles = async () => {
    await page.waitForFunction(() => document.getElementById("flame-frame").dataset.shown, null, { timeout: 30000 });
    const f = await svgFrame();
    await f.waitForSelector("g > title", { state: "attached", timeout: 30000 });
    return f.$$eval("g > title", (ts) => ts.map((t) => t.textContent));
  };
  seen.flame = await flameTitles();
  // Python and JIT functions only (HEAPLEDGER_JIT set: a profile with JIT
  // frames): the graph without main, and back.
  if (process.env.HEAPLEDGER_JIT) {
    const titlesWhen = async (ok) => {
      for (let i = 0; i < 300; i++) {
        try {
          const t = await (await svgFrame()).$$eval("g > title", (ts) => ts.map((x) => x.textContent));
          if (t.length > 0 && ok(t)) return t;
        } catch (e) { /* the frame is being replaced */ }
        await page.waitForTimeout(100);
      }
      return null;
    };
    await page.check("#flame-jit");
    seen.jitFlame = await titlesWhen((t) => !t.some((x) => x.startsWith("main ")));
    await page.uncheck("#flame-jit");
    seen.jitFlameOff = await titlesWhen((t) => t.some((x) => x.startsWith("main ")));
  }
  // Every metric in the tooltips, once the page has sent them.
  const tooltipOf = async (start) => {
    const f = await svgFrame();
    await f.waitForSelector("svg[data-tooltips]", { state: "attached", timeout: 30000 });
    return f.$$eval("g > title", (ts, s) => (ts.find((t) => t.textContent.startsWith(s)) || {}).textContent || null, start);
  };
  seen.flameTooltip = await tooltipOf("main ");
  seen.flameSearchAfterTooltips = await (await svgFrame()).evaluate(() => {
    search("^main$");
    return document.getElementById("matched").textContent;
  });
  // Zoom: a click on a frame in the SVG (inferno's own script).
  seen.flameZoom = await (await svgFrame()).evaluate(() => {
    const g = [...document.querySelectorAll("g")].find((x) => x.querySelector("title")?.textContent.startsWith("main "));
    if (!g) return "no main frame";
    g.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    // inferno shows its "Reset Zoom" once zoomed.
    return !document.getElementById("unzoom").classList.contains("hide");
  });
  // Labels after the zoom: the frame's name, not its whole tooltip.
  seen.flameMainLabel = await (await svgFrame()).evaluate(() => {
    const g = [...document.querySelectorAll("g")].find((x) => x.querySelector("title")?.textContent.startsWith("main "));
    return g ? g.querySelector("text").textContent : null;
  });
  // The breadcrumb of the zoom: "all" down to main; "all" zooms out.
  await page.waitForSelector("#flame-crumbs a", { timeout: 20000 });
  seen.flameCrumbs = await page.$$eval("#flame-crumbs a:not(.src)", (as) => as.map((a) => a.textContent));
  seen.flameCrumbSource = await page.$$eval("#flame-crumbs a.src", (as) => as.map((a) => a.title));
  await page.click("#flame-crumbs a >> nth=0");
  await page.waitForFunction(() => !document.querySelector("#flame-crumbs a"), null, { timeout: 20000 });
  seen.flameUnzoomedByCrumb = await (await svgFrame()).evaluate(() => document.getElementById("unzoom").classList.contains("hide"));
  // Search: inferno's own, as its Search button runs it.
  seen.flameSearch = await (await svgFrame()).evaluate(() => {
    search("^make_");
    return document.getElementById("matched").textContent;
  });
  // The callers' view, by allocations (by bytes in a file, which holds
  // that one).
  const metric = url.startsWith("file:") ? "bytes" : "count";
  seen.flameInvertedMetric = metric;
  await page.selectOption("#flame-metric", metric);
  await page.check("#flame-inverted");
  await page.waitForFunction((m) => document.getElementById("flame-frame").dataset.shown === `${m},1,none,0`, metric, { timeout: 30000 });
  await page.waitForTimeout(300);
  seen.flameInverted = await flameTitles();

  // Call tree: rows; expand a collapsed node.
  await page.click('nav a[data-page="tree"]');
  await page.waitForSelector("#tree-table tr td", { timeout: 30000 });
  const rows = () => page.$$eval("#tree-table tr", (rs) => rs.slice(1).map((r) => ({
    cells: [...r.cells].map((c) => c.textContent.replace(/^[▸▾]/, "")), hidden: r.hidden })));
  seen.tree = await rows();
  seen.treeTotal = await page.textContent("#tree-total");
  // A click on an open node's toggle hides its children, another shows
  // them again: [hidden after the first, hidden after the second].
  const open = await page.$$eval("#tree-table tr", (rs) => rs.findIndex((r, i) => i > 1 && !r.hidden && r.querySelector(".toggle")?.textContent === "▾"));
  if (open >= 0) {
    const child = () => page.$eval(`#tree-table tr:nth-child(${open + 2})`, (r) => r.hidden);
    const toggle = page.locator("#tree-table tr").nth(open).locator(".toggle");
    await toggle.click();
    const closed = await child();
    await toggle.click();
    seen.treeToggle = [closed, await child()];
  }
  await page.selectOption("#tree-collapse", "full");
  await page.waitForFunction(() => /full collapse/.test(document.getElementById("tree-total").textContent), null, { timeout: 30000 });
  seen.treeFull = await rows();
  await page.selectOption("#tree-collapse", "none");
  await page.waitForFunction(() => /none collapse/.test(document.getElementById("tree-total").textContent), null, { timeout: 30000 });
  await page.selectOption("#tree-direction", "bottom-up");
  await page.waitForFunction(() => /bottom-up/.test(document.getElementById("tree-total").textContent), null, { timeout: 30000 });
  seen.treeBottomUp = await rows();

  // A click on "In only" sorts the rows under each node by it.
  await page.click('#tree-table th[data-sort="excl"]');
  seen.treeSortedByExcl = await page.$$eval("#tree-table tr", (rs) => {
    const groups = {};
    for (const r of rs.slice(1)) {
      if (!r.id || r.querySelector(".stub")) continue;
      const excl = Number(r.cells[1].textContent.replace(/,/g, ""));
      (groups[r.dataset.parent] = groups[r.dataset.parent] || []).push(excl);
    }
    const lists = Object.values(groups).filter((g) => g.length > 1);
    return { groups: lists.length, sorted: lists.every((g) => g.every((v, i) => i === 0 || g[i - 1] >= v)) };
  });
  seen.treeSortHeader = await page.textContent('#tree-table th[data-sort="excl"]');
  // Python and JIT functions only (HEAPLEDGER_JIT: a profile with JIT
  // frames), and back.
  if (process.env.HEAPLEDGER_JIT) {
    await page.check("#tree-jit");
    await page.waitForFunction(() => /functions only/.test(document.getElementById("tree-total").textContent), null, { timeout: 30000 });
    seen.jitTree = await rows();
    await page.uncheck("#tree-jit");
    await page.waitForFunction(() => !/functions only/.test(document.getElementById("tree-total").textContent), null, { timeout: 30000 });
  }
  await page.click('#tree-table th[data-sort="incl"]');

  // A routine's name in the call tree opens its source (served pages).
  const mainLink = await page.$('#tree-table tr:not([hidden]) td.routine a.src >> text="main"');
  if (!url.startsWith("file:") && mainLink) {
    await mainLink.click();
    await page.waitForFunction(() => /\.c$/.test(document.getElementById("source-name").textContent), null, { timeout: 20000 });
    // The address follows the page (it read "#tree" once in about 10 runs
    // on a busy machine); the test's assertion says if it never does.
    await page.waitForFunction(() => location.hash.includes("&line="), null, { timeout: 5000 }).catch(() => {});
    seen.treeSource = await page.textContent("#source-name");
    seen.treeSourceHash = await page.evaluate(() => location.hash);
  }

  // Timeline: uPlot's canvases and legends.
  await page.click('nav a[data-page="timeline"]');
  await page.waitForFunction(() => document.querySelectorAll("#page-timeline canvas").length >= 2
    || /no timeline/.test(document.getElementById("timeline-note").textContent), null, { timeout: 20000 });
  seen.timelineCanvases = await page.$$eval("#page-timeline canvas", (c) => c.length);
  seen.timelineLegend = await page.$$eval("#page-timeline .u-legend .u-label", (ls) => ls.map((l) => l.textContent));
  seen.timelineNote = await page.textContent("#timeline-note");
  // Pointing at the memory chart names the call site of that point's peak.
  const over = await page.$("#timeline-memory .u-over");
  if (over) {
    const box = await over.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.waitForTimeout(200);
    seen.timelineSite = await page.textContent("#timeline-site");
  }
  // Dragging across the whole memory chart selects a time range: its
  // sites listed, and its flame graph a click away.
  await page.waitForFunction(() => document.getElementById("range-note").textContent.length > 0, null, { timeout: 20000 });
  seen.rangeNote = await page.textContent("#range-note");
  if (over && /checkpoints .*the last/.test(seen.rangeNote)) {
    const box = await over.boundingBox();
    await page.mouse.move(box.x + 1, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width - 1, box.y + box.height / 2, { steps: 8 });
    await page.mouse.up();
    await page.waitForSelector("#range-sites tr td", { timeout: 20000 });
    seen.rangeNote = await page.textContent("#range-note");
    seen.rangeSites = await page.$$eval("#range-sites tr", (rs) => rs.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
    await page.click("#range-note a");
    await page.waitForFunction(() => /from=/.test(document.getElementById("flame-frame").dataset.shown || ""), null, { timeout: 30000 });
    seen.rangeBanner = await page.textContent("#flame-range");
    const rf = await (await page.$("#flame-frame")).contentFrame();
    await rf.waitForSelector("g > title", { state: "attached", timeout: 30000 });
    seen.rangeFlame = await rf.$$eval("g > title", (ts) => ts.map((t) => t.textContent));
  }

  // The flame graph of one thread, where the profile has threads' own
  // stacks: the last thread listed.
  await page.click('nav a[data-page="flame"]');
  // The filter shows once the page's own request for the threads has its
  // answer, which a busy machine can delay: where the profile has threads
  // of their own stacks (asked here too), wait for it.
  const ownThreads = await page.evaluate(async () => {
    if (window.HEAPLEDGER_DATA) return false;
    try {
      const rows = await (await fetch("api/threads")).json();
      return rows.some((r) => r.own_stacks);
    } catch (e) {
      return false;
    }
  });
  if (ownThreads) await page.waitForSelector("#flame-thread", { state: "visible", timeout: 30000 }).catch(() => {});
  if (await page.isVisible("#flame-thread")) {
    const options = await page.$$eval("#flame-thread option", (os) => os.map((o) => o.value));
    seen.threadOptions = options;
    await page.selectOption("#flame-thread", options[options.length - 1]);
    await page.waitForFunction(() => /thread=/.test(document.getElementById("flame-frame").dataset.shown || ""), null, { timeout: 30000 });
    const tf = await (await page.$("#flame-frame")).contentFrame();
    await tf.waitForSelector("g > title", { state: "attached", timeout: 30000 });
    seen.threadFlame = await tf.$$eval("g > title", (ts) => ts.map((t) => t.textContent));
    await page.selectOption("#flame-thread", "");
  }

  // Sizes, leaks, threads, globals: their tables and text.
  const cells = (sel) => page.$$eval(sel, (rs) => rs.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
  await page.click('nav a[data-page="sizes"]');
  await page.waitForSelector("#sizes-table tr td", { timeout: 20000 });
  seen.sizes = await cells("#sizes-table tr");
  await page.waitForSelector("#scatter-life-size svg", { timeout: 20000 });
  seen.scatter = await page.$$eval(".scatters svg", (ss) => ss.map((s) => s.querySelectorAll("circle").length));
  await page.click('nav a[data-page="leaks"]');
  await page.waitForFunction(() => document.getElementById("leaks-text").textContent.length > 0, null, { timeout: 20000 });
  seen.leaks = await page.textContent("#leaks-text");
  await page.click('nav a[data-page="threads"]');
  await page.waitForSelector("#threads-table tr td", { timeout: 20000 });
  seen.threads = await cells("#threads-table tr");
  seen.threadsHead = await page.$$eval("#threads-table th", (hs) => hs.map((h) => h.textContent));
  await page.click('nav a[data-page="globals"]');
  await page.waitForFunction(() => document.getElementById("globals-total").textContent.length > 0, null, { timeout: 20000 });
  seen.globals = await page.textContent("#globals-total");
  seen.globalRows = await cells("#globals-table tr");
  await page.click('nav a[data-page="waits"]');
  await page.waitForFunction(() => document.getElementById("waits-total").textContent.length > 0, null, { timeout: 20000 });
  seen.waitsTotal = await page.textContent("#waits-total");
  seen.waits = (await cells("#waits-table tr")).filter((r) => r.length === 7);
  // A row's stacks open on a click.
  if (seen.waits.length) {
    await page.click("#waits-table tr.clickable");
    seen.waitsStacks = await page.textContent("#waits-table tr:not([hidden]) pre");
  }

  // The diff, where there is a base.
  if (await page.isVisible('nav a[data-page="diff"]')) {
    await page.click('nav a[data-page="diff"]');
    await page.waitForSelector("#diff-table tr td", { timeout: 30000 });
    seen.diff = await cells("#diff-table tr");
    seen.diffNote = await page.textContent("#diff-note");
    await page.waitForFunction(() => document.getElementById("diff-frame").dataset.shown, null, { timeout: 30000 });
    const df = await (await page.$("#diff-frame")).contentFrame();
    await df.waitForSelector("g > title", { state: "attached", timeout: 30000 });
    seen.diffFlame = await df.$$eval("g > title", (ts) => ts.map((t) => t.textContent));
  }

  // Screenshots of every page, for a person to look at.
  if (process.env.HEAPLEDGER_SHOTS) {
    for (const name of ["overview", "flame", "tree", "timeline", "sources", "sizes", "leaks", "threads", "globals", "waits", "diff"]) {
      if (!(await page.isVisible(`nav a[data-page="${name}"]`))) continue;
      await page.click(`nav a[data-page="${name}"]`);
      await page.waitForTimeout(700);
      await page.screenshot({ path: `${process.env.HEAPLEDGER_SHOTS}/${name}.png` });
    }
  }
  // Nothing but the page itself, its own blobs and data.
  const local = (r) => r.startsWith("blob:") || r.startsWith("data:")
    || (url.startsWith("file:") ? r.split("#")[0] === url.split("#")[0] : r.startsWith(new URL(url).origin + "/"));
  seen.remote = requests.filter((r) => !local(r));
} catch (e) {
  errors.push(`driver: ${e.message.split("\n")[0]}`);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ...seen, errors }));
