// heapledger's viewer: plain JavaScript, no build step. Served by
// `heapledger view` (data from its /api/ under the page's token path) or
// written into one file by `export --format html` (data embedded in
// window.HEAPLEDGER_DATA, keyed like the API's paths).
"use strict";

const EMBEDDED = window.HEAPLEDGER_DATA || null;
const METRICS = [
  ["bytes", "bytes allocated"], ["count", "allocations"], ["peak", "bytes at peak"],
  ["leaked", "bytes leaked"], ["temporary", "temporary allocations"], ["lifetime", "block lifetimes (ns)"],
  ["waited", "time lost waiting (ns)"],
];
const COLLAPSE = [["none", "not collapsed"], ["direct", "direct"], ["conservative", "conservative"], ["full", "full"]];

async function api(path, kind) {
  if (EMBEDDED) {
    if (!(path in EMBEDDED)) throw new Error("this view is not in this file (open the profile with `heapledger view` for every view)");
    return EMBEDDED[path];
  }
  const r = await fetch("api/" + path);
  if (!r.ok) throw new Error(await r.text());
  return kind === "text" ? r.text() : r.json();
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${u[i]}`;
}
function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function seconds(s) {
  if (s === null || s === undefined) return "–";
  return s < 1e-3 ? `${(s * 1e6).toFixed(0)} µs` : s < 1 ? `${(s * 1e3).toFixed(1)} ms` : `${s.toFixed(2)} s`;
}
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}
function fill(select, options, value) {
  select.replaceChildren(...options.map(([v, t]) => el("option", { value: v }, t)));
  select.value = value;
}
function failed(where, err) {
  where.replaceChildren(el("p", { class: "warning" }, String(err.message || err)));
}

// A "file:line" as a link to that line on the sources page.
function sourceLink(location) {
  const m = /^(.*):(\d+)$/.exec(location || "");
  if (!m || m[1] === "??") return location || "";
  return el("a", { href: `#sources?file=${encodeURIComponent(m[1])}&line=${m[2]}` }, location);
}

// ---- Overview ----
async function overview() {
  const s = await api("summary");
  const p = s.program;
  document.getElementById("program").textContent = p.command || p.exe;
  document.title = `heapledger: ${p.exe}`;
  const exit = p.exit_signal ? `killed by signal ${p.exit_signal}` : p.exit_code !== null ? `exited with code ${p.exit_code}` : "exit unknown";
  const leaks = s.alive_at_exit.by_the_program;
  const t = s.temporary || {};
  // [label, shown, detail, the exact number (a tooltip, and for tests)]
  const cards = [
    ["Program", p.exe, `${exit}, ${seconds(p.run_seconds)}`, ""],
    ["Peak requested", bytes(s.peak.requested_bytes), s.peak.seconds !== null ? `at ${seconds(s.peak.seconds)}` : "", s.peak.requested_bytes],
    ["Peak resident", bytes(s.peak.resident_bytes), "the kernel's count, the recorder's own included", s.peak.resident_bytes],
    ["Peak virtual", bytes(s.peak.virtual_bytes), "", s.peak.virtual_bytes],
    ["Allocations", num(s.allocations.count), bytes(s.allocations.bytes), s.allocations.count],
    ["Leaked", bytes(leaks.bytes), `${num(leaks.count)} blocks (the C/C++ runtime's apart)`, leaks.bytes],
    ["Temporary", t.count === null || t.count === undefined ? "not measured" : num(t.count),
      t.count ? `${(100 * t.count / Math.max(1, s.allocations.count)).toFixed(1)}% of allocations` : "", t.count ?? ""],
    ["Threads", num(s.threads.count), `at most ${num(s.threads.most_at_once)} at once`, s.threads.count],
    ["Recording", s.recording ? `${s.recording.stack_mode} stacks` : "MALT file", s.recording && s.recording.sample_every ? `sampled 1 in ${s.recording.sample_every}` : "", ""],
  ];
  document.getElementById("cards").replaceChildren(...cards.map(([l, v, d, exact]) =>
    el("div", { class: "card", "data-card": l, "data-exact": exact ?? "", title: exact === "" || exact === null ? "" : `${exact}` },
      el("div", { class: "label" }, l), el("div", { class: "value" }, v), el("div", { class: "detail" }, d))));
  const warn = [];
  if (leaks.bytes > 0) warn.push([`The program left ${bytes(leaks.bytes)} in ${num(leaks.count)} blocks allocated at exit.`, "#tree?metric=leaked", "Where they were allocated"]);
  if (t.count && t.count > 0.2 * s.allocations.count) warn.push([`${(100 * t.count / s.allocations.count).toFixed(0)}% of the allocations are temporary: freed before their thread allocated anything else; a local or reused buffer would spare them.`, "#flame?metric=temporary", "Their flame graph"]);
  if (s.peak.resident_bytes && s.peak.requested_bytes !== null && s.peak.resident_bytes > 2 * s.peak.requested_bytes + (64 << 20))
    warn.push([`Resident memory peaked at ${bytes(s.peak.resident_bytes)}, far above the ${bytes(s.peak.requested_bytes)} requested from malloc: memory mapped otherwise, fragmentation, or the recorder's own tables.`, "#timeline", "Memory over time"]);
  if (s.recording && s.recording.degraded) warn.push([s.recording.degraded, "#overview", ""]);
  if (s.recording && s.recording.truncated_stacks > 0) warn.push([`${num(s.recording.truncated_stacks)} stacks were cut at ${s.recording.max_depth} frames.`, "#tree", "The call tree"]);
  document.getElementById("warnings").replaceChildren(...warn.map(([text, href, link]) =>
    el("div", { class: "warning" }, text + " ", link ? el("a", { href }, link + " →") : "")));
  const rows = (s.top_sites_by_bytes || []).map((x) => el("tr", {},
    el("td", { class: "num" }, bytes(x.bytes)), el("td", { class: "num" }, num(x.calls)),
    el("td", { class: "num" }, bytes(x.bytes_at_peak)),
    el("td", { class: "mono" }, x.function), el("td", { class: "mono" }, sourceLink(x.location)), el("td", {}, x.library)));
  document.getElementById("sites").replaceChildren(
    el("tr", {}, ...["bytes", "calls", "at peak", "function", "where", "library"].map((h) => el("th", {}, h))), ...rows);
  // Each stack's innermost Python (CPython 3.12 and later) or JIT
  // function, where the profile has such frames.
  const jit = s.top_jit_functions_by_bytes || [];
  document.getElementById("jit-title").hidden = jit.length === 0;
  document.getElementById("jit-sites").hidden = jit.length === 0;
  document.getElementById("jit-sites").replaceChildren(
    el("tr", {}, ...["bytes", "calls", "at peak", "function", "file"].map((h) => el("th", {}, h))),
    ...jit.map((x) => el("tr", {},
      el("td", { class: "num" }, bytes(x.bytes)), el("td", { class: "num" }, num(x.calls)),
      el("td", { class: "num" }, bytes(x.bytes_at_peak)),
      el("td", { class: "mono" }, x.function), el("td", { class: "mono" }, x.location))));
}

