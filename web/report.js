/* report.js — draws a sweep's report.html from its inlined sweep.json.
 *
 * master/sweep_report.c writes the page: uPlot inlined, the sweep document
 * (master/sweep.h, version 1) in <script type="application/json"
 * id="psbench-sweep">, then this script, which builds every section in
 * <main id="report">, in the order a reader asks: the answer (parameter
 * server against allreduce, point by point), the points, step time against
 * bucket cap, where each step goes, scaling with trainers, and what every
 * node ran on. A plain browser script: no modules, no network. Every string
 * from the document reaches the page as text (textContent), never as HTML.
 * When done it sets window.psbenchReport (what it drew) for the tests.
 */
(function () {
  "use strict";

  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  const SHARES = [["forward", "forward", "#2563eb"], ["backward_compute", "backward compute", "#16a34a"],
                  ["exposed_comm", "exposed comm", "#dc2626"], ["optimizer", "optimizer", "#d97706"],
                  ["other", "other", "#9ca3af"]];
  const main = document.getElementById("report");
  const drawn = {charts: 0, skipped: []};

  /* ---- small helpers ---- */

  /* An element with a class (or none) and children: strings become text nodes. */
  function el(tag, cls, children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const c of children || []) {
      if (c == null) continue;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const fmt = (v, d) => (isNum(v) ? v.toFixed(d) : "\u2013");
  const mean = (s) => (s && isNum(s.mean) ? s.mean : null);
  const stat = (p, key) => (p.summary && p.summary[key]) || null;

  function fmtBytes(b) {
    if (!isNum(b)) return "\u2013";
    const units = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
    for (const [f, u] of units) if (b >= f) return (b / f).toFixed(1) + " " + u;
    return b.toFixed(0) + " B";
  }

  /* "56.02 ± 2.95" (half the 95% interval) where the interval is known. */
  function fmtCi(s, d) {
    if (!s || !isNum(s.mean)) return "\u2013";
    if (isNum(s.ci95_low) && isNum(s.ci95_high)) return s.mean.toFixed(d) + " \u00b1 " + ((s.ci95_high - s.ci95_low) / 2).toFixed(d);
    return s.mean.toFixed(d);
  }

  /* A dimension's value as the report writes it. */
  function dimValue(dim, v) {
    if (v == null) return dim === "bucket_cap_mb" ? "configuration's" : "\u2013";
    return String(v);
  }

  /* The point's varied dimensions but `omit`, as "ntrainer=2 bucket_cap_mb=4". */
  function configText(p, omit) {
    const parts = [];
    for (const d of doc.dimensions || []) {
      if (omit.indexOf(d) >= 0) continue;
      const v = dimValue(d, p.config ? p.config[d] : null);
      parts.push(d === "hook" ? v : d + "=" + v);
    }
    return parts.join(" ");
  }

  /* [1, 2, 3, 5] as "1–3, 5". */
  function ranges(nums) {
    const s = nums.slice().sort((a, b) => a - b), out = [];
    for (let i = 0; i < s.length; i++) {
      let j = i;
      while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
      out.push(j > i ? s[i] + "\u2013" + s[j] : String(s[i]));
      i = j;
    }
    return out.join(", ");
  }

  function section(id, title) {
    const s = el("section", "card", [el("h2", null, [title])]);
    s.id = id;
    main.appendChild(s);
    return s;
  }

  function note(parent, text) {
    parent.appendChild(el("p", "note", [text]));
  }

  /* A table.grid from a header (names; "#"-prefixed ones are numeric) and rows of cells. */
  function table(head, rows) {
    const cls = head.map((h) => (h[0] === "#" ? "num" : null));
    const thead = el("thead", null, [el("tr", null, head.map((h, i) => el("th", cls[i], [h.replace(/^#/, "")])))]);
    const tbody = el("tbody", null, rows.map((r) => (r instanceof Element ? r :
      el("tr", null, r.map((c, i) => (c instanceof Element ? c : el("td", cls[i], [c])))))));
    return el("div", "table-scroll", [el("table", "grid", [thead, tbody])]);
  }

  /* ---- the sections ---- */

  function drawFacts() {
    const facts = el("div", "experiment sweep-facts", [
      el("span", null, ["command ", el("code", null, [(doc.command || []).join(" ")])]),
      el("span", null, ["started ", el("b", null, [doc.started_at || "\u2013"])]),
      el("span", null, ["finished ", el("b", null, [doc.finished_at || "\u2013"])]),
      el("span", null, ["runs per point ", el("b", null, [String(doc.runs)])]),
      el("span", null, ["varied ", el("b", null, [(doc.dimensions || []).join(", ") || "nothing"])])]);
    facts.id = "sweep-facts";
    main.parentNode.insertBefore(facts, main);
    document.getElementById("sweep-when").textContent = (doc.points || []).length + " points \u00b7 " + (doc.finished_at || "");
  }

  /* Why no point has a comparison, from what ran. */
  function whyNoComparison() {
    const pts = doc.points || [];
    if (!pts.some((p) => p.config && p.config.uses_servers)) return "no point used a parameter-server hook";
    if (!pts.some((p) => p.config && p.config.hook === "allreduce_hook")) return "no point ran allreduce_hook";
    return "no point ran both a parameter-server hook and allreduce_hook at the same configuration (or one of each pair failed)";
  }

  /* The terminal's answer in words: a side is faster only beyond noise
   * where there is a noise estimate (intervals that overlap name no winner). */
  function answerSentence(cs) {
    const n = cs.length, known = cs.every((c) => c.noise_known);
    const clear = cs.filter((c) => !(c.noise_known && c.within_noise));
    const ps = clear.filter((c) => c.faster === "ps").length, ar = clear.length - ps, noisy = n - clear.length;
    const pts = (k) => k + " of " + n + " point" + (n > 1 ? "s" : "");
    let s = (known ? "Beyond noise, the parameter server is faster at " : "The parameter server is faster at ") +
      pts(ps) + " and allreduce at " + ar;
    if (noisy) s += "; " + noisy + " within noise (the 95% intervals overlap)";
    const r = cs.map((c) => c.ps_over_allreduce).filter(isNum);
    if (r.length) {
      const lo = Math.min.apply(null, r), hi = Math.max.apply(null, r);
      s += "; the parameter server's step is " + (lo === hi ? lo.toFixed(2) + "\u00d7" :
        lo.toFixed(2) + "\u00d7\u2013" + hi.toFixed(2) + "\u00d7") + " allreduce's";
    }
    if (!known) s += " (one run per point: no noise estimate)";
    return s + ".";
  }

  function drawAnswer() {
    const sec = section("answer", "The answer: parameter server or allreduce?");
    const cs = doc.comparisons || [];
    if (!cs.length) {
      sec.appendChild(el("p", "answer-line", ["No answer: " + whyNoComparison() + "."]));
      return;
    }
    sec.appendChild(el("p", "answer-line", [answerSentence(cs)]));
    const byNum = {};
    for (const p of doc.points || []) byNum[p.point] = p;
    sec.appendChild(table(["configuration", "PS hook", "#PS step ms", "#allreduce step ms", "#PS / allreduce", "faster", "noise"],
      cs.map((c) => {
        const p = byNum[c.ps_point];
        const faster = el("td", "faster-" + (c.faster === "ps" ? "ps" : "allreduce"),
          [c.faster === "ps" ? "parameter server" : "allreduce"]);
        return [p ? configText(p, ["hook"]) || "the job's" : "point " + c.ps_point, c.ps_hook || "\u2013",
          fmt(c.ps_step_ms, 2), fmt(c.allreduce_step_ms, 2), isNum(c.ps_over_allreduce) ? c.ps_over_allreduce.toFixed(2) + "\u00d7" : "\u2013",
          faster, !c.noise_known ? "one run: no noise estimate" : c.within_noise ? "within noise" : "beyond noise"];
      })));
    note(sec, "Step = the step's p50 (ms), mean over the runs; PS / allreduce > 1: the parameter server is slower. " +
      "Within noise: the two 95% intervals overlap.");
  }

  function drawPoints() {
    const sec = section("points", "Points");
    const rows = [];
    for (const p of doc.points || []) {
      const exp = p.shares && isNum(p.shares.exposed_comm) ? (100 * p.shares.exposed_comm).toFixed(1) + " %" : "\u2013";
      const st = el("td", null, [el("span", "state state-" + (p.status === "done" ? "done" : p.status === "failed" ? "failed" : "registered"), [p.status || "?"])]);
      rows.push([String(p.point), p.label || "", st, p.buckets == null ? "\u2013" : String(p.buckets),
        fmtBytes(mean(stat(p, "bytes_per_step"))), fmtCi(stat(p, "step_p50_ms"), 2), fmt(mean(stat(p, "samples_per_s")), 1),
        exp, fmt(mean(stat(p, "effective_gb_per_s")), 3)]);
      if (p.error) {
        const td = el("td", null, [p.error]);
        td.colSpan = 9;
        rows.push(el("tr", "error-row", [td]));
      }
    }
    sec.appendChild(table(["#point", "label", "status", "#buckets", "#bytes/step", "#step p50 ms (\u00b1 95%)",
      "#samples/s", "#exposed comm", "#GB/s"], rows));
    note(sec, "Means over each point's runs; \u00b1 half the 95% interval. Bytes/step: what one trainer hands its hook " +
      "per step; GB/s: those bytes over the communication's span (docs/results.md).");
  }

  /* Series over x = the points' values of dimension `xdim`, one per
   * combination of the other varied dimensions but `omit`; y from yOf. */
  function seriesBy(xdim, omit, yOf) {
    const xs = [], groups = {}, order = [];
    for (const p of doc.points || []) {
      const x = p.config ? p.config[xdim] : null;
      if (!isNum(x)) continue;
      if (xs.indexOf(x) < 0) xs.push(x);
      const key = configText(p, omit.concat([xdim])) || "all points";
      if (!groups[key]) { groups[key] = {}; order.push(key); }
      groups[key][x] = p.status === "done" ? yOf(p) : null;
    }
    xs.sort((a, b) => a - b);
    return {xs: xs, series: order.map((k) => ({label: k, ys: xs.map((x) => (isNum(groups[k][x]) ? groups[k][x] : null))}))};
  }

  function chart(sec, id, sb, xLabel, yLabel, logX) {
    const box = el("div", "chart", []);
    box.id = id;
    box.setAttribute("data-series", String(sb.series.length));
    sec.appendChild(box);
    const width = Math.max(320, Math.floor(sec.clientWidth - 34));
    const axis = {stroke: "#6b7385", grid: {stroke: "#eef0f4"}, ticks: {stroke: "#e2e6ee"}};
    const opts = {
      width: width, height: 300,
      /* Room around the first and last x, so no point sits on the frame. */
      scales: {x: logX ? {time: false, distr: 3, range: (u, lo, hi) => [lo / 1.5, hi * 1.5]}
                       : {time: false, range: (u, lo, hi) => [lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo)]}},
      cursor: {drag: {x: false, y: false}},
      /* Ticks at the sweep's own values only (a log axis would keep only powers of ten). */
      axes: [Object.assign({}, axis, {label: xLabel, splits: () => sb.xs, filter: (u, splits) => splits,
                                      values: (u, vals) => vals.map(String)}),
             Object.assign({}, axis, {label: yLabel, size: 64})],
      series: [{label: xLabel, value: (u, v) => (v == null ? "\u2013" : String(v))}].concat(sb.series.map((s, i) => ({
        label: s.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
        points: {show: true, size: 7}, value: (u, v) => (v == null ? "\u2013" : v.toFixed(2))})))
    };
    new uPlot(opts, [sb.xs].concat(sb.series.map((s) => s.ys)), box);
    drawn.charts++;
  }

  function drawCapChart() {
    const sec = section("cap", "Step time against bucket cap");
    const sb = seriesBy("bucket_cap_mb", [], (p) => mean(stat(p, "step_p50_ms")));
    const noCap = (doc.points || []).filter((p) => p.config && p.config.bucket_cap_mb == null).length;
    if (sb.xs.length < 2) {
      drawn.skipped.push("cap");
      note(sec, "Not drawn: the sweep ran " + (sb.xs.length ? "one bucket cap (" + sb.xs[0] + " MB)" : "no explicit bucket cap") +
        (noCap ? " and " + noCap + " point(s) at the configuration's" : "") + "; vary --bucket-cap-mb for this chart.");
      return;
    }
    note(sec, "Step p50 (ms, mean over runs) against DDP's bucket cap (MB, log scale), one line per hook and configuration.");
    chart(sec, "chart-cap", sb, "bucket cap MB", "step p50 ms", true);
    if (noCap) note(sec, noCap + " point(s) at the configuration's bucket cap are in the tables, not on the chart.");
  }

  function drawBreakdown() {
    const sec = section("breakdown", "Where the step goes, per point");
    sec.appendChild(el("div", "legend", SHARES.map((s) => {
      const sw = el("span", "swatch", []);
      sw.style.background = s[2];
      return el("span", null, [sw, s[1]]);
    })));
    for (const p of doc.points || []) {
      const row = el("div", "bd-row", [el("div", "bd-label", [p.point + ". " + (p.label || "")])]);
      row.lastChild.title = p.label || "";
      if (!p.shares) {
        row.appendChild(el("div", "bar-none", [p.status === "done" ? "no breakdown" : "no figures (" + (p.status || "?") + ")"]));
      } else {
        const bar = el("div", "bar", []);
        bar.setAttribute("data-point", String(p.point));
        for (const [key, name, color] of SHARES) {
          const v = isNum(p.shares[key]) ? p.shares[key] : 0;
          if (v <= 0) continue;
          const seg = el("span", null, [v >= 0.06 ? (100 * v).toFixed(0) + "%" : ""]);
          seg.style.width = (100 * v).toFixed(2) + "%";
          seg.style.background = color;
          seg.title = name + " " + (100 * v).toFixed(1) + " %";
          bar.appendChild(seg);
        }
        row.appendChild(bar);
      }
      sec.appendChild(row);
    }
    note(sec, "The step's mean split into forward, backward's compute, exposed communication (what overlap did not hide), " +
      "the optimizer and the rest; mean shares over the runs.");
  }

  function drawScaling() {
    const sec = section("scaling", "Scaling with trainers");
    const sb = seriesBy("ntrainer", [], (p) => mean(stat(p, "samples_per_s")));
    if (sb.xs.length < 2) {
      drawn.skipped.push("scaling");
      note(sec, "Not drawn: the number of trainers did not vary" + (sb.xs.length ? " (" + sb.xs[0] + ")" : "") +
        "; vary --ntrainer for this chart.");
      return;
    }
    note(sec, "Samples per second, all trainers together (mean over runs), against the number of trainers.");
    chart(sec, "chart-scaling", sb, "trainers", "samples/s", false);
  }

  /* A node's environment without what differs from run to run. */
  function envKey(role, n) {
    const e = Object.assign({}, n.environment || {});
    delete e.finished_at;
    delete e.started_at;
    return JSON.stringify([role, n.host || e.hostname || "", n.device || "", e]);
  }

  function drawEnvironment() {
    const sec = section("environment", "Environment of every node");
    const rows = {}, order = [];
    function add(role, n, point) {
      if (!n) return;
      const k = envKey(role, n);
      if (!rows[k]) { rows[k] = {role: role, node: n, ranks: [], points: []}; order.push(k); }
      if (isNum(n.rank) && rows[k].ranks.indexOf(n.rank) < 0) rows[k].ranks.push(n.rank);
      if (rows[k].points.indexOf(point) < 0) rows[k].points.push(point);
    }
    for (const p of doc.points || []) {
      const e = p.environment;
      if (!e) continue;
      add("master", {host: e.master && e.master.hostname, environment: e.master}, p.point);
      for (const t of e.trainers || []) add("trainer", t, p.point);
      for (const s of e.servers || []) add("server", s, p.point);
    }
    if (!order.length) { note(sec, "No point recorded its nodes' environments."); return; }
    sec.appendChild(table(["role", "ranks", "host", "device", "CPU", "#cpus", "#memory", "kernel", "compiler", "psbench", "BLAS", "points"],
      order.map((k) => {
        const r = rows[k], e = r.node.environment || {}, b = e.blas;
        const gpu = e.gpu ? e.gpu.name : e.gpus && e.gpus.length ? e.gpus[Math.max(0, e.cuda_index || 0) % e.gpus.length].name : null;
        return [r.role, r.ranks.length ? ranges(r.ranks) : "\u2013", r.node.host || e.hostname || "\u2013",
          (r.node.device || "\u2013") + (gpu ? " \u00b7 " + gpu : ""), e.cpu_model || "\u2013",
          isNum(e.cpus) ? String(e.cpus) + (isNum(e.cpus_allowed) && e.cpus_allowed !== e.cpus ? " (" + e.cpus_allowed + " allowed)" : "") : "\u2013",
          isNum(e.memory_bytes) ? (e.memory_bytes / 1073741824).toFixed(1) + " GiB" : "\u2013", e.kernel || "\u2013",
          e.compiler || "\u2013", e.psbench_version || "\u2013",
          b ? [b.library, b.version, b.core ? "(" + b.core + (isNum(b.threads) ? ", " + b.threads + (b.threads === 1 ? " thread" : " threads") : "") + ")" : ""].filter(Boolean).join(" ") : "\u2013",
          ranges(r.points)];
      })));
    note(sec, "Each point's first run; one row per role whose host and environment were the same, with the points it served.");
  }

  let doc;
  try {
    doc = JSON.parse(document.getElementById("psbench-sweep").textContent);
  } catch (e) {
    main.textContent = "This report's sweep document cannot be read: " + e.message;
    throw e;
  }
  main.textContent = "";
  drawFacts();
  drawAnswer();
  drawPoints();
  drawCapChart();
  drawBreakdown();
  drawScaling();
  drawEnvironment();
  window.psbenchReport = {ready: true, charts: drawn.charts, skipped: drawn.skipped};
})();
