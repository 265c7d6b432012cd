// The clink dashboard: draws the plan once (/api/plan), then updates every number from the
// snapshots /events sends each second. Plain DOM and SVG; every element a test or a user may
// want to find carries a data- attribute (data-operator, data-metric, data-checkpoint, data-line).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const BOX_W = 210, BOX_H = 84, SMALL_H = 36, GAP_X = 24, GAP_Y = 30, PAD = 12;
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) => token ? `${path}?token=${encodeURIComponent(token)}` : path;
let plan = null;
let finalState = false;

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

const fmt = {
  int: (v) => v == null ? "–" : Math.round(v).toLocaleString("en-US"),
  rate: (v) => v == null ? "–" : (v >= 100 ? Math.round(v).toLocaleString("en-US") : v.toFixed(1)),
  bytes: (v) => {
    if (v == null) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return `${i ? v.toFixed(1) : v} ${units[i]}`;
  },
  ms: (v) => {
    if (v == null) return "–";
    if (v >= 172800000) return `${(v / 86400000).toFixed(1)} d`;
    if (v >= 7200000) return `${(v / 3600000).toFixed(1)} h`;
    if (v >= 10000) return `${(v / 1000).toFixed(1)} s`;
    return `${v.toFixed(v < 10 ? 2 : 0)} ms`;
  },
  pct: (v) => v == null ? "–" : `${Math.round(v * 100)}%`,
  time: (ms) => ms == null ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", ""),
};

// -- the plan: graph and SQL, drawn once

const COMPACT = new Set(["chain", "exchange", "union"]);
const heightOf = (n) => COMPACT.has(n.kind) ? SMALL_H : BOX_H;

// Depth runs down the page (sources at the top, sinks at the bottom). Each node keeps a column
// from its own row down to its furthest consumer, so an edge that skips rows runs down an empty
// column instead of through the boxes in between; a node takes its first input's column when
// that column is free. Stateless nodes (chains, exchanges) are drawn smaller than the operators.
function layout(nodes) {
  const depth = new Map(nodes.map((n) => [n.id, n.depth]));
  const reach = new Map(nodes.map((n) => [n.id, n.depth]));
  for (const n of nodes) for (const i of n.inputs) reach.set(i, Math.max(reach.get(i), n.depth));
  const column = new Map(), occupants = [];  // occupants[c]: the nodes whose column c is
  const free = (c, d) => (occupants[c] || []).every((m) => depth.get(m) === d ? false
    : reach.get(m) <= d || depth.get(m) > d);
  const rows = new Map();
  for (const n of [...nodes].sort((a, b) => a.depth - b.depth || a.id - b.id)) {
    const preferred = n.inputs.length ? [column.get(n.inputs[0])] : [];
    let c = preferred.find((p) => free(p, n.depth));
    for (let k = 0; c === undefined; k++) if (free(k, n.depth)) c = k;
    column.set(n.id, c);
    (occupants[c] = occupants[c] || []).push(n.id);
    if (!rows.has(n.depth)) rows.set(n.depth, []);
    rows.get(n.depth).push(n);
  }
  const at = new Map();
  let y = PAD;
  for (const d of [...rows.keys()].sort((a, b) => a - b)) {
    for (const n of rows.get(d)) at.set(n.id, { x: PAD + column.get(n.id) * (BOX_W + GAP_X), y, h: heightOf(n) });
    y += Math.max(...rows.get(d).map(heightOf)) + GAP_Y;
  }
  return { at, width: PAD * 2 + occupants.length * (BOX_W + GAP_X) - GAP_X, height: y - GAP_Y + PAD };
}

