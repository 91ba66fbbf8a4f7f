// The web view of a running lardon3d-controller: read-only pages drawn
// from the JSON the controller serves under /api/ (the same for scripts).
// Time series are drawn with uPlot (vendor/); the timeline, the task graph
// and the scatter are plain SVG and HTML built here. Nothing is written
// with innerHTML: every name and log line is text.
"use strict";

(function () {
  const POLL_MS = 2000;
  const main = document.getElementById("main");
  const statusEl = document.getElementById("status");
  // What the pages expose for people debugging them and for the tests.
  const view = (window.lardonView = { charts: {}, updates: 0 });

  // ---------- small helpers ----------
  // el makes an HTML element, svgEl an element of an SVG drawing: attrs
  // are attributes, but for text (its textContent), then its children.
  const el = (tag, attrs, ...children) => make(document.createElement(tag), attrs, children);
  const svgEl = (tag, attrs, ...children) => make(document.createElementNS("http://www.w3.org/2000/svg", tag), attrs, children);
  function make(e, attrs, children) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c) e.append(c);
    return e;
  }
  function bytes(n) {
    if (!n) return "0";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n < 10 ? 2 : 1) : n) + " " + u[i];
  }
  function dur(s) {
    if (s === undefined || s === null || s < 0) return "-";
    s = Math.round(s);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? (s % 60) + "s" : "");
    return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  }
  function clock(t) { return new Date(t * 1000).toLocaleTimeString(); }
  function colorOf(name) {
    let h = 0;
    for (const c of name) h = (h * 31 + c.codePointAt(0)) >>> 0;
    return "hsl(" + (h % 360) + ", 55%, 55%)";
  }
  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()).trim());
    return r.json();
  }
  function setStatus(ok, text) {
    statusEl.textContent = text;
    statusEl.classList.toggle("stale", !ok);
  }
  // poll calls f now and every POLL_MS while the page is visible.
  function poll(f) {
    let busy = false;
    const run = async () => {
      if (busy || document.visibilityState === "hidden") return;
      busy = true;
      try {
        await f();
        view.updates++;
        setStatus(true, "live · updated " + new Date().toLocaleTimeString());
      } catch (e) {
        setStatus(false, "not updated: " + e.message);
      } finally {
        busy = false;
      }
    };
    run();
    setInterval(run, POLL_MS);
  }
  function section(title) {
    const s = el("section", {}, el("h2", { text: title }));
    main.append(s);
    return s;
  }

  // ---------- the machine over time ----------
  // A stacked chart: for each task, the running sum of the tasks before it
  // and its own, filled, drawn largest first so that each band shows; then
  // the budget's lines.
  function stackedChart(key, title, holder, points, pick, lines, fmt) {
    const names = [...new Set(points.flatMap((p) => (p.tasks || []).filter((t) => pick(t) > 0).map((t) => t.task)))].sort();
    const xs = points.map((p) => p.t);
    const cum = names.map(() => new Array(points.length).fill(0));
    points.forEach((p, i) => {
      let acc = 0;
      const own = new Map((p.tasks || []).map((t) => [t.task, pick(t)]));
      names.forEach((n, k) => { acc += own.get(n) || 0; cum[k][i] = acc; });
    });
    const series = [{}];
    const data = [xs];
    for (let k = names.length - 1; k >= 0; k--) {
      const c = colorOf(names[k]);
      series.push({ label: names[k], stroke: c, fill: c, width: 1, points: { show: false }, value: (u, v) => fmt(v) });
      data.push(cum[k]);
    }
    for (const l of lines) {
      series.push({ label: l.label, stroke: l.color, width: 2, dash: l.dash, points: { show: false }, value: (u, v) => fmt(v) });
      data.push(points.map(l.value));
    }
    const sig = names.join("\u0000") + "|" + lines.length;
    let c = view.charts[key];
    if (c && c.sig === sig && c.plot.root.isConnected) {
      c.plot.setData(data);
    } else {
      if (c) c.plot.destroy();
      holder.replaceChildren();
      const opts = {
        title, width: Math.max(400, main.clientWidth - 20), height: 240, series,
        axes: [{}, { size: 80, values: (u, ticks) => ticks.map(fmt) }],
        scales: { y: { range: (u, min, max) => [0, Math.max(1, max) * 1.05] } },
        legend: { live: true },
      };
      c = view.charts[key] = { sig, plot: new uPlot(opts, data, holder) };
    }
    c.names = names;
    c.top = names.length ? data[1] : xs.map(() => 0);
    c.lines = Object.fromEntries(lines.map((l, i) => [l.label, data[1 + names.length + i]]));
    return c;
  }

  function machinePage() {
    const mem = section("Memory: reservations stacked per task, measured use, capacity");
    const memHolder = el("div", { class: "chart", id: "chart-memory" });
    mem.append(memHolder);
    const usedHolder = el("div", { class: "chart", id: "chart-used" });
    mem.append(usedHolder);
    const cpuHolder = el("div", { class: "chart", id: "chart-cpu" });
    section("CPU threads: reservations stacked per task").append(cpuHolder);
    const devHolder = el("div", { class: "chart", id: "chart-devices" });
    const gpuMemHolder = el("div", { class: "chart", id: "chart-gpumem" });
    const dev = section("GPU memory, GPU and IO slots");
    dev.append(gpuMemHolder, devHolder);
    const now = section("Now");
    let points = [];
    let window_ = 6 * 3600;
    poll(async () => {
      const since = points.length ? points[points.length - 1].t : 0;
      const a = await getJSON("/api/machine?since=" + since);
      window_ = a.window || window_;
      points = points.concat(a.points).filter((p) => p.t > a.now - window_);
      if (!points.length) {
        memHolder.replaceChildren(el("p", { class: "empty", text: "no sample yet" }));
        return;
      }
      stackedChart("memory", "Memory reserved", memHolder, points, (t) => t.mem || 0, [
        { label: "capacity", color: "#1d2330", value: (p) => p.mem.c },
        { label: "grantable (capacity − margin)", color: "#6b7280", dash: [6, 4], value: (p) => p.mem.c - (p.mem.m || 0) },
        { label: "measured use", color: "#d23c3c", value: (p) => p.memUsed },
      ], bytes);
      stackedChart("used", "Memory measured, per task", usedHolder, points, (t) => t.used || 0, [
        { label: "reserved", color: "#2f6fd6", dash: [6, 4], value: (p) => p.mem.r },
      ], bytes);
      stackedChart("cpu", "CPU threads reserved", cpuHolder, points, (t) => t.threads || 0, [
        { label: "CPUs", color: "#1d2330", value: (p) => p.cpu.c },
        { label: "grantable (CPUs − margin)", color: "#6b7280", dash: [6, 4], value: (p) => p.cpu.c - (p.cpu.m || 0) },
      ], (v) => String(Math.round(v * 10) / 10));
      stackedChart("gpumem", "GPU memory reserved (dedicated VRAM)", gpuMemHolder, points, (t) => t.gpuMem || 0, [
        { label: "capacity", color: "#1d2330", value: (p) => p.gpuMem.c },
      ], bytes);
      stackedChart("devices", "GPU and IO slots reserved", devHolder, points, () => 0, [
        { label: "GPU slots", color: "#7a3fd0", value: (p) => p.gpuSlots.r },
        { label: "GPU slots capacity", color: "#7a3fd0", dash: [4, 4], value: (p) => p.gpuSlots.c },
        { label: "IO slots", color: "#1f9aa8", value: (p) => p.io.r },
        { label: "IO slots capacity", color: "#1f9aa8", dash: [4, 4], value: (p) => p.io.c },
      ], (v) => String(Math.round(v)));
      const last = points[points.length - 1];
      const rows = (last.tasks || []).map((t) =>
        el("tr", {}, el("td", {}, t.task === "other users" ? el("i", { text: t.task })
          : el("a", { href: "/task/" + encodeURIComponent(t.task), text: t.task })),
          el("td", { class: "num", text: bytes(t.mem) }), el("td", { class: "num", text: bytes(t.used) }),
          el("td", { class: "num", text: String(t.threads || 0) })));
      now.replaceChildren(el("h2", { text: "Now (" + clock(last.t) + ")" }),
        el("div", { class: "cards" },
          el("div", { class: "card" }, el("b", { text: bytes(last.mem.r) + " / " + bytes(last.mem.c) }), "memory reserved"),
          el("div", { class: "card" }, el("b", { text: bytes(last.memUsed) }), "measured use"),
          el("div", { class: "card" }, el("b", { text: last.cpu.r + " / " + last.cpu.c }), "threads reserved")),
        rows.length ? el("table", {}, el("tr", {}, el("th", { text: "task" }), el("th", { class: "num", text: "reserved" }),
          el("th", { class: "num", text: "measured" }), el("th", { class: "num", text: "threads" })), ...rows)
          : el("p", { class: "empty", text: "no task holds a reservation" }));
    });
  }

  // ---------- the timeline of batches ----------
  function outcomeLegend() {
    const item = (cls, text) => el("span", {}, el("i", { style: "background: var(--" + cls + ")" }), text);
    return el("p", { class: "legend" }, item("ok", "succeeded"), item("mem", "killed for memory"), item("fail", "failed"),
      item("evict", "yielded to other programs (evicted)"), item("run", "running"), el("span", { text: "dashed outline: a retry (attempt > 1)" }));
  }

  function gantt(batches, now, width) {
    const tasks = [];
    const rowOf = new Map();
    for (const b of [...batches].sort((a, c) => a.start - c.start)) {
      if (!rowOf.has(b.task)) { rowOf.set(b.task, tasks.length); tasks.push(b.task); }
    }
    const left = 170, rowH = 24, top = 22;
    const t0 = Math.min(...batches.map((b) => b.start));
    const t1 = Math.max(now, ...batches.map((b) => b.end || now));
    const span = Math.max(1, t1 - t0);
    const w = Math.max(500, width) - left - 10;
    const x = (t) => left + ((t - t0) / span) * w;
    const svg = svgEl("svg", { class: "gantt", width: left + w + 10, height: top + rowH * tasks.length + 6 });
    const axis = svgEl("g", { class: "axis" });
    for (let i = 0; i <= 6; i++) {
      const t = t0 + (span * i) / 6;
      axis.append(svgEl("line", { x1: x(t), x2: x(t), y1: top - 4, y2: top + rowH * tasks.length, class: "grid" }),
        svgEl("text", { x: x(t), y: 12, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle", text: clock(t) }));
    }
    svg.append(axis);
    tasks.forEach((name, i) => {
      const y = top + i * rowH;
      svg.append(svgEl("a", { href: "/task/" + encodeURIComponent(name), class: "task-label" }, svgEl("text", { x: 4, y: y + 16, text: name.length > 24 ? name.slice(0, 23) + "…" : name })));
    });
    for (const b of batches) {
      const y = top + rowOf.get(b.task) * rowH + 3;
      const end = b.outcome === "Running" ? now : b.end;
      const bx = x(b.start);
      const bw = Math.max(3, x(end) - bx);
      const title = b.task + " batch " + b.batch + " (generation " + b.generation + ", attempt " + b.attempt + "): " + b.outcome +
        (b.reason ? " (" + b.reason + ")" : "") + ", " + b.items + " items, " + b.threads + " threads, reserved " +
        bytes(b.reservedBytes) + ", peak " + bytes(b.peakBytes) + ", " + dur(end - b.start);
      const g = svgEl("g", {});
      g.append(svgEl("rect", {
        class: "batch " + b.outcome + (b.attempt > 1 ? " retry" : ""), x: bx, y, width: bw, height: rowH - 6, rx: 2,
        "data-task": b.task, "data-batch": b.batch, "data-generation": b.generation, "data-attempt": b.attempt, "data-outcome": b.outcome,
      }, svgEl("title", { text: title })));
      const mark = (b.outcome === "MemoryExceeded" ? "✕ " : b.outcome === "Evicted" ? "⇣ " : "") + (b.attempt > 1 ? "↻ " : "") + "#" + b.batch + " ×" + b.items;
      if (bw > 40) g.append(svgEl("text", { x: bx + 3, y: y + 13, fill: "#fff", style: "fill: #fff; pointer-events: none", text: mark }));
      svg.append(g);
    }
    return svg;
  }

  function timelinePage() {
    const s = section("Batches over time, per task");
    s.append(outcomeLegend());
    const holder = el("div", { id: "timeline" });
    s.append(holder);
    poll(async () => {
      const a = await getJSON("/api/batches");
      view.batches = a.batches;
      if (!a.batches.length) {
        holder.replaceChildren(el("p", { class: "empty", text: "no batch has run yet" }));
        return;
      }
      holder.replaceChildren(gantt(a.batches, a.now, main.clientWidth - 20));
    });
  }

  // ---------- the task graph ----------
  function graphPage() {
    const s = section("Tasks and their dependencies");
    const summary = el("p", { id: "summary" });
    const holder = el("div", { class: "graph", id: "graph" });
    s.append(summary, holder);
    poll(async () => {
      const a = await getJSON("/api/tasks");
      view.tasks = a.tasks;
      const counts = Object.entries(a.phases).sort().map(([p, n]) => n + " " + p).join(", ");
      summary.textContent = a.total + " tasks" + (counts ? ": " + counts : "") +
        (a.tasks.length < a.total ? " (showing the " + a.tasks.length + " not ended first, then the latest)" : "");
      if (!a.tasks.length) {
        holder.replaceChildren(el("p", { class: "empty", text: "no task in the spool" }));
        return;
      }
      const byName = new Map(a.tasks.map((t) => [t.name, t]));
      const depth = new Map();
      const depthOf = (t, seen) => {
        if (depth.has(t.name)) return depth.get(t.name);
        if (seen.has(t.name)) return 0; // a cycle: the controller rejects it
        seen.add(t.name);
        let d = 0;
        for (const n of t.dependsOn || []) if (byName.has(n)) d = Math.max(d, 1 + depthOf(byName.get(n), seen));
        depth.set(t.name, d);
        return d;
      };
      const columns = [];
      for (const t of a.tasks) {
        const d = depthOf(t, new Set());
        (columns[d] = columns[d] || []).push(t);
      }
      const nodes = new Map();
      const edges = svgEl("svg", { class: "edges" });
      holder.replaceChildren(edges);
      for (const col of columns) {
        const c = el("div", { class: "column" });
        for (const t of col || []) {
          const pct = t.total > 0 ? Math.round((100 * t.done) / t.total) : 0;
          const n = el("a", { class: "node " + t.phase, href: "/task/" + encodeURIComponent(t.name), "data-task": t.name, "data-phase": t.phase },
            el("div", { class: "name", text: t.name }),
            el("div", { class: "meta", text: t.phase + (t.reason ? " · " + t.reason : "") }),
            el("div", { class: "meta", text: t.done + "/" + t.total + " items" + (t.etaSeconds >= 0 ? " · ETA " + dur(t.etaSeconds) : "") }),
            el("div", { class: "bar" }, el("div", { style: "width: " + pct + "%" })));
          nodes.set(t.name, n);
          c.append(n);
        }
        holder.append(c);
      }
      const box = holder.getBoundingClientRect();
      edges.setAttribute("width", box.width);
      edges.setAttribute("height", box.height);
      for (const t of a.tasks) {
        for (const d of t.dependsOn || []) {
          const from = nodes.get(d), to = nodes.get(t.name);
          if (!from || !to) continue;
          const f = from.getBoundingClientRect(), g = to.getBoundingClientRect();
          const x1 = f.right - box.left, y1 = f.top + f.height / 2 - box.top;
          const x2 = g.left - box.left, y2 = g.top + g.height / 2 - box.top;
          const mx = (x1 + x2) / 2;
          edges.append(svgEl("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "data-from": d, "data-to": t.name }));
        }
      }
    });
  }

  // ---------- one task ----------
  function scatter(samples, est) {
    const W = 520, H = 260, L = 70, B = 30;
    const svg = svgEl("svg", { class: "scatter", width: W, height: H });
    if (!samples.length) return el("p", { class: "empty", text: "no batch of this profile measured yet" });
    const maxX = Math.max(1, ...samples.map((s) => s.items));
    const threads = samples.map((s) => s.threads).sort((a, b) => a - b)[Math.floor(samples.length / 2)] || 1;
    const fit = (n) => est.fittedFixedBytes + est.fittedPerItemBytes * n + est.fittedPerThreadBytes * threads;
    const costs = est.ok ? (n) => est.costs.FixedBytes + est.costs.PerItemBytes * n + est.costs.PerThreadBytes * threads : null;
    const maxY = Math.max(1, ...samples.map((s) => Math.max(s.peakBytes, s.killed ? s.reservedBytes : 0)), fit(maxX), costs ? costs(maxX) : 0) * 1.05;
    const x = (n) => L + (n / maxX) * (W - L - 10);
    const y = (v) => H - B - (v / maxY) * (H - B - 10);
    const axis = svgEl("g", { class: "axis" });
    for (let i = 0; i <= 4; i++) {
      axis.append(svgEl("line", { class: "grid", x1: L, x2: W - 10, y1: y((maxY * i) / 4), y2: y((maxY * i) / 4) }),
        svgEl("text", { x: L - 4, y: y((maxY * i) / 4) + 4, "text-anchor": "end", text: bytes((maxY * i) / 4) }),
        svgEl("text", { x: x((maxX * i) / 4), y: H - 12, "text-anchor": "middle", text: String(Math.round((maxX * i) / 4)) }));
    }
    axis.append(svgEl("text", { x: (W + L) / 2, y: H - 1, "text-anchor": "middle", text: "batch size (items)" }));
    svg.append(axis);
    if (est.state === "firm" || est.state === "slow-start") {
      svg.append(svgEl("line", { class: "fit", x1: x(0), y1: y(fit(0)), x2: x(maxX), y2: y(fit(maxX)) }, svgEl("title", { text: "fitted need at " + threads + " threads" })));
    }
    if (costs) {
      svg.append(svgEl("line", { class: "costs", x1: x(0), y1: y(costs(0)), x2: x(maxX), y2: y(costs(maxX)) }, svgEl("title", { text: "estimate with margins" })));
    }
    for (const s of samples) {
      const cls = s.killed ? "killed" : s.ok ? "ok" : "failed";
      const v = s.killed ? Math.max(s.peakBytes, s.reservedBytes) : s.peakBytes;
      svg.append(svgEl("circle", { class: "sample " + cls, cx: x(s.items), cy: y(v), r: 4 },
        svgEl("title", { text: s.items + " items, " + s.threads + " threads: " + bytes(s.peakBytes) + (s.killed ? " (killed for memory at " + bytes(s.reservedBytes) + ")" : "") })));
    }
    return svg;
  }

  function taskPage(name) {
    const head = section("Task " + name);
    const body = el("div", { id: "task" });
    head.append(body);
    poll(async () => {
      const a = await getJSON("/api/tasks/" + encodeURIComponent(name));
      view.task = a;
      const t = a.task;
      const parts = [
        el("div", { class: "cards" },
          el("div", { class: "card" }, el("b", { text: t.phase }), t.reason || "phase"),
          el("div", { class: "card" }, el("b", { text: t.done + "/" + t.total }), "items done"),
          el("div", { class: "card" }, el("b", { text: dur(t.etaSeconds) }), "ETA"),
          el("div", { class: "card" }, el("b", { text: (t.dependsOn || []).join(", ") || "-" }), "depends on")),
        el("h2", { text: "Conditions" }),
        el("table", { id: "conditions" }, el("tr", {}, ...["type", "status", "reason", "message", "since"].map((h) => el("th", { text: h }))),
          ...a.conditions.map((c) => el("tr", {}, el("td", { text: c.type }), el("td", { text: c.status }), el("td", { text: c.reason || "" }),
            el("td", { text: c.message || "" }), el("td", { text: new Date(c.since).toLocaleString() })))),
        el("h2", { text: "Batches" }),
      ];
      if (a.batches.length) {
        parts.push(outcomeLegend(), gantt(a.batches, a.now, main.clientWidth - 20),
          el("table", { id: "batches" }, el("tr", {}, ...["batch", "attempt", "outcome", "items", "threads", "reserved", "peak", "elapsed"].map((h) => el("th", { text: h }))),
            ...a.batches.map((b) => el("tr", { "data-outcome": b.outcome }, el("td", { text: b.generation + "/" + b.batch }), el("td", { text: String(b.attempt) }),
              el("td", { text: b.outcome + (b.reason && b.reason !== b.outcome ? " (" + b.reason + ")" : "") }), el("td", { class: "num", text: String(b.items) }),
              el("td", { class: "num", text: String(b.threads) }), el("td", { class: "num", text: bytes(b.reservedBytes) }),
              el("td", { class: "num", text: bytes(b.peakBytes) }), el("td", { class: "num", text: dur((b.end || a.now) - b.start) })))));
      } else {
        parts.push(el("p", { class: "empty", text: "no batch yet" }));
      }
      const e = a.estimate;
      parts.push(el("h2", { text: "Learned memory: peak against batch size (profile " + (t.profile || "-") + ", model " + (e.state || "none") + ")" }),
        el("p", { class: "legend" },
          el("span", {}, el("i", { style: "background: var(--ok)" }), "succeeded"),
          el("span", {}, el("i", { style: "background: var(--mem)" }), "killed for memory (it needed more than this)"),
          el("span", {}, el("i", { style: "background: var(--fail)" }), "failed"),
          el("span", { text: "solid line: fitted need · dashed: the estimate with margins" })),
        scatter(a.samples, e),
        el("h2", { text: "Log" + (a.logFile ? " (" + a.logFile + ", its end)" : "") }),
        a.log ? el("pre", { class: "log", id: "log", text: a.log }) : el("p", { class: "empty", text: "no output yet" }));
      body.replaceChildren(...parts);
    });
  }

  // ---------- routing ----------
  const path = location.pathname;
  let page = "machine";
  if (path === "/timeline") page = "timeline";
  else if (path === "/graph" || path.startsWith("/task/")) page = "graph";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.page === page);
  if (path === "/timeline") timelinePage();
  else if (path === "/graph") graphPage();
  else if (path.startsWith("/task/")) taskPage(decodeURIComponent(path.slice("/task/".length)));
  else machinePage();
})();