// ---- Flame graph (inferno's SVG: zoom, search, tooltips) ----
// Added to inferno's SVG: each frame's tooltip gets every metric's weight
// once the page sends them (`flameinfo`, keyed by depth and inferno's
// fg:x); inferno's search keeps reading the first line only. Messages,
// not the frame's document: a page opened from a file cannot reach it.
function tooltipScript(inverted) {
  return `<script><![CDATA[
(function () {
  var inverted = ${inverted ? "true" : "false"};
  // A frame's label is its name, whatever its tooltip holds: inferno
  // reads the titles to label frames (after a zoom, a resize).
  function firstLines(elements, f) {
    var saved = [];
    for (var i = 0; i < elements.length; i++) {
      var t = find_child(elements[i], "title");
      var full = t ? t.textContent : "", first = full.split("\\n")[0];
      if (t && first !== full) { saved.push([t, full]); t.textContent = first; }
    }
    f();
    saved.forEach(function (s) { s[0].textContent = s[1]; });
  }
  var origUpdateText = update_text, origUpdateTexts = update_text_for_elements;
  window.update_text = function (e) { firstLines([e], function () { origUpdateText(e); }); };
  window.update_text_for_elements = function (els) { firstLines(els, function () { origUpdateTexts(els); }); };
  window.g_to_func = function (e) {
    var t = g_to_text(e);
    return t == null ? t : t.split("\\n")[0].replace(/ \\([^(]*\\)$/, "");
  };
  window.addEventListener("message", function (ev) {
    var texts = ev.data && ev.data.heapledgerTooltips;
    if (!texts) return;
    var rects = Array.prototype.filter.call(document.querySelectorAll("g > rect"), function (r) { return r.hasAttribute("fg:x"); });
    var ys = [];
    rects.forEach(function (r) { var y = Number(r.getAttribute("y")); if (ys.indexOf(y) === -1) ys.push(y); });
    ys.sort(function (a, b) { return a - b; });
    rects.forEach(function (r) {
      var i = ys.indexOf(Number(r.getAttribute("y")));
      var depth = inverted ? i : ys.length - 1 - i;
      var extra = texts[depth + ":" + r.getAttribute("fg:x")];
      var t = r.parentNode.querySelector("title");
      if (extra && t) t.textContent = t.textContent.split("\\n")[0] + "\\n" + extra;
    });
    document.documentElement.setAttribute("data-tooltips", "all");
  });
  // The zoomed frame's path, for the page's breadcrumb; a crumb zooms
  // back to its frame.
  var ys = null;
  function depthOf(r) {
    if (!ys) {
      ys = [];
      document.querySelectorAll("g > rect").forEach(function (x) {
        var y = Number(x.getAttribute("y"));
        if (x.hasAttribute("fg:x") && ys.indexOf(y) === -1) ys.push(y);
      });
      ys.sort(function (a, b) { return a - b; });
    }
    var i = ys.indexOf(Number(r.getAttribute("y")));
    return inverted ? i : ys.length - 1 - i;
  }
  function keyOf(r) { return depthOf(r) + ":" + r.getAttribute("fg:x"); }
  function tell(node) {
    var path = [];
    if (node) {
      var rect = node.querySelector("rect");
      var x = Number(rect.getAttribute("fg:x")), w = Number(rect.getAttribute("fg:w")), d = depthOf(rect);
      document.querySelectorAll("g > rect").forEach(function (r) {
        if (!r.hasAttribute("fg:x")) return;
        var rx = Number(r.getAttribute("fg:x")), rw = Number(r.getAttribute("fg:w")), rd = depthOf(r);
        if (rd >= 1 && rd <= d && rx <= x && rx + rw >= x + w) {
          var t = r.parentNode.querySelector("title");
          path.push({ depth: rd, key: keyOf(r), name: t ? g_to_func(r.parentNode) : "?" });
        }
      });
      path.sort(function (a, b) { return a.depth - b.depth; });
    }
    parent.postMessage({ heapledgerZoomed: path }, "*");
  }
  var origZoom = zoom, origUnzoom = unzoom;
  window.zoom = function (node) { origZoom(node); tell(node); };
  window.unzoom = function () { origUnzoom.apply(this, arguments); tell(null); };
  window.addEventListener("message", function (ev) {
    if (!ev.data || !("heapledgerZoomTo" in ev.data)) return;
    var key = ev.data.heapledgerZoomTo;
    unzoom();
    if (key === null) return;
    var rect = Array.prototype.find.call(document.querySelectorAll("g > rect"), function (r) {
      return r.hasAttribute("fg:x") && keyOf(r) === key;
    });
    if (rect) zoom(rect.parentNode);
  });
})();
]]><\/script>`;
}