function drawGraph() {
  const graph = document.getElementById("graph");
  graph.replaceChildren();
  const { at, width, height } = layout(plan.nodes);
  graph.setAttribute("viewBox", `0 0 ${width} ${height}`);
  graph.setAttribute("width", width);
  graph.setAttribute("height", height);
  const byId = new Map(plan.nodes.map((n) => [n.id, n]));
  for (const e of plan.edges) {
    const a = at.get(e.from), b = at.get(e.to);
    // Down the source's column to the gap above the target's row, then across to the target.
    const x1 = a.x + BOX_W / 2, y1 = a.y + a.h, x2 = b.x + BOX_W / 2, y2 = b.y, yb = y2 - GAP_Y, mid = (yb + y2) / 2;
    const from = byId.get(e.from).operator, to = byId.get(e.to).operator;
    graph.append(svg("path", { class: "edge", d: `M${x1},${y1} L${x1},${yb} C${x1},${mid} ${x2},${mid} ${x2},${y2}`,
      "data-edge": `${e.from}-${e.to}`, "data-from": from, "data-to": to, stroke: "#9aa4b5" }));
    graph.append(svg("text", { class: "edge-label", x: (x1 + x2) / 2 + 6, y: mid + 4,
      "data-edge-label": `${e.from}-${e.to}`, "data-operator": from, "data-metric": "records_out_per_s" }, ""));
  }
  for (const n of plan.nodes) {
    const { x, y, h } = at.get(n.id);
    const compact = COMPACT.has(n.kind);
    const stateful = !compact && n.kind !== "source" && n.kind !== "sink";
    const g = svg("g", { class: `node${stateful ? " stateful" : ""}${compact ? " compact" : ""}`,
      "data-operator": n.operator, "data-node": n.id, "data-kind": n.kind, transform: `translate(${x},${y})` });
    g.append(svg("title", {}, `${n.operator}${n.label ? " — " + n.label : ""}${n.span ? " (" + n.span + ")" : ""}`));
    g.append(svg("rect", { width: BOX_W, height: h }));
    if (compact) {
      g.append(svg("text", { class: "title", x: 8, y: 15 }, clip(n.operator, 28)));
      g.append(svg("text", { x: 8, y: 29, "data-metric": "records_in_per_s" }, "in –"));
    } else {
      g.append(svg("text", { class: "title", x: 8, y: 16 }, clip(n.operator, 28)));
      g.append(svg("text", { class: "kind", x: 8, y: 31 }, `${n.kind}${n.span ? " · " + (n.line ? "line " + n.line : n.span) : ""}`));
      g.append(svg("text", { class: "label", x: 8, y: 46 }, clip(n.label, 31)));
      g.append(svg("text", { x: 8, y: 61, "data-metric": "records_in_per_s" }, "in –"));
      g.append(svg("text", { x: 8, y: 76, "data-metric": "watermark_lag_ms" }, ""));
    }
    g.addEventListener("mouseenter", () => highlight(new Set([n.operator]), n.line ? [[n.file, n.line]] : []));
    g.addEventListener("mouseleave", () => highlight(new Set(), []));
    graph.append(g);
  }
}

function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

function drawSql() {
  const box = document.getElementById("sql");
  box.replaceChildren();
  if (!plan.sources.length) { box.append(el("div", { class: "file" }, "(no SQL text: the job was started from a compiled plan)")); return; }
  for (const source of plan.sources) {
    box.append(el("div", { class: "file", "data-file": source.name }, source.name));
    const perLine = new Map();
    for (const n of plan.nodes) {
      if (n.file === source.name && n.line) {
        if (!perLine.has(n.line)) perLine.set(n.line, []);
        perLine.get(n.line).push(n.operator);
      }
    }
    source.text.split("\n").forEach((text, i) => {
      const line = i + 1, operators = perLine.get(line) || [];
      const row = el("div", { class: `sql-line${operators.length ? " linked" : ""}`, "data-file": source.name, "data-line": line });
      if (operators.length) {
        row.setAttribute("data-operators", operators.join(" "));
        row.title = `becomes ${operators.join(", ")}`;
        row.addEventListener("mouseenter", () => highlight(new Set(operators), [[source.name, line]]));
        row.addEventListener("mouseleave", () => highlight(pinned, pinnedLines));
        row.addEventListener("click", () => { pinned = new Set(operators); pinnedLines = [[source.name, line]]; highlight(pinned, pinnedLines); });
      }
      row.append(el("span", { class: "no" }, String(line)), document.createTextNode(text));
      box.append(row);
    });
  }
}

let pinned = new Set(), pinnedLines = [];

function highlight(operators, lines) {
  if (!operators.size && pinned.size) { operators = pinned; lines = pinnedLines; }
  for (const node of document.querySelectorAll("#graph .node, #operators tbody tr")) {
    node.classList.toggle("highlight", operators.has(node.dataset.operator));
  }
  const wanted = new Set(lines.map(([f, l]) => `${f}:${l}`));
  for (const row of document.querySelectorAll(".sql-line")) {
    row.classList.toggle("highlight", wanted.has(`${row.dataset.file}:${row.dataset.line}`));
  }
}

