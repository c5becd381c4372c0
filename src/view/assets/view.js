"use strict";
// The run viewer. Everything a run recorded (prompts, replies, tool output, names) is put
// on the page as text (textContent, setAttribute), never parsed as HTML.
(function () {
  const MAX_TEXT = 16384;
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const view = { data: null, events: [], lastSeq: 0, selected: null, live: false, served: false };

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }


  // Live events arrive whole: cut their texts as `rondo view` cuts the embedded ones.
  function cutTexts(value) {
    const stack = [[{ v: value }, "v"]];
    while (stack.length) {
      const [holder, key] = stack.pop();
      const v = holder[key];
      if (typeof v === "string" && v.length > MAX_TEXT) {
        holder[key] = v.slice(0, MAX_TEXT) + "\n… [cut: " + MAX_TEXT + " of " + v.length + " characters shown]";
      } else if (v && typeof v === "object") {
        for (const k of Object.keys(v)) stack.push([v, k]);
      }
    }
    return value;
  }

  const fmtTime = (ts) => (ts ? String(ts).replace("T", " ").replace("Z", "") : "");
  const fmtMs = (ms) => (ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(2) + " s");
  const fmtCost = (c) => (c ? "$" + Number(c).toFixed(4) : "0");
  const pretty = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));

  // ---- the run, read from its journal ----
  function analyse(events, memoryNames) {
    const steps = [];
    const byKey = new Map();
    const lastOfRole = new Map();
    const visits = {};
    const routes = [];
    let pending = [];
    let exit = null;
    // The run's totals after its last step (a live run's running totals).
    let totals = null;
    let lastElapsed = 0;
    // Where the run goes next: routed to, not started yet.
    const next = new Set();
    const find = (e) => byKey.get(e.role + "#" + e.visit) || lastOfRole.get(e.role);
    // A role's rejected replies are journaled before its `role_start`: held until it.
    const early = new Map();
    const handle = (e) => {
      const s = e.role !== undefined ? find(e) : null;
      switch (e.event) {
        case "role_start": {
          const step = {
            n: steps.length + 1, step: e.step, role: e.role, kind: e.kind, visit: e.visit,
            start: e.ts, end: null, ms: null, calls: [], rejected: [], failures: [], providerErrors: [],
            parsed: undefined, coercions: [], tool: null, memory: [], artifacts: [],
            input_tokens: 0, output_tokens: 0, cost: 0, omitted: 0,
          };
          steps.push(step);
          byKey.set(e.role + "#" + e.visit, step);
          lastOfRole.set(e.role, step);
          pending.push(step);
          next.delete(e.role);
          visits[e.role] = (visits[e.role] || 0) + 1;
          break;
        }
        case "role_end": if (s) s.ended = true; if (e.totals) totals = e.totals; break;
        case "llm_response":
        case "invalid_output":
          if (!s) break;
          (e.event === "llm_response" ? s.calls : s.rejected).push(e);
          s.input_tokens += (e.usage && e.usage.input_tokens) || 0;
          s.output_tokens += (e.usage && e.usage.output_tokens) || 0;
          s.cost += e.cost || 0;
          for (const a of e.attempts || []) if (a.error) s.providerErrors.push(a);
          if (e.coercions) s.coercions = e.coercions;
          break;
        case "invalid_output_omitted": if (s) s.omitted += e.attempts || 0; break;
        case "invalid_outcome": if (s) s.failures.push(e.error); break;
        case "llm_failed":
          if (!s) break;
          s.failures.push(e.error);
          for (const a of e.attempts || []) if (a.error) s.providerErrors.push(a);
          break;
        case "parsed_output": if (s) { s.parsed = e.output; s.how = e.how; s.coercions = e.coercions || []; } break;
        case "tool_call": if (s) s.tool = e.result; break;
        case "memory": if (s) s.memory.push({ name: e.memory, op: e.op, note: e.note }); break;
        case "artifact": if (s) s.artifacts.push(e); break;
        case "route": routes.push(e); for (const to of e.to || []) next.add(to); break;
        case "checkpoint": {
          // A step's events are journaled when it ends, so their times are its end; its
          // duration is what the run's clock (`elapsed_ms`) advanced over it.
          const elapsed = e.delta && e.delta.elapsed_ms;
          const ms = typeof elapsed === "number" ? Math.max(0, elapsed - lastElapsed) : null;
          if (typeof elapsed === "number") lastElapsed = elapsed;
          for (const step of pending) {
            step.ms = ms;
            step.end = e.ts;
            if (ms !== null && !isNaN(Date.parse(e.ts))) step.start = new Date(Date.parse(e.ts) - ms).toISOString();
          }
          const mem = (e.delta && e.delta["~memory"]) || {};
          for (const step of pending) {
            for (const m of step.memory) {
              const i = memoryNames ? memoryNames.indexOf(m.name) : -1;
              if (i >= 0 && Object.prototype.hasOwnProperty.call(mem, String(i))) m.value = mem[String(i)];
            }
          }
          pending = [];
          break;
        }
        case "exit": exit = e; next.clear(); break;
      }
    };
    for (const e of events) {
      const key = e.role + "#" + e.visit;
      if (e.event !== "role_start" && e.role !== undefined && e.visit !== undefined && !byKey.has(key)) {
        if (!early.has(key)) early.set(key, []);
        early.get(key).push(e);
        continue;
      }
      handle(e);
      if (e.event === "role_start" && early.has(key)) {
        for (const held of early.get(key)) handle(held);
        early.delete(key);
      }
    }
    return { steps, visits, routes, exit, next, totals };
  }

  // ---- the graph: drawn where Rust's layout (rondo::render::layout) placed it, with the
  // shapes `rondo graph --format svg` writes (rondo::render::scene) ----
  const FONT = "DejaVu Sans, Verdana, sans-serif";
  const EDGE = {
    route: ["#8a96a3", 1.2, ""], backtrack: ["#b03030", 1.2, "5 3"], fork: ["#5a6b7b", 2.4, ""],
    join: ["#22303c", 2.4, ""], guard: ["#8a96a3", 1.2, "2 3"],
  };
  function nodeShape(g, kind, x, y, w, h) {
    const l = x - w / 2, t = y - h / 2;
    const rect = (attrs) => g.append(svg("rect", attrs));
    if (kind === "start") g.append(svg("circle", { cx: x, cy: y, r: w / 2, fill: "#eef1f4", stroke: "#22303c", "stroke-width": 1.5 }));
    else if (kind === "exit") {
      rect({ x: l, y: t, width: w, height: h, rx: h / 2, fill: "#fff", stroke: "#22303c", "stroke-width": 1.2 });
      rect({ x: l + 3, y: t + 3, width: w - 6, height: h - 6, rx: h / 2 - 3, fill: "none", stroke: "#22303c", "stroke-width": 1, class: "inner" });
    } else if (kind === "llm") rect({ x: l, y: t, width: w, height: h, rx: 6, fill: "#fff", stroke: "#3b6ea5", "stroke-width": 1.2 });
    else if (kind === "tool") {
      rect({ x: l, y: t, width: w, height: h, rx: 0, fill: "#fff", stroke: "#7a5a2f", "stroke-width": 1.2 });
      g.append(svg("path", { d: `M${l + 5},${t} V${t + h}`, stroke: "#7a5a2f", "stroke-width": 1.2 }));
    } else if (kind === "guard") rect({ x: l, y: t, width: w, height: h, rx: 3, fill: "#fff", stroke: "#8a96a3", "stroke-width": 1, "stroke-dasharray": "2 3" });
    else rect({ x: l, y: t, width: w, height: h, rx: 6, fill: "#fff", stroke: "#5a6b7b", "stroke-width": 1.2, "stroke-dasharray": "4 2" });
  }
  function text(x, y, s, attrs) {
    const t = svg("text", Object.assign({ x, y }, attrs || {}));
    t.textContent = s;
    return t;
  }
  function drawGraph(graph, a) {
    const box = $("graph");
    box.replaceChildren();
    const root = svg("svg", { width: graph.width, height: graph.height, viewBox: `0 0 ${graph.width} ${graph.height}`, id: "graph-svg", "font-family": FONT, "data-crossings": graph.crossings });
    const defs = svg("defs");
    const marker = (id, color) => {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerUnits: "userSpaceOnUse", markerWidth: 9, markerHeight: 9, orient: "auto" });
      m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: color }));
      defs.append(m);
    };
    for (const [kind, [color]] of Object.entries(EDGE)) marker("arrow-" + kind, color);
    marker("arrow-taken", "#2f8a4a");
    root.append(defs);
    root.append(svg("rect", { width: "100%", height: "100%", fill: "#fff" }));
    for (const e of graph.edges) {
      const taken = e.kind === "join"
        ? (a.visits[e.from] || 0) > 0 && ((a.visits[e.to] || 0) > 0 || (a.exit && a.exit.exit === e.to))
        : a.routes.some((r) => r.route === e.route && r.from === e.from && (r.to || []).includes(e.to));
      const g = svg("g", { class: "edge " + e.kind + (taken ? " taken" : ""), "data-from": e.from, "data-to": e.to, "data-route": e.route === null || e.route === undefined ? "" : e.route });
      if (e.label) {
        const title = svg("title");
        title.textContent = e.label;
        g.append(title);
      }
      const [color, width, dash] = EDGE[e.kind] || EDGE.route;
      const attrs = { d: e.path, fill: "none", stroke: color, "stroke-width": width, "marker-end": taken ? "url(#arrow-taken)" : `url(#arrow-${e.kind})` };
      if (dash) attrs["stroke-dasharray"] = dash;
      g.append(svg("path", attrs));
      if (e.text) e.text.lines.forEach((line, i) => g.append(text(e.text.x, e.text.y + 12 * i, line, { "font-size": 10, fill: "#55616d" })));
      root.append(g);
    }
    for (const l of graph.labels || []) {
      const g = svg("g", { class: "shared" });
      const title = svg("title");
      title.textContent = l.title + " (" + l.edges + " routes)";
      g.append(title);
      l.lines.forEach((line, i) => g.append(text(l.x, l.y + 12 * i, line, { "font-size": 10, fill: "#55616d" })));
      root.append(g);
    }
    const running = view.live ? a.next : new Set();
    for (const n of graph.nodes) {
      const count = a.visits[n.name] || 0;
      const reached = n.kind === "exit" && a.exit && a.exit.exit === n.name;
      const visited = n.kind === "start" ? a.steps.length > 0 || a.routes.length > 0 : count > 0 || reached;
      const cls = n.kind === "guard" ? "guard" : ["node", n.kind, visited ? "visited" : "", reached ? "reached" : "", running.has(n.name) ? "running" : ""].filter(Boolean).join(" ");
      const g = svg("g", { class: cls, "data-name": n.name, "data-visits": count });
      const title = svg("title");
      title.textContent = [n.name, ...(n.detail || [])].join("\n");
      g.append(title);
      nodeShape(g, n.kind, n.x, n.y, n.w, n.h);
      if (n.kind === "start") g.append(text(n.x, n.y + 4, "start", { "font-size": 11, "text-anchor": "middle" }));
      else if (n.kind === "guard") g.append(text(n.x, n.y + 3.5, n.title, { "font-size": 10, "text-anchor": "middle", fill: "#55616d" }));
      else {
        g.append(text(n.x, n.y - 2, n.title, { "font-size": 11, "text-anchor": "middle" }));
        g.append(text(n.x, n.y + 12, n.sub, { "font-size": 10, "text-anchor": "middle", fill: "#55616d" }));
        if (count && n.kind !== "exit") {
          // The visit count on a badge at the box's top right corner.
          const label = "×" + count;
          const bw = 8 + 7 * label.length, bx = n.x + n.w / 2 - bw + 6, by = n.y - n.h / 2 - 7;
          const badge = svg("g", { class: "visits" });
          badge.append(svg("rect", { x: bx, y: by, width: bw, height: 14, rx: 7, class: "badge" }));
          badge.append(text(bx + bw / 2, by + 10.5, label, { "font-size": 10, "text-anchor": "middle" }));
          g.append(badge);
        }
      }
      root.append(g);
    }
    const legend = svg("g", { class: "legend" });
    for (const item of graph.legend || []) {
      const s = item.sample;
      if (s === "start") legend.append(svg("circle", { cx: item.x + 14, cy: item.y + 7, r: 7, fill: "#eef1f4", stroke: "#22303c", "stroke-width": 1.5 }));
      else if (["llm", "tool", "builtin", "exit", "guard"].includes(s)) nodeShape(legend, s, item.x + 14, item.y + 7, 28, 14);
      else if (s === "shared" || s === "cut") legend.append(text(item.x, item.y + 11, s === "shared" ? "a ⇉" : "ab…", { "font-size": 10, fill: "#55616d" }));
      else {
        const kind = s === "guard_edge" ? "guard" : s;
        const [color, width, dash] = EDGE[kind] || EDGE.route;
        legend.append(svg("path", { d: `M${item.x},${item.y + 7} H${item.x + 28}`, stroke: color, "stroke-width": width, "stroke-dasharray": dash || "none", "marker-end": `url(#arrow-${kind})` }));
      }
      legend.append(text(item.x + 34, item.y + 11, item.text, { "font-size": 10, fill: "#22303c" }));
    }
    root.append(legend);
    box.append(root);
  }

  // ---- timeline, totals, detail ----
  function attemptsOf(s) {
    if (s.kind !== "llm") return "";
    const n = s.calls.length + s.rejected.length + s.omitted;
    const extra = [];
    if (s.rejected.length + s.omitted) extra.push(s.rejected.length + s.omitted + " rejected");
    if (s.providerErrors.length) extra.push(s.providerErrors.length + " provider errors");
    return n + (extra.length ? " (" + extra.join(", ") + ")" : "");
  }
  function flagsOf(s) {
    const flags = (s.coercions || []).map((c) => c.flag + (c.path ? " " + c.path : ""));
    if (s.failures.length) flags.push("failed");
    if (s.tool && s.tool.timed_out) flags.push("timed out");
    if (s.tool && s.tool.ok === false) flags.push("tool error");
    return flags;
  }

  function drawTimeline(a) {
    const body = $("timeline").tBodies[0];
    body.replaceChildren();
    for (const s of a.steps) {
      const flags = el("td", {});
      for (const f of flagsOf(s)) flags.append(el("span", { class: "flag" }, f));
      const tr = el("tr", { "data-step": s.n, "data-role": s.role, class: (s.failures.length ? "failed " : "") + (view.selected === s.n ? "selected" : "") },
        el("td", {}, s.step !== undefined ? s.step : s.n),
        el("td", {}, s.role + (s.visit > 1 ? " #" + s.visit : "")),
        el("td", {}, s.kind),
        el("td", {}, fmtTime(s.start)),
        el("td", {}, s.ms !== null ? fmtMs(s.ms) : s.ended ? "–" : "unfinished"),
        el("td", {}, s.kind === "llm" ? s.input_tokens + " / " + s.output_tokens : ""),
        el("td", {}, s.kind === "llm" ? fmtCost(s.cost) : ""),
        el("td", {}, attemptsOf(s)),
        flags);
      tr.addEventListener("click", () => { view.selected = s.n; draw(); });
      body.append(tr);
    }
  }

  function drawTotals(a) {
    const table = $("totals");
    table.replaceChildren(el("tr", {}, el("th", {}, "role"), el("th", {}, "steps"), el("th", {}, "input tokens"), el("th", {}, "output tokens"), el("th", {}, "cost")));
    const per = new Map();
    for (const s of a.steps) {
      const t = per.get(s.role) || { steps: 0, i: 0, o: 0, c: 0 };
      t.steps++; t.i += s.input_tokens; t.o += s.output_tokens; t.c += s.cost;
      per.set(s.role, t);
    }
    for (const [role, t] of per) {
      table.append(el("tr", { class: "role-total", "data-role": role }, el("td", {}, role), el("td", {}, t.steps), el("td", {}, t.i), el("td", {}, t.o), el("td", {}, fmtCost(t.c))));
    }
    const run = (a.exit && a.exit.totals) || a.totals || (view.data.run && view.data.run.totals) || {};
    table.append(el("tr", { class: "run-total" }, el("th", {}, "run"), el("th", {}, a.steps.length), el("th", {}, run.input_tokens || 0), el("th", {}, run.output_tokens || 0), el("th", {}, fmtCost(run.cost))));
  }

  function block(title, content, id) {
    return [el("h3", {}, title), el("pre", id ? { id } : {}, content)];
  }

  function drawDetail(a) {
    const box = $("detail");
    const s = a.steps.find((x) => x.n === view.selected);
    if (!s) { box.hidden = true; box.replaceChildren(); return; }
    box.hidden = false;
    const parts = [el("h2", {}, "Step " + (s.step !== undefined ? s.step : s.n) + ": " + s.role + " (" + s.kind + ")")];
    const call = s.calls[s.calls.length - 1];
    if (call) {
      parts.push(el("div", {}, "profile " + call.profile + " · model " + call.model + " · attempt " + call.attempt + " · parsed " + (call.parsed || "")));
      parts.push(...block("Prompt", call.prompt, "detail-prompt"));
      parts.push(...block("Reply", call.raw, "detail-reply"));
      if (call.tool_calls && call.tool_calls.length) parts.push(...block("Tool calls", pretty(call.tool_calls), "detail-tool-calls"));
    }
    if (s.parsed !== undefined) parts.push(...block("Parsed output", pretty(s.parsed), "detail-parsed"));
    if (s.coercions && s.coercions.length) parts.push(...block("Coercions", s.coercions.map((c) => c.flag + " at " + c.path).join("\n")));
    for (const r of s.rejected) {
      parts.push(el("h3", { class: "error" }, "Rejected attempt " + r.attempt + ": " + r.error));
      parts.push(el("pre", {}, r.raw));
    }
    if (s.omitted) parts.push(el("div", { class: "error" }, s.omitted + " more rejected attempts not recorded in full"));
    for (const p of s.providerErrors) parts.push(el("div", { class: "error" }, "provider attempt " + p.attempt + " (" + p.profile + "): " + p.error));
    for (const f of s.failures) parts.push(el("div", { class: "error" }, "error: " + f));
    if (s.tool) {
      const t = s.tool;
      parts.push(el("div", {}, "tool " + (t.tool_name || "") + " · exit code " + (t.exit_code === null || t.exit_code === undefined ? "none" : t.exit_code) + (t.timed_out ? " · timed out" : "")));
      if (t.args !== undefined) parts.push(...block("Arguments", pretty(t.args), "detail-args"));
      parts.push(...block("Output shown", t.shown !== undefined ? t.shown : pretty(t), "detail-shown"));
      if (t.error) parts.push(el("div", { class: "error" }, "error: " + t.error));
      if (t.log) {
        const where = view.data.workspace ? view.data.workspace + "/" + t.log : t.log;
        const log = el("div", {}, "Full log: ");
        if (view.served) log.append(el("code", {}, where));
        else log.append(el("a", { href: "file://" + encodeURI(where), id: "detail-log" }, where));
        parts.push(log);
      }
    }
    if (s.memory.length) {
      parts.push(el("h3", {}, "Memory changes"));
      const list = el("ul", { id: "detail-memory" });
      for (const m of s.memory) {
        const li = el("li", {}, m.name + " " + m.op + (m.note ? " (" + m.note + ")" : ""));
        if (m.value !== undefined) li.append(el("pre", {}, pretty(m.value)));
        list.append(li);
      }
      parts.push(list);
    }
    if (s.artifacts.length) {
      parts.push(el("h3", {}, "Artifacts"));
      parts.push(el("ul", {}, ...s.artifacts.map((x) => el("li", {}, x.file + " · " + x.bytes + " bytes" + (x.append ? " (appended)" : "")))));
    }
    box.replaceChildren(...parts);
  }

  function draw() {
    const d = view.data;
    $("runs").hidden = true;
    $("run").hidden = false;
    const a = analyse(view.events, d.memory);
    const run = d.run || {};
    $("title").textContent = (run.workflow || "") + " · " + (run.run_id || "");
    const status = a.exit
      ? "exit " + a.exit.exit + " (" + a.exit.code + ")" + (a.exit.reason ? ": " + a.exit.reason : "")
      : (view.live ? "running" : run.status || "");
    $("status").textContent = status;
    const notes = [];
    if (d.note) notes.push(d.note);
    if (d.omitted) notes.push(d.omitted + " journal events left out of this page");
    if (d.unread_total) {
      const first = (d.unread || [])[0];
      notes.push(d.unread_total + " journal lines this version does not read" + (first ? " (line " + first.line + (first.kind ? " " + first.kind : "") + ": " + first.reason + ")" : ""));
    }
    $("note").textContent = notes.join("; ");
    drawGraph(d.graph, a);
    drawTimeline(a);
    drawTotals(a);
    drawDetail(a);
    document.body.dataset.steps = String(a.steps.length);
    document.body.dataset.exit = a.exit ? a.exit.exit : "";
  }

  function show(data) {
    view.data = data;
    view.events = data.events || [];
    view.lastSeq = view.events.reduce((m, e) => Math.max(m, e.seq || 0), 0);
    draw();
  }

  // ---- served: the runs of the server, one run followed live ----
  function token() {
    const m = /(?:^|[#&])token=([^&]*)/.exec(location.hash);
    if (m) sessionStorage.setItem("rondo-token", decodeURIComponent(m[1]));
    return sessionStorage.getItem("rondo-token");
  }
  function headers() {
    const t = token();
    return t ? { Authorization: "Bearer " + t } : {};
  }
  async function api(path) {
    const r = await fetch(path, { headers: headers() });
    if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
    return r.json();
  }
  function fail(e) {
    $("note").textContent = String(e && e.message ? e.message : e);
  }

  async function listRuns() {
    $("run").hidden = true;
    $("runs").hidden = false;
    $("title").textContent = "rondo · runs";
    const body = $("run-list").tBodies[0];
    const { runs } = await api("/runs");
    body.replaceChildren();
    for (const r of runs) {
      const t = r.totals || {};
      const link = el("a", { href: "#run=" + encodeURIComponent(r.id) }, r.id);
      body.append(el("tr", { "data-run": r.id }, el("td", {}, link), el("td", {}, r.workflow), el("td", {}, r.status), el("td", {}, r.exit || ""), el("td", {}, fmtTime(r.started_at)), el("td", {}, (t.input_tokens || 0) + (t.output_tokens || 0)), el("td", {}, fmtCost(t.cost))));
    }
    document.body.dataset.runs = String(runs.length);
  }

  let following = null;
  async function openRun(id) {
    if (following) following.abort();
    const data = await api("/runs/" + encodeURIComponent(id) + "/view");
    view.selected = null;
    show(data);
    if (["finished", "failed"].includes(data.run.status) && view.events.some((e) => e.event === "exit")) return;
    follow(id);
  }

  async function follow(id) {
    const ctrl = new AbortController();
    following = ctrl;
    view.live = true;
    draw();
    let pendingDraw = false;
    const redraw = () => {
      if (pendingDraw) return;
      pendingDraw = true;
      setTimeout(() => { pendingDraw = false; draw(); }, 30);
    };
    try {
      // Only what the page does not have yet: the events after its last one.
      const since = Object.assign({ "Last-Event-ID": String(view.lastSeq) }, headers());
      const r = await fetch("/runs/" + encodeURIComponent(id) + "/events", { headers: since, signal: ctrl.signal });
      if (!r.ok) throw new Error("events: " + r.status);
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const blockText = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let name = "message", data = "";
          for (const line of blockText.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
          }
          if (name === "end") {
            view.live = false;
            const fresh = await api("/runs/" + encodeURIComponent(id) + "/view");
            show(fresh);
            return;
          }
          if (!data) continue;
          let e;
          try { e = JSON.parse(data); } catch (_) { continue; }
          if ((e.seq || 0) <= view.lastSeq) continue;
          view.lastSeq = e.seq || view.lastSeq;
          view.events.push(cutTexts(e));
          redraw();
        }
      }
    } catch (e) {
      if (e.name !== "AbortError") fail(e);
    } finally {
      if (following === ctrl) view.live = false;
    }
  }

  function route() {
    const m = /(?:^|[#&])run=([^&]*)/.exec(location.hash);
    (m ? openRun(decodeURIComponent(m[1])) : listRuns()).catch(fail);
  }

  const embedded = JSON.parse($("run-data").textContent);
  if (embedded) {
    show(embedded);
  } else {
    view.served = true;
    window.addEventListener("hashchange", route);
    route();
  }
})();