// A flame graph frame's weights by every metric, one line each.
function tooltipTexts(info) {
  const shown = (unit, v) => unit === "bytes" ? bytes(v) : unit === "ns" ? seconds(v / 1e9) : num(v);
  const texts = {};
  for (const [key, values] of Object.entries(info.frames)) {
    texts[key] = info.metrics.map((m, j) => values[j] === null ? null : `${m}: ${shown(info.units[j], values[j])}`)
      .filter((l) => l !== null).join("\n");
  }
  return texts;
}

// The breadcrumb of the zoomed frame: "all", then each frame down to it;
// a click zooms there.
window.addEventListener("message", (ev) => {
  const frame = document.getElementById("flame-frame");
  if (ev.source !== frame.contentWindow || !ev.data || !ev.data.heapledgerZoomed) return;
  const crumbs = document.getElementById("flame-crumbs");
  const to = (key) => () => frame.contentWindow.postMessage({ heapledgerZoomTo: key }, "*");
  const path = ev.data.heapledgerZoomed;
  if (!path.length) { crumbs.replaceChildren(); return; }
  const kids = [el("a", { onclick: to(null) }, "all")];
  for (const p of path) kids.push(el("span", { class: "sep" }, "›"), el("a", { onclick: to(p.key) }, p.name));
  // The frame zoomed into: its source, a click away.
  const last = path[path.length - 1].name;
  kids.push(el("a", { class: "src", title: `the source of ${last}`, onclick: () => goSource(last, crumbs) }, "source ↗"));
  crumbs.replaceChildren(...kids);
});

// Opens the source of routine `name` (where its addresses lie) on the
// sources page; says so in `note` where the profile has none.
async function goSource(name, note) {
  let r;
  try { r = await api(`where?function=${encodeURIComponent(name)}`); } catch (e) { r = { file: null }; }
  if (!r.file) {
    note.append(el("span", { class: "warning" }, ` no source file for ${name}`));
    return;
  }
  location.hash = `#sources?file=${encodeURIComponent(r.file)}${r.line ? `&line=${r.line}` : ""}`;
}