// -- the numbers, each snapshot

const COLUMNS = [
  ["kind", (r) => r.kind, "text"], ["sql", (r) => r.sql || "", "text"], ["subtasks", (r) => fmt.int(r.subtasks)],
  ["records_in", (r) => fmt.int(r.records_in)], ["records_out", (r) => fmt.int(r.records_out)],
  ["records_in_per_s", (r) => fmt.rate(r.records_in_per_s)], ["records_out_per_s", (r) => fmt.rate(r.records_out_per_s)],
  ["watermark", (r) => fmt.time(r.watermark)], ["watermark_lag_ms", (r) => fmt.ms(r.watermark_lag_ms)],
  ["late_records", (r) => fmt.int(r.late_records)], ["state_rows", (r) => fmt.int(r.state_rows)],
  ["state_bytes", (r) => fmt.bytes(r.state_bytes)], ["busy_ratio", (r) => fmt.pct(r.busy_ratio)],
  ["backpressured_ratio", (r) => fmt.pct(r.backpressured_ratio)],
  ["latency", (r) => r.latency_p50_ms == null ? "–" : `${fmt.ms(r.latency_p50_ms)} / ${fmt.ms(r.latency_p99_ms)}`],
];

function raw(row, metric) {
  const v = metric === "latency" ? row.latency_p50_ms : row[metric];
  return v == null ? "" : String(v);
}

function updateOperators(rows) {
  const body = document.querySelector("#operators tbody");
  const order = plan ? plan.nodes.map((n) => n.operator) : [];
  rows = [...rows].sort((a, b) => order.indexOf(a.operator) - order.indexOf(b.operator));
  for (const row of rows) {
    let tr = body.querySelector(`tr[data-operator="${CSS.escape(row.operator)}"]`);
    if (!tr) {
      tr = el("tr", { "data-operator": row.operator });
      tr.append(el("td", { class: "text", "data-metric": "operator" }, row.operator));
      for (const [metric, , cls] of COLUMNS) tr.append(el("td", { "data-metric": metric, ...(cls ? { class: cls } : {}) }));
      const op = row.operator;
      tr.addEventListener("mouseenter", () => highlight(new Set([op]), linesOf(op)));
      tr.addEventListener("mouseleave", () => highlight(new Set(), []));
      body.append(tr);
    }
    for (const [metric, show] of COLUMNS) {
      const td = tr.querySelector(`td[data-metric="${metric}"]`);
      td.textContent = show(row);
      td.dataset.value = raw(row, metric);
    }
  }
}

function linesOf(operator) {
  return plan.nodes.filter((n) => n.operator === operator && n.line).map((n) => [n.file, n.line]);
}

function updateGraph(rows) {
  const by = new Map(rows.map((r) => [r.operator, r]));
  for (const g of document.querySelectorAll("#graph .node")) {
    const r = by.get(g.dataset.operator);
    if (!r) continue;
    const rate = g.querySelector('[data-metric="records_in_per_s"]');
    rate.textContent = r.kind === "source" ? `read ${fmt.rate(r.records_in_per_s)}/s` : `in ${fmt.rate(r.records_in_per_s)}/s`
      + (r.state_rows ? ` · state ${fmt.int(r.state_rows)}` : "");
    rate.dataset.value = raw(r, "records_in_per_s");
    const lag = g.querySelector('[data-metric="watermark_lag_ms"]');
    if (!lag) continue;  // a compact box has no watermark line
    lag.textContent = r.watermark == null ? "no watermark" : `wm lag ${fmt.ms(r.watermark_lag_ms)}`
      + (r.late_records ? ` · late ${fmt.int(r.late_records)}` : "");
    lag.dataset.value = raw(r, "watermark_lag_ms");
  }
  for (const path of document.querySelectorAll("#graph path.edge")) {
    const r = by.get(path.dataset.from);
    if (!r) continue;
    // Green when the upstream operator never waits for its output, red when it always does.
    const hue = Math.round(120 * (1 - Math.min(1, r.backpressured_ratio || 0)));
    path.setAttribute("stroke", `hsl(${hue}, 65%, 42%)`);
    path.dataset.backpressure = raw(r, "backpressured_ratio");
  }
  for (const label of document.querySelectorAll("#graph text.edge-label")) {
    const r = by.get(label.dataset.operator);
    if (!r) continue;
    label.textContent = `${fmt.rate(r.records_out_per_s)} rows/s`;
    label.dataset.value = raw(r, "records_out_per_s");
  }
}