let flameAsked = 0;
// The time range the flame graph is limited to (set from the timeline:
// `#flame?from=S&to=S`), or null for the whole run.
let flameRange = null;
async function flame() {
  let m = document.getElementById("flame-metric").value;
  if (flameRange && m !== "bytes" && m !== "count") document.getElementById("flame-metric").value = m = "bytes";
  const inv = document.getElementById("flame-inverted").checked ? 1 : 0;
  const c = document.getElementById("flame-collapse").value;
  const jit = document.getElementById("flame-jit").checked ? 1 : 0;
  const frame = document.getElementById("flame-frame");
  const thread = document.getElementById("flame-thread").value;
  if (thread && m !== "bytes" && m !== "count") document.getElementById("flame-metric").value = m = "bytes";
  const range = flameRange ? `&from=${flameRange[0]}&to=${flameRange[1]}` : thread ? `&thread=${thread}` : "";
  const banner = document.getElementById("flame-range");
  banner.hidden = !flameRange;
  if (flameRange) {
    banner.replaceChildren(`Only what was allocated between ${seconds(flameRange[0])} and ${seconds(flameRange[1])} (weighed by bytes or allocations). `,
      el("a", { href: "#flame" }, "Show the whole run"));
  }
  if (frame.dataset.shown === `${m},${inv},${c},${jit}${range}`) return;
  // Choices made in quick succession each ask for a graph; only the last
  // one asked for is shown, whatever order the answers come in.
  const asked = ++flameAsked;
  try {
    let svg = await api(`flame?metric=${m}&inverted=${inv}&collapse=${c}&jit=${jit}${range}`, "text");
    if (asked !== flameAsked) return;
    svg = inFrame(svg);
    svg = svg.replace(/<\/svg>\s*$/, tooltipScript(inv) + "</svg>");
    // The graph shown before is let go once the new one has loaded, not
    // while the frame may still be reading it.
    const before = frame.dataset.url;
    const url = URL.createObjectURL(new Blob([svg], { type: "image/svg+xml" }));
    frame.dataset.url = url;
    // The frame as tall as the graph, the page scrolled to its base (the
    // roots; the top for the callers' view, drawn downwards).
    const height = Number((svg.match(/<svg[^>]*\sheight="(\d+)"/) || [])[1] || 600);
    frame.style.height = `${height + 24}px`;
    frame.onload = () => {
      if (before) URL.revokeObjectURL(before);
      // Every metric in the tooltips, where the data is there (a file
      // holds it for its first graph).
      api(`flameinfo?metric=${m}&inverted=${inv}&collapse=${c}&jit=${jit}${range}`).then((info) => {
        if (asked === flameAsked) frame.contentWindow.postMessage({ heapledgerTooltips: tooltipTexts(info) }, "*");
      }).catch(() => {});
      const top = frame.getBoundingClientRect().top + window.scrollY;
      window.scrollTo(0, inv ? top - 120 : top + height + 24 - window.innerHeight);
    };
    document.getElementById("flame-crumbs").replaceChildren();
    frame.src = url;
    frame.dataset.shown = `${m},${inv},${c},${jit}${range}`;
  } catch (e) {
    frame.removeAttribute("src");
    frame.dataset.shown = "";
    failed(frame.parentElement.querySelector(".controls"), e);
  }
}

// inferno's flame graph script, made to run inside a frame: it keeps its
// zoom and search in the URL, which a blob: URL has none of to change
// (that would stop the script); and it sizes its frames to the page's
// width less its margins, which a frame not laid out (a page left before
// its graph loaded) has none of: a negative width, then positions of
// "Infinity%", each an error in the browser. It waits for a width (the
// frame's resize event comes when it is shown).
function inFrame(svg) {
  return svg
    .replaceAll("history.replaceState(", "(function(){try{history.replaceState.apply(history,arguments)}catch(e){}})(")
    .replace("var update_for_width_change = function() {",
      "var update_for_width_change = function() { if (svg.width.baseVal.value <= xpad * 2) return;");
}

// ---- Call tree: expandable rows, stubs that jump to their target ----
// The call tree last fetched, and the column its siblings are sorted by
// (a click on a header: "incl", "excl" or "routine"; again: the other way).
let treeData = null;
// Whether the tree shown has only the Python and JIT functions.
let treeJit = false;
let treeSort = { key: "incl", desc: true };
async function tree() {
  const m = document.getElementById("tree-metric").value;
  const d = document.getElementById("tree-direction").value;
  const c = document.getElementById("tree-collapse").value;
  const jit = document.getElementById("tree-jit").checked;
  const table = document.getElementById("tree-table");
  try {
    treeData = await api(`tree?metric=${m}&direction=${d}&collapse=${c}${jit ? "&jit=1" : ""}`);
  } catch (e) { failed(table, e); return; }
  treeJit = jit;
  renderTree();
}

function renderTree() {
  const t = treeData;
  const table = document.getElementById("tree-table");
  document.getElementById("tree-total").textContent = `${t.direction}, ${t.mode} collapse${treeJit ? ", Python and JIT functions only" : ""}: ${num(t.total)} ${t.metric} in all; nodes under 0.1% left out.`;
  const sortBy = (key) => () => {
    treeSort = { key, desc: treeSort.key === key ? !treeSort.desc : key !== "routine" };
    renderTree();
  };
  const th = (text, key) => {
    const mark = treeSort.key === key ? (treeSort.desc ? " ▾" : " ▴") : "";
    return el("th", { class: "sortable", "data-sort": key, title: "sort the rows under each node by this column", onclick: sortBy(key) }, text + mark);
  };
  const head = el("tr", {}, th("In or under: direct (indirect)", "incl"), th("In only", "excl"), el("th", {}, "Level"), th("Routine", "routine"));
  const weightOf = (n) => n.stub_to !== undefined ? (n.traversed || 0) : n.incl_direct + n.incl_indirect;
  const value = { incl: weightOf, excl: (n) => n.excl || 0, routine: (n) => n.routine };
  const ordered = (list) => {
    if (treeSort.key === "incl" && treeSort.desc) return list;
    const f = value[treeSort.key];
    return [...list].sort((a, b) => {
      const [x, y] = [f(a), f(b)];
      const c = typeof x === "string" ? x.localeCompare(y) : x - y;
      return treeSort.desc ? -c : c;
    });
  };
  const body = [];
  let id = 0;
  // Open: the first two levels, and the heaviest path while it holds a
  // fifth of the total (children come heaviest first).
  function add(n, depth, parentRow, visible, hot) {
    const rowId = `n${id++}`;
    const stub = n.stub_to !== undefined;
    const kids = n.children || [];
    const open = kids.length > 0 && (depth < 2 || (hot && n.incl_direct + n.incl_indirect >= 0.2 * t.total));
    const toggle = el("span", { class: "toggle" }, kids.length ? (open ? "▾" : "▸") : "");
    const name = stub
      ? el("span", { class: "stub" }, `${n.routine}... `, el("a", { "data-level": n.stub_to }, `↑ to level ${n.stub_to}`))
      : n.routine;
    const cells = stub
      ? [el("td", { class: "num" }, `(${num(n.traversed)})`), el("td", { class: "num" }, ""), el("td", { class: "num" }, ""), el("td", { class: "routine", style: `padding-left:${depth * 1.1}em` }, name)]
      : [el("td", { class: "num" }, `${num(n.incl_direct)} (${num(n.incl_indirect)})`), el("td", { class: "num" }, num(n.excl)), el("td", { class: "num" }, n.level), el("td", { class: "routine", style: `padding-left:${depth * 1.1}em` }, toggle, el("a", { class: "src", title: "its source", onclick: () => goSource(n.routine, document.getElementById("tree-total")) }, name))];
    const row = el("tr", { id: rowId, "data-parent": parentRow || "", "data-routine": n.routine, "data-level": stub ? "" : n.level }, ...cells);
    row.hidden = !visible;
    row.dataset.open = open ? "1" : "0";
    body.push(row);
    toggle.addEventListener("click", () => {
      const open = row.dataset.open !== "1";
      row.dataset.open = open ? "1" : "0";
      toggle.textContent = open ? "▾" : "▸";
      showKids(rowId, open);
    });
    ordered(kids).forEach((k, i) => add(k, depth + 1, rowId, visible && open, hot && i === 0));
  }
  function showKids(rowId, show) {
    for (const r of body) if (r.dataset.parent === rowId) {
      r.hidden = !show;
      if (!show || r.dataset.open === "1") showKids(r.id, show && r.dataset.open === "1");
    }
  }
  ordered(t.roots).forEach((r, i) => add(r, 0, null, true, i === 0));
  table.replaceChildren(head, ...body);
  table.querySelectorAll(".stub a").forEach((a) => a.addEventListener("click", () => {
    // The target: the ancestor row at the stub's level.
    const row = a.closest("tr");
    for (let p = document.getElementById(row.dataset.parent); p; p = document.getElementById(p.dataset.parent)) {
      if (p.dataset.level === a.dataset.level) { p.scrollIntoView({ block: "center" }); p.classList.add("flash"); setTimeout(() => p.classList.remove("flash"), 1200); break; }
    }
  }));
}