function updateCheckpoints(history, count) {
  const counter = document.getElementById("checkpoint-count");
  counter.textContent = String(count);
  counter.dataset.value = String(count);
  const body = document.querySelector("#checkpoints tbody");
  for (const c of [...history].reverse()) {
    if (body.querySelector(`tr[data-checkpoint="${c.checkpoint}"]`)) continue;
    const tr = el("tr", { "data-checkpoint": c.checkpoint });
    tr.append(el("td", { "data-metric": "checkpoint" }, String(c.checkpoint)),
      el("td", { "data-metric": "completed" }, fmt.time(c.completed)),
      el("td", { "data-metric": "duration_ms", "data-value": c.duration_ms }, fmt.ms(c.duration_ms)),
      el("td", { "data-metric": "size_bytes", "data-value": c.size_bytes }, fmt.bytes(c.size_bytes)),
      el("td", { "data-metric": "alignment_ms", "data-value": c.alignment_ms }, fmt.ms(c.alignment_ms)));
    body.prepend(tr);
  }
}

function updateSplits(splits) {
  const body = document.querySelector("#splits tbody");
  body.replaceChildren(...splits.map((s) => {
    const tr = el("tr", { "data-operator": s.operator, "data-split": s.split });
    tr.append(el("td", { class: "text" }, s.operator), el("td", {}, String(s.subtask)),
      el("td", { class: "text" }, s.split || "–"), el("td", { "data-metric": "lag" }, fmt.int(s.lag)),
      el("td", { "data-metric": "watermark" }, fmt.time(s.watermark)));
    return tr;
  }));
}

function updateError(error) {
  const box = document.getElementById("errors");
  if (!error) { box.hidden = true; return; }
  box.hidden = false;
  const list = document.getElementById("error-list");
  const entry = el("div", { class: "error", "data-error": "" });
  if (error.position) {
    const pos = el("div", { class: "position", "data-position": error.position }, error.position);
    const [file, line] = error.position.split(":");
    pos.addEventListener("click", () => highlight(new Set(), [[file, Number(line)]]));
    entry.append(pos);
  }
  entry.append(el("pre", { "data-metric": "error" }, error.text || error.message));
  list.replaceChildren(entry);
}

function update(snapshot) {
  const state = document.getElementById("job-state");
  state.dataset.state = snapshot.state;
  state.textContent = snapshot.state;
  document.body.dataset.seq = snapshot.seq;
  finalState = snapshot.state !== "running";
  const rowsIn = snapshot.operators.filter((r) => r.kind === "source").reduce((s, r) => s + r.records_in, 0);
  const summary = document.getElementById("job-summary");
  summary.textContent = `${fmt.int(rowsIn)} rows read in ${snapshot.seconds.toFixed(1)} s`
    + (snapshot.restored_from != null ? ` · resumed from checkpoint ${snapshot.restored_from}` : "");
  summary.dataset.value = String(rowsIn);
  updateOperators(snapshot.operators);
  updateGraph(snapshot.operators);
  updateCheckpoints(snapshot.checkpoint_history, snapshot.checkpoints);
  updateSplits(snapshot.splits);
  updateError(snapshot.error);
}

async function start() {
  plan = await (await fetch(withToken("/api/plan"))).json();
  document.getElementById("job-name").textContent = plan.name;
  drawGraph();
  drawSql();
  update(await (await fetch(withToken("/api/metrics"))).json());
  const events = new EventSource(withToken("/events"));
  events.onmessage = (message) => update(JSON.parse(message.data));
  events.onerror = () => {
    // The server ends with the job: keep the last numbers on the page.
    events.close();
    if (!finalState) {
      const state = document.getElementById("job-state");
      state.dataset.state = "disconnected";
      state.textContent = "disconnected";
    }
  };
}

start().catch((error) => {
  const state = document.getElementById("job-state");
  state.dataset.state = "disconnected";
  state.textContent = `cannot reach clink: ${error}`;
});