// ---- Timeline (uPlot) ----
let plots = [];
async function timeline() {
  let t;
  const note = document.getElementById("timeline-note");
  try { t = await api("timeline"); } catch (e) { failed(note, e); return; }
  plots.forEach((p) => p.destroy());
  plots = [];
  if (!t.seconds.length) { note.textContent = "This profile has no timeline."; return; }
  note.textContent = `${t.seconds.length} points, ${seconds(t.step_seconds)} apart; each point the highest value of its stretch of time.`;
  const width = Math.max(400, document.querySelector("main").clientWidth - 40);
  const axisBytes = { values: (u, vals) => vals.map((v) => bytes(v)), size: 80 };
  const siteLine = document.getElementById("timeline-site");
  // The checkpoints, where a selected time range starts and ends: dashed
  // lines across the memory chart.
  const points = await api("range").then((r) => r.points).catch(() => []);
  const checkpointLines = (u) => {
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "rgba(60, 60, 60, 0.35)";
    ctx.lineWidth = 1;
    ctx.setLineDash([3, 4]);
    for (const t of points) {
      const x = Math.round(u.valToPos(t, "x", true));
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    }
    ctx.restore();
  };
  plots.push(new uPlot({
    title: "Memory", width, height: 300, scales: { x: { time: false } },
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: { draw: [checkpointLines], setSelect: [(u) => {
      if (u.select.width < 2) return;
      selectRange(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
    }], setCursor: [(u) => {
      const i = u.cursor.idx;
      if (i === null || i === undefined) return;
      const site = t.sites && t.sites[i];
      siteLine.textContent = `${seconds(t.seconds[i])}: ${bytes(t.requested[i])} requested at most` +
        (site ? `, that maximum set by an allocation in ${site}` : "");
    }] },
    series: [{ label: "s" }, { label: "requested", stroke: "#b3401a", width: 2 }, { label: "resident", stroke: "#2f6db5" }, { label: "virtual", stroke: "#8a8f9c", dash: [4, 4] }],
    axes: [{ label: "seconds" }, axisBytes],
  }, [t.seconds, t.requested, t.resident, t.virtual], document.getElementById("timeline-memory")));
  plots.push(new uPlot({
    title: "Allocated and freed per point", width, height: 220, scales: { x: { time: false } },
    series: [{ label: "s" }, { label: "allocated", stroke: "#b3401a" }, { label: "freed", stroke: "#2f6db5" }],
    axes: [{ label: "seconds" }, axisBytes],
  }, [t.seconds, t.alloc_bytes, t.free_bytes], document.getElementById("timeline-rates")));
  document.getElementById("range-note").textContent = points.length
    ? `Drag across the memory chart to select a time range: the sites that allocated in it are listed here, with what they still held at its end. The run wrote ${points.length} checkpoints (the dashed lines), the last at ${seconds(points[points.length - 1])}; a range starts and ends at them.`
    : "This profile has no checkpoints (`heapledger run` writes one every 2 s, and at the end), so no time range can be selected.";
}

// What the sites allocated in a time range of the run (the checkpoints
// around it), as a table, with a link to its flame graph.
async function selectRange(a, b) {
  const out = document.getElementById("range-sites");
  let r;
  try { r = await api(`range?from=${a.toFixed(6)}&to=${b.toFixed(6)}`); } catch (e) { failed(out, e); return; }
  document.getElementById("range-note").replaceChildren(
    `From ${r.from === 0 ? "the start" : seconds(r.from)} to ${seconds(r.to)} (the checkpoints around the selection): ${num(r.allocations)} allocations, ${bytes(r.bytes)}; ${num(r.frees)} frees, ${bytes(r.freed)}; ${num(r.sites_count)} sites. `,
    el("a", { href: `#flame?from=${r.from}&to=${r.to}` }, "Flame graph of this range"));
  const head = el("tr", {}, ...["Function", "Location", "Allocations", "Bytes", "Freed", "Held at its end", "Library"].map((h) => el("th", {}, h)));
  const rows = r.sites.map((s) => el("tr", {},
    el("td", { class: "mono" }, s.function), el("td", { class: "mono" }, sourceLink(s.location)),
    el("td", { class: "num" }, num(s.allocations)), el("td", { class: "num" }, bytes(s.bytes)),
    el("td", { class: "num" }, bytes(s.freed)), el("td", { class: "num" }, bytes(s.held)),
    el("td", { class: "mono" }, s.library)));
  out.replaceChildren(head, ...rows);
}

// ---- Sizes, leaks, threads, globals ----
function table(id, head, rows, numeric) {
  document.getElementById(id).replaceChildren(
    el("tr", {}, ...head.map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", {}, ...r.map((c, i) => el("td", { class: numeric.includes(i) ? "num" : "mono" }, c)))));
}
function shortSize(b) {
  return b >= 1 << 20 ? `${b / (1 << 20)} MiB` : b >= 1024 ? `${b / 1024} KiB` : `${b} B`;
}
async function sizes() {
  const s = await api("summary");
  const ranges = s.allocation_sizes || [];
  const total = ranges.reduce((a, r) => a + r.count, 0) || 1;
  const most = Math.max(1, ...ranges.map((r) => r.count));
  scatters();
  table("sizes-table", ["sizes", "allocations", "share", ""], ranges.map((r) => [
    r.below_bytes === null ? `${shortSize(r.from_bytes)} and more` : `${shortSize(r.from_bytes)} – ${shortSize(r.below_bytes)}`,
    num(r.count), `${(100 * r.count / total).toFixed(1)}%`,
    el("span", { class: "bar", style: `width:${Math.max(1, 300 * r.count / most)}px` }),
  ]), [1, 2]);
}
// A scatter plot as SVG: bins [x, y, count], a circle each (area by the
// count's logarithm); log2 axes where asked.
function scatterSvg(points, xLog, yLog, xFmt, yFmt) {
  const W = 560, H = 320, L = 70, B = 30, T = 10, R = 10;
  const ns = "http://www.w3.org/2000/svg";
  const mk = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); return e; };
  const svg = mk("svg", { viewBox: `0 0 ${W} ${H}`, "data-points": points.length });
  if (!points.length) { const t = mk("text", { x: W / 2 - 60, y: H / 2 }); t.textContent = "nothing recorded"; svg.append(t); return svg; }
  const f = (v, log) => log ? Math.log2(Math.max(1e-9, v)) : v;
  const xs = points.map((p) => f(p[0], xLog)), ys = points.map((p) => f(p[1], yLog));
  const [x0, x1] = [Math.min(...xs), Math.max(...xs) || 1], [y0, y1] = [Math.min(...ys), Math.max(...ys) || 1];
  const sx = (v) => L + (W - L - R) * (x1 === x0 ? 0.5 : (v - x0) / (x1 - x0));
  const sy = (v) => H - B - (H - B - T) * (y1 === y0 ? 0.5 : (v - y0) / (y1 - y0));
  const most = Math.max(...points.map((p) => p[2]));
  points.forEach((p, i) => {
    const c = mk("circle", { cx: sx(xs[i]), cy: sy(ys[i]), r: 2 + 6 * Math.log1p(p[2]) / Math.log1p(most) });
    const t = mk("title", {}); t.textContent = `${num(p[2])} at ${xFmt(p[0])}, ${yFmt(p[1])}`; c.append(t); svg.append(c);
  });
  const label = (x, y, text, anchor) => { const t = mk("text", { x, y, "text-anchor": anchor }); t.textContent = text; svg.append(t); };
  label(L, H - 8, xFmt(xLog ? 2 ** x0 : x0), "start"); label(W - R, H - 8, xFmt(xLog ? 2 ** x1 : x1), "end");
  label(L - 6, H - B, yFmt(yLog ? 2 ** y0 : y0), "end"); label(L - 6, T + 10, yFmt(yLog ? 2 ** y1 : y1), "end");
  return svg;
}
async function scatters() {
  let s;
  try { s = await api("scatter"); } catch (e) { return; }
  document.getElementById("scatter-size-time").replaceChildren(scatterSvg(s.size_over_time, false, true, seconds, bytes));
  document.getElementById("scatter-life-size").replaceChildren(scatterSvg(s.lifetime_over_size, true, true, bytes, seconds));
}
async function leaks() {
  document.getElementById("leaks-text").textContent = await api("leaks", "text");
}
async function threads() {
  const t = await api("threads");
  const fns = ["malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc"]
    .filter((f) => t.some((r) => r.calls[f]));
  table("threads-table", ["thread", "memory operations", ...fns, "deepest stack"], t.map((r) => [
    r.merged ? `${num(r.merged)} ended threads` : `${r.thread}`, num(r.mem_ops),
    ...fns.map((f) => r.calls[f] ? num(r.calls[f][0]) : "0"), bytes(r.deepest_stack_bytes),
  ]), [0, 1, ...fns.map((_, i) => i + 2), fns.length + 2]);
}
async function globals() {
  const g = await api("globals");
  document.getElementById("globals-total").textContent =
    `${num(g.count)} global and thread-local variables, ${bytes(g.bytes)} in all${g.count > g.rows.length ? `; the ${g.rows.length} largest below` : ""}.`;
  table("globals-table", ["size", "name", "kind", "binary", "declared at"], g.rows.map((v) => [
    bytes(v.size), v.name, v.tls ? "thread-local" : "global", v.binary, v.file ? `${v.file}${v.line ? ":" + v.line : ""}` : "",
  ]), [0]);
}
// Time lost waiting (`heapledger waits`): each entry, the waiter's site and
// the holder's; the whole stacks on a click.
async function waits() {
  const w = await api("waits");
  const rows = w.entries || [];
  document.getElementById("waits-total").textContent = rows.length
    ? `${seconds(w.total_seconds)} lost waiting in ${num(rows.length)} entries (locks, condition variables, joins, semaphores; each thread keeps its longest). A row's stacks open on a click.`
    : "No time lost waiting was recorded (no lock wait, condition, join or semaphore that blocked; or run --no-waits).";
  const site = (s) => s ? el("span", {}, `${s.function} `, sourceLink(s.location)) : "";
  const head = el("tr", {}, ...["total", "waits", "longest", "kind", "thread", "waiting at", "held by"].map((h) => el("th", {}, h)));
  const body = [];
  for (const e of rows) {
    const row = el("tr", { class: "clickable" },
      el("td", { class: "num" }, seconds(e.total_seconds)), el("td", { class: "num" }, num(e.count)),
      el("td", { class: "num" }, seconds(e.max_seconds)), el("td", {}, e.kind),
      el("td", { class: "num" }, e.thread === null ? "ended" : `${e.thread + 1}`),
      el("td", { class: "mono" }, site(e.site)), el("td", { class: "mono" }, site(e.holder)));
    const stacks = el("tr", { hidden: "" }, el("td", { colspan: "7" },
      el("pre", { class: "report" }, ["waiting at:", ...e.stack.map((f) => "  " + f),
        ...(e.holder_stack.length ? ["held by:", ...e.holder_stack.map((f) => "  " + f)] : [])].join("\n"))));
    row.onclick = () => { stacks.hidden = !stacks.hidden; };
    body.push(row, stacks);
  }
  document.getElementById("waits-table").replaceChildren(head, ...body);
}

// ---- Sources: the files the stacks name; a file's lines with their sums ----
async function sources(params) {
  if (!loaded.sourceFiles) {
    loaded.sourceFiles = true;
    const files = await api("sources");
    document.getElementById("sources-files").replaceChildren(
      el("tr", {}, el("th", {}, "bytes under it"), el("th", {}, "file")),
      ...files.slice(0, 300).map((f) => el("tr", {}, el("td", { class: "num" }, bytes(f.sums[1])),
        el("td", { class: "mono", onclick: () => { location.hash = `#sources?file=${encodeURIComponent(f.file)}`; } }, f.file))));
  }
  const file = params && params.get("file");
  if (file) await sourceFile(file, Number(params.get("line") || 0));
}
async function sourceFile(file, line) {
  document.getElementById("source-name").textContent = file;
  let s;
  try { s = await api(`source?file=${encodeURIComponent(file)}`); } catch (e) { failed(document.getElementById("source-note"), e); return; }
  document.getElementById("source-note").textContent = s.found
    ? "Beside each line: the allocations and bytes of the stacks through it, and the bytes allocated right there, at the peak, and alive at exit."
    : "The file is not on this machine: only its lines' numbers are shown.";
  const count = Math.max(s.lines.length, ...Object.keys(s.through).map(Number));
  const rows = [el("tr", {}, ...["allocations", "bytes", "here", "at peak", "at exit", "", ""].map((h) => el("th", {}, h)))];
  for (let n = 1; n <= count; n++) {
    const t = s.through[n], h = s.here[n];
    const row = el("tr", { id: `L${n}`, class: t ? "hot" : "" },
      el("td", { class: "num" }, t ? num(t[0]) : ""), el("td", { class: "num" }, t ? bytes(t[1]) : ""),
      el("td", { class: "num" }, h ? bytes(h[1]) : ""), el("td", { class: "num" }, h ? bytes(h[2]) : ""),
      el("td", { class: "num" }, h ? bytes(h[3]) : ""), el("td", { class: "num" }, String(n)),
      el("td", { class: "code" }, s.lines[n - 1] ?? ""));
    rows.push(row);
  }
  const table = document.getElementById("source-text");
  table.replaceChildren(...rows);
  const target = line && document.getElementById(`L${line}`);
  if (target) { target.classList.add("target"); target.scrollIntoView({ block: "center" }); }
}

// ---- Diff (view PROFILE BASE) ----
function signed(v, fmt) {
  return v === 0 ? "0" : (v > 0 ? "+" : "−") + fmt(Math.abs(v));
}
async function diff() {
  const d = await api("diff");
  document.getElementById("diff-note").textContent =
    `${d.sites.length} sites changed from ${d.base} (base) to ${d.new}, largest change in bytes first.`;
  const cols = [["calls", num], ["bytes", bytes], ["bytes_at_peak", bytes], ["leaked", bytes]];
  const head = el("tr", {}, ...["function", "where", ...cols.map(([c]) => c.replaceAll("_", " ")), "library"].map((h) => el("th", {}, h)));
  const rows = d.sites.slice(0, 200).map((s) => el("tr", {},
    el("td", { class: "mono" }, s.function), el("td", { class: "mono" }, s.location),
    ...cols.map(([c, f]) => {
      const v = s.new[c] - s.base[c];
      return el("td", { class: `num ${v > 0 ? "grew" : v < 0 ? "shrank" : ""}`, title: `${s.base[c]} → ${s.new[c]}` }, signed(v, f));
    }),
    el("td", {}, s.library)));
  document.getElementById("diff-table").replaceChildren(head, ...rows);
  const svg = await api("diffflame?metric=bytes", "text");
  const frame = document.getElementById("diff-frame");
  frame.src = URL.createObjectURL(new Blob([inFrame(svg)], { type: "image/svg+xml" }));
  frame.dataset.shown = "1";
}

// ---- Pages ----
const PAGES = { overview, flame, tree, timeline, sources, sizes, leaks, threads, globals, waits, diff };
const loaded = {};
function show() {
  const [page, query] = (location.hash.slice(1) || "overview").split("?");
  const name = PAGES[page] ? page : "overview";
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  for (const s of document.querySelectorAll(".page")) s.classList.toggle("active", s.id === `page-${name}`);
  if (name === "flame") {
    const from = params.get("from"), to = params.get("to");
    const range = from !== null && to !== null ? [Number(from), Number(to)] : null;
    if (JSON.stringify(range) !== JSON.stringify(flameRange)) { flameRange = range; loaded.flame = false; }
  }
  if (params.get("metric")) {
    for (const id of ["flame-metric", "tree-metric"]) document.getElementById(id).value = params.get("metric");
    loaded.flame = loaded.tree = false;
  }
  if (name === "sources") {
    sources(params).catch((e) => failed(document.getElementById("source-note"), e));
  } else if (!loaded[name]) {
    loaded[name] = true;
    PAGES[name]().catch((e) => failed(document.getElementById(`page-${name}`), e));
  }
}
fill(document.getElementById("flame-metric"), METRICS, "bytes");
// The thread filter: the threads whose own stacks the profile holds.
api("threads").then((rows) => {
  const own = rows.filter((r) => r.own_stacks);
  if (!own.length || EMBEDDED) return;
  const select = document.getElementById("flame-thread");
  fill(select, [["", "all threads"], ...own.map((r) => [String(r.thread), `thread ${r.thread}${r.thread === 1 ? " (main)" : ""}`])], "");
  select.parentElement.hidden = false;
}).catch(() => {});
fill(document.getElementById("tree-metric"), METRICS, "bytes");
document.querySelectorAll("select.collapse").forEach((s) => fill(s, COLLAPSE, "none"));
for (const id of ["flame-metric", "flame-inverted", "flame-collapse", "flame-jit", "flame-thread"]) document.getElementById(id).addEventListener("change", flame);
for (const id of ["tree-metric", "tree-direction", "tree-collapse", "tree-jit"]) document.getElementById(id).addEventListener("change", tree);
window.addEventListener("hashchange", show);
api("meta").then((m) => { if (m.base) document.querySelector('nav a[data-page="diff"]').hidden = false; }).catch(() => {});
overview().catch((e) => failed(document.getElementById("page-overview"), e));
loaded.overview = true;
show();
