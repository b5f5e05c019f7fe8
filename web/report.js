/* report.js — draws a sweep's report.html from its inlined sweep.json.
 *
 * master/sweep_report.c writes the page: uPlot inlined, the sweep document
 * (master/sweep.h, version 1) in <script type="application/json"
 * id="psbench-sweep">, then this script, which builds every section in
 * <main id="report">, in the order a reader asks: a warning where points
 * ran on a busy or oversubscribed host, the answer (parameter server
 * against allreduce, point by point), the points, step time against bucket
 * cap, where each step goes, one traced step per point (timeline.js,
 * inlined before this script), scaling with trainers, and what every node
 * ran on. A plain browser script: no modules, no network. Every string
 * from the document reaches the page as text (textContent), never as HTML.
 * When done it sets window.psbenchReport (what it drew) for the tests.
 *
 * Figures are the steady state's (each point's "steady": every step after
 * each trainer's first) with their 95 % intervals, and a winner is named
 * only where the comparison's "verdict" names one. A document from before
 * the steady state (no "steady", no "verdict") is drawn from its "summary"
 * and its comparisons' within_noise / faster, as it was then.
 */
(function () {
  "use strict";

  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  const SHARES = [["forward", "forward", "#2563eb"], ["backward_compute", "backward compute", "#16a34a"],
                  ["exposed_comm", "exposed comm", "#dc2626"], ["optimizer", "optimizer", "#d97706"],
                  ["other", "other", "#9ca3af"]];
  const main = document.getElementById("report");
  const drawn = {charts: 0, skipped: [], plots: {}, timelines: []};

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
  const steadyOf = (p) => (p.steady && typeof p.steady === "object" ? p.steady : null);
  const plural = (k, word) => k + " " + word + (k === 1 ? "" : "s");

  /* A point's figure ({n, mean, ci95_low, ci95_high, method?}): the steady
   * state's where the document has one, else the summary's (an older
   * document, whose effective GB/s is what algbw is now). */
  function figure(p, key) {
    const s = steadyOf(p);
    if (s) return s[key] || null;
    return stat(p, key === "algbw_gb_per_s" ? "effective_gb_per_s" : key);
  }

  /* The step's shares: the steady state's means, else the older mean shares. */
  function sharesOf(p) {
    const s = steadyOf(p);
    return s && s.shares ? s.shares : p.shares || null;
  }

  /* One run's shares (its headline's steady state's, else its headline's). */
  function runShares(r) {
    const h = r && r.headline;
    if (!h) return null;
    return h.steady && h.steady.shares ? h.steady.shares : h.shares || null;
  }

  /* "[16.27, 29.88]" where the interval is known. */
  function fmtInterval(lo, hi, d) {
    return isNum(lo) && isNum(hi) ? "[" + lo.toFixed(d) + ", " + hi.toFixed(d) + "]" : "\u2013";
  }

  function fmtBytes(b) {
    if (!isNum(b)) return "\u2013";
    const units = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
    for (const [f, u] of units) if (b >= f) return (b / f).toFixed(1) + " " + u;
    return b.toFixed(0) + " B";
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
    if (typeof doc.order === "string")
      facts.appendChild(el("span", null, ["order ", el("b", null, [doc.order]),
        isNum(doc.order_seed) ? " (seed " + doc.order_seed + ")" : null]));
    if (isNum(doc.steps_chosen))
      facts.appendChild(el("span", null, ["steps chosen: ", el("b", null, [String(doc.steps_chosen)])]));
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

  /* What a point's marks say: "busy (2 of 3 runs)", "oversubscribed",
   * "few steps (n=11)". */
  function pointMarks(p) {
    const m = [], nruns = (p.runs || []).length, busy = p.busy_runs || [];
    if (p.busy) m.push(["busy", busy.length ? "busy (" + busy.length + " of " + plural(nruns, "run") + ")" : "busy"]);
    if (p.oversubscribed) m.push(["oversubscribed", "oversubscribed"]);
    if (p.few_steps) m.push(["few", "few steps (n=" + (isNum(p.n) ? p.n : "?") + ")"]);
    return m;
  }

  function marksCell(marks) {
    if (!marks.length) return el("td", "marks", ["\u2013"]);
    return el("td", "marks", marks.map((m) => el("span", "mark mark-" + m[0], [m[1]])));
  }

  /* The comparisons a point is a side of. */
  function comparisonsOf(p) {
    return (doc.comparisons || []).filter((c) => c.ps_point === p.point || c.allreduce_point === p.point);
  }

  /* Before the answer: which points ran on a busy or oversubscribed host,
   * in which runs, and that their figures measured the host (or the
   * scheduler) as much as psbench; then what the host reported. */
  function drawBusyBanner() {
    const pts = (doc.points || []).filter((p) => p.busy || p.oversubscribed);
    if (!pts.length) return;
    const anyBusy = pts.some((p) => p.busy), anyOver = pts.some((p) => p.oversubscribed);
    const sec = section("busy", (anyBusy ? "Busy host" : "Oversubscribed host") + ": " +
      plural(pts.length, "point") + " of " + (doc.points || []).length + " measured more than psbench");
    sec.classList.add("busy-banner");
    sec.setAttribute("role", "alert");
    note(sec, (anyBusy ? "A busy host (other processes, or CPU steal) measures the other processes too" : "") +
      (anyBusy && anyOver ? "; an " : anyOver ? "An " : "") +
      (anyOver ? "oversubscribed one (more busy processes than cores) measures the scheduler too" : "") +
      ". --quiet-host SECONDS waits for a quiet host before each run; fewer trainers and servers than cores avoid oversubscription.");
    const byNum = {};
    for (const p of doc.points || []) byNum[p.point] = p;
    sec.appendChild(el("ul", "busy-points", pts.map((p) => {
      const nruns = (p.runs || []).length, br = p.busy_runs || [];
      const how = [];
      if (p.busy) how.push(br.length ? "busy in " + (br.length === 1 ? "run " : "runs ") + ranges(br) + " of " + nruns : "busy");
      if (p.oversubscribed) how.push("oversubscribed");
      const figs = [];
      const step = figure(p, "step_p50_ms"), sps = figure(p, "samples_per_s");
      if (mean(step) != null) figs.push("step p50 " + mean(step).toFixed(2) + " ms");
      if (mean(sps) != null) figs.push(mean(sps).toFixed(1) + " samples/s");
      for (const c of comparisonsOf(p)) {
        if (!isNum(c.ps_over_allreduce)) continue;
        const other = c.ps_point === p.point ? c.allreduce_point : c.ps_point;
        figs.push("PS / allreduce " + c.ps_over_allreduce.toFixed(2) + "\u00d7 (with point " + other + ")");
      }
      const what = [p.busy ? "a busy host" : null, p.oversubscribed ? "the scheduler" : null].filter(Boolean).join(" and ");
      const li = el("li", null, [el("b", null, ["point " + p.point + " (" + (p.label || configText(p, [])) + ")"]),
        ": " + how.join(", ") + (figs.length ? ". Its " + figs.join(", ") + " measured " + what + " too." : ".")]);
      li.setAttribute("data-point", String(p.point));
      return li;
    })));
    const warnings = [];
    for (const p of pts)
      for (const w of p.host_warnings || []) if (typeof w === "string" && warnings.indexOf(w) < 0) warnings.push(w);
    if (warnings.length) {
      sec.appendChild(el("p", "busy-said", ["What the host reported (" + plural(warnings.length, "distinct warning") + "):"]));
      sec.appendChild(el("ul", "busy-warnings", warnings.map((w) => el("li", null, [w]))));
    }
  }

  /* A comparison's verdict: the document's, or (an older document) from
   * its noise_known / within_noise / faster. */
  function verdictOf(c) {
    if (typeof c.verdict === "string") return c.verdict;
    if (!c.noise_known) return "no noise estimate";
    if (c.within_noise) return "no difference beyond noise";
    return c.faster === "ps" ? "ps" : "allreduce";
  }

  /* The answer from the verdicts: a winner only where the ratio's 95 %
   * interval excludes 1. */
  function verdictSentence(cs) {
    const n = cs.length, count = (v) => cs.filter((c) => verdictOf(c) === v).length;
    const ps = count("ps"), ar = count("allreduce"), nd = count("no difference beyond noise");
    const nn = n - ps - ar - nd;
    let s = "Of " + plural(n, "configuration") + " compared, the parameter server is faster beyond noise at " + ps +
      " and allreduce at " + ar + "; no difference beyond noise at " + nd;
    if (nn) s += "; no noise estimate at " + nn;
    const r = cs.map((c) => c.ps_over_allreduce).filter(isNum);
    if (r.length) {
      const lo = Math.min.apply(null, r), hi = Math.max.apply(null, r);
      s += "; the parameter server's steady step is " + (lo === hi ? lo.toFixed(2) + "\u00d7" :
        lo.toFixed(2) + "\u00d7\u2013" + hi.toFixed(2) + "\u00d7") + " allreduce's";
    }
    s += ".";
    const busy = cs.filter((c) => c.busy || c.oversubscribed).length;
    if (busy) s += " " + busy + " of them measured a busy or oversubscribed host (the warning above).";
    return s;
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
    const byNum = {};
    for (const p of doc.points || []) byNum[p.point] = p;
    const where = (c) => { const p = byNum[c.ps_point]; return p ? configText(p, ["hook"]) || "the job's" : "point " + c.ps_point; };
    const ratio = (c) => (isNum(c.ps_over_allreduce) ? c.ps_over_allreduce.toFixed(2) + "\u00d7" : "\u2013");
    if (!cs.some((c) => typeof c.verdict === "string")) {
      /* An older document: its overlap test, a winner's colour only beyond noise. */
      sec.appendChild(el("p", "answer-line", [answerSentence(cs)]));
      sec.appendChild(table(["configuration", "PS hook", "#PS step ms", "#allreduce step ms", "#PS / allreduce", "faster", "noise"],
        cs.map((c) => {
          const won = verdictOf(c) === "ps" || verdictOf(c) === "allreduce";
          const faster = el("td", won ? "faster-" + (c.faster === "ps" ? "ps" : "allreduce") : null,
            [c.faster === "ps" ? "parameter server" : "allreduce"]);
          return [where(c), c.ps_hook || "\u2013", fmt(c.ps_step_ms, 2), fmt(c.allreduce_step_ms, 2), ratio(c),
            faster, !c.noise_known ? "one run: no noise estimate" : c.within_noise ? "within noise" : "beyond noise"];
        })));
      note(sec, "Step = the step's p50 (ms), mean over the runs; PS / allreduce > 1: the parameter server is slower. " +
        "Within noise: the two 95% intervals overlap (no winner's colour).");
      return;
    }
    sec.appendChild(el("p", "answer-line", [verdictSentence(cs)]));
    sec.appendChild(table(["configuration", "PS hook", "#PS step ms", "#allreduce step ms", "#PS / allreduce", "#95% interval",
                           "method", "#n", "faster", "host"],
      cs.map((c) => {
        const v = verdictOf(c);
        const faster = v === "ps" ? el("td", "faster-ps", ["parameter server"])
          : v === "allreduce" ? el("td", "faster-allreduce", ["allreduce"]) : el("td", "no-winner", [v]);
        const host = [];
        if (c.busy) host.push(["busy", "busy"]);
        if (c.oversubscribed) host.push(["oversubscribed", "oversubscribed"]);
        const tr = el("tr", host.length ? "host-marked" : null, [el("td", null, [where(c)]), el("td", null, [c.ps_hook || "\u2013"]),
          el("td", "num", [fmt(c.ps_step_ms, 2)]), el("td", "num", [fmt(c.allreduce_step_ms, 2)]), el("td", "num", [ratio(c)]),
          el("td", "num", [fmtInterval(c.ratio_ci95_low, c.ratio_ci95_high, 2)]), el("td", "method", [c.ci_method || "\u2013"]),
          el("td", "num", [isNum(c.n) ? String(c.n) : "\u2013"]), faster, marksCell(host)]);
        tr.setAttribute("data-verdict", v);
        return tr;
      })));
    note(sec, "Step = the steady state's step p50 (ms), mean over the runs; PS / allreduce > 1: the parameter server is slower. " +
      "Its 95% interval is a two-stage bootstrap (the runs, then blocks of steps within each run); a side is named faster " +
      "(and coloured) only where that interval excludes 1. n: steady steps per trainer and run, the fewer of the two points'.");
  }

  /* A figure's interval cell: "[lo, hi]", its method on hover. */
  function intervalCell(f, d) {
    const td = el("td", "num", [f ? fmtInterval(f.ci95_low, f.ci95_high, d) : "\u2013"]);
    if (f && isNum(f.ci95_low)) {
      const how = f.method ? f.method + (isNum(f.block_steps) && f.block_steps > 0 ? ", blocks of " + plural(f.block_steps, "step") : "")
        : "Student t over the runs";
      td.title = "95% interval: " + how + (isNum(f.n) ? " (" + plural(f.n, "run") + ")" : "");
    }
    return td;
  }

  /* Does the sweep compress (issue 43): compress varied, or a point's not none? */
  function compresses() {
    return (doc.dimensions || []).indexOf("compress") >= 0 ||
      (doc.points || []).some((p) => p.config && p.config.compress != null && p.config.compress !== "none");
  }
  const fmtG = (v, d) => (!isNum(v) ? "\u2013" : v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential(d - 1)
    : Number(v.toPrecision(d)).toString());
  const fmtSigned = (v, d) => (isNum(v) ? (v > 0 ? "+" : "") + v.toPrecision(d) : "\u2013");

  function drawPoints() {
    const sec = section("points", "Points");
    const cz = compresses();
    const rows = [], head = ["#point", "label", "status", "#buckets", "#bytes/step", "#n", "#step p50 ms", "#95% interval",
      "#samples/s", "#95% interval", "#exposed comm", "#algbw GB/s", "#busbw GB/s", "marks"];
    /* Compression's columns (issue 43): which, the final loss, and against the fp32 point. */
    if (cz) {
      head.splice(3, 0, "compress");
      head.splice(head.length - 1, 0, "#final loss", "#loss \u2212 fp32", "#param distance");
    }
    for (const p of doc.points || []) {
      const sh = sharesOf(p), step = figure(p, "step_p50_ms"), sps = figure(p, "samples_per_s");
      const exp = sh && isNum(sh.exposed_comm) ? (100 * sh.exposed_comm).toFixed(1) + " %" : "\u2013";
      const st = el("td", null, [el("span", "state state-" + (p.status === "done" ? "done" : p.status === "failed" ? "failed" : "registered"), [p.status || "?"])]);
      rows.push([String(p.point), p.label || "", st, p.buckets == null ? "\u2013" : String(p.buckets),
        fmtBytes(mean(stat(p, "bytes_per_step"))), isNum(p.n) ? String(p.n) : "\u2013",
        fmt(mean(step), 2), intervalCell(step, 2), fmt(mean(sps), 1), intervalCell(sps, 1),
        exp, fmt(mean(figure(p, "algbw_gb_per_s")), 3), fmt(mean(figure(p, "busbw_gb_per_s")), 3), marksCell(pointMarks(p))]);
      if (cz) {
        const row = rows[rows.length - 1], vs = p.vs_fp32 || null;
        row.splice(3, 0, p.config && p.config.compress != null ? String(p.config.compress) : "\u2013");
        row.splice(row.length - 1, 0, fmtG(p.final_loss, 7), vs ? fmtSigned(vs.loss_diff, 3) : "\u2013",
          vs ? (isNum(vs.params_distance) ? fmtG(vs.params_distance, 3) : "not comparable") : "\u2013");
      }
      if (p.error) {
        const td = el("td", null, [p.error]);
        td.colSpan = head.length;
        rows.push(el("tr", "error-row", [td]));
      }
    }
    sec.appendChild(table(head, rows));
    sec.querySelector("table").classList.add("points");
    if (!steady) {
      note(sec, "Means over each point's runs with their 95% intervals (Student t over the runs). Bytes/step: what one " +
        "trainer hands its hook per step; algbw: those bytes over the communication's span (docs/results.md).");
      return;
    }
    note(sec, "Steady state: every step after each trainer's first (the first pays one-off costs); each figure is the mean " +
      "over the point's runs of that run's steady-state figure. n: steady steps per trainer and run, the fewest of the point's " +
      "runs (few steps: n < 20, a thin estimate).");
    note(sec, "95% intervals (the method on hover): with 3 runs or more, Student t on the log scale across the runs " +
      "(log-t over runs); with fewer, a moving-block bootstrap over the steps within the runs (block bootstrap over steps). " +
      "Bytes/step: what one trainer hands its hook per step; algbw: those bytes over the communication's span; busbw: " +
      "algbw times the hook's bus factor (nccl-tests' convention). Marks: busy runs (the host was busy), oversubscribed " +
      "(more busy processes than cores), few steps.");
  }

  /* What compression costs (issue 43): each compressed point against the
   * point that differs from it only in compress (none, fp32). */
  function drawCompression() {
    if (!compresses()) return;
    const sec = section("compression", "Compression: what it costs");
    const cs = doc.compression || [];
    if (!cs.length) {
      note(sec, "No compressed point has an fp32 twin that ran: a point whose configuration differs from a compress none " +
        "point's only in compress, both done (e.g. --compress none,bf16).");
      return;
    }
    const byPoint = {};
    for (const p of doc.points || []) byPoint[p.point] = p;
    const rows = cs.map((c) => {
      const cp = byPoint[c.point] || {}, fp = byPoint[c.fp32_point] || {};
      const step = mean(figure(cp, "step_p50_ms")), base = mean(figure(fp, "step_p50_ms"));
      return [String(c.point), String(c.fp32_point), configText(cp, ["compress"]) || "every point", String(c.compress),
        fmtG(fp.final_loss, 7), fmtG(cp.final_loss, 7), fmtSigned(c.loss_diff, 3),
        isNum(c.params_distance) ? fmtG(c.params_distance, 3) : "not comparable: " + (c.why || "?"),
        isNum(step) && isNum(base) && base > 0 ? (step / base).toFixed(2) : "\u2013"];
    });
    sec.appendChild(table(["#point", "#fp32 point", "where", "compress", "#fp32 final loss", "#final loss",
      "#loss \u2212 fp32", "#param distance", "#step / fp32 step"], rows));
    note(sec, "Final loss: the trainers' last epoch's mean loss, averaged over the trainers and the runs. Param distance: " +
      "||params \u2212 fp32 params|| / ||fp32 params||, the relative L2 distance of trainer 0's final parameters (each run's " +
      "params.bin against the fp32 point's run of the same number, mean over runs). Step / fp32 step: the steady step " +
      "p50s' ratio (< 1: the compressed point is faster).");
  }

  /* Series over x = the points' values of dimension `xdim`, one per
   * combination of the other varied dimensions but `omit`; each y (and its
   * 95 % interval, lo and hi) from the figure figOf(p) returns. */
  function seriesBy(xdim, omit, figOf) {
    const xs = [], groups = {}, order = [];
    for (const p of doc.points || []) {
      const x = p.config ? p.config[xdim] : null;
      if (!isNum(x)) continue;
      if (xs.indexOf(x) < 0) xs.push(x);
      const key = configText(p, omit.concat([xdim])) || "all points";
      if (!groups[key]) { groups[key] = {}; order.push(key); }
      groups[key][x] = p.status === "done" ? figOf(p) : null;
    }
    xs.sort((a, b) => a - b);
    const pick = (g, x, k) => (g[x] && isNum(g[x][k]) ? g[x][k] : null);
    return {xs: xs, series: order.map((k) => ({label: k, ys: xs.map((x) => pick(groups[k], x, "mean")),
      lo: xs.map((x) => (pick(groups[k], x, "mean") == null ? null : pick(groups[k], x, "ci95_low"))),
      hi: xs.map((x) => (pick(groups[k], x, "mean") == null ? null : pick(groups[k], x, "ci95_high")))}))};
  }

  /* A line chart of sb: a line per series and, where it has intervals, its
   * 95 % band (uPlot's bands fill between two extra series, the interval's
   * high and low, drawn thin and dashed in the line's colour and kept out
   * of the legend). What it drew goes to drawn.plots[key] for the tests. */
  function chart(sec, id, key, sb, xLabel, yLabel, logX, logY) {
    const box = el("div", "chart", []);
    box.id = id;
    box.setAttribute("data-series", String(sb.series.length));
    sec.appendChild(box);
    const width = Math.max(320, Math.floor(sec.clientWidth - 34));
    const axis = {stroke: "#6b7385", grid: {stroke: "#eef0f4"}, ticks: {stroke: "#e2e6ee"}};
    const val = (u, v) => (v == null ? "\u2013" : v.toFixed(2));
    const series = [{label: xLabel, value: (u, v) => (v == null ? "\u2013" : String(v))}].concat(sb.series.map((s, i) => ({
      label: s.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
      points: {show: true, size: 7}, value: val})));
    const data = [sb.xs].concat(sb.series.map((s) => s.ys)), bands = [], drew = [];
    sb.series.forEach((s, i) => {
      if (!s.lo.some(isNum) || !s.hi.some(isNum)) return;
      const color = COLORS[i % COLORS.length];
      const edge = (which) => ({label: s.label + " 95% " + which, class: "band-edge", stroke: color + "66", width: 1, dash: [4, 3],
                                spanGaps: false, points: {show: false}, value: val});
      series.push(edge("high"), edge("low"));
      data.push(s.hi, s.lo);
      bands.push({series: [series.length - 2, series.length - 1], fill: color + "22"});
      drew.push({series: s.label, lo: s.lo, hi: s.hi});
    });
    const opts = {
      width: width, height: 300,
      /* Room around the first and last x, so no point sits on the frame. */
      scales: {x: logX ? {time: false, distr: 3, range: (u, lo, hi) => [lo / 1.5, hi * 1.5]}
                       : {time: false, range: (u, lo, hi) => [lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo)]},
               y: logY ? {distr: 3} : {}},
      cursor: {drag: {x: false, y: false}},
      /* Ticks at the sweep's own values only (a log axis would keep only powers of ten). */
      axes: [Object.assign({}, axis, {label: xLabel, splits: () => sb.xs, filter: (u, splits) => splits,
                                      values: (u, vals) => vals.map(String)}),
             Object.assign({}, axis, {label: yLabel, size: 64})],
      series: series, bands: bands
    };
    const u = new uPlot(opts, data, box);
    box.setAttribute("data-bands", String(bands.length));
    drawn.charts++;
    /* The uPlot instance for the tests' scripts, kept out of what a
     * WebDriver serialises when it reads window.psbenchReport. */
    drawn.plots[key] = Object.defineProperty({series: sb.series.length, bands: drew}, "uplot", {value: u});
  }

  const BAND_NOTE = " The shaded band around each line is its 95% interval (the points table says how it was computed).";

  function drawCapChart() {
    const sec = section("cap", "Step time against bucket cap");
    const sb = seriesBy("bucket_cap_mb", [], (p) => figure(p, "step_p50_ms"));
    const noCap = (doc.points || []).filter((p) => p.config && p.config.bucket_cap_mb == null).length;
    if (sb.xs.length < 2) {
      drawn.skipped.push("cap");
      note(sec, "Not drawn: the sweep ran " + (sb.xs.length ? "one bucket cap (" + sb.xs[0] + " MB)" : "no explicit bucket cap") +
        (noCap ? " and " + noCap + " point(s) at the configuration's" : "") + "; vary --bucket-cap-mb for this chart.");
      return;
    }
    note(sec, (steady ? "The steady state's step p50" : "Step p50") + " (ms, mean over runs) against DDP's bucket cap " +
      "(MB, log scale), one line per hook and configuration" + (steady ? "; the step axis is a log scale too, so " +
      "that a wide interval does not flatten the other lines." : ".") + BAND_NOTE);
    chart(sec, "chart-cap", "cap", sb, "bucket cap MB", "step p50 ms", true, steady);
    if (noCap) note(sec, noCap + " point(s) at the configuration's bucket cap are in the tables, not on the chart.");
  }

  /* Where, over a point's runs, the exposed-communication segment ends
   * (forward + backward's compute + exposed comm, each run's shares):
   * {lo, hi, runs}, or null with fewer than two runs with shares. */
  function exposedEnds(p) {
    const ends = [];
    for (const r of p.runs || []) {
      const s = runShares(r);
      if (!s || !isNum(s.exposed_comm)) continue;
      ends.push((isNum(s.forward) ? s.forward : 0) + (isNum(s.backward_compute) ? s.backward_compute : 0) + s.exposed_comm);
    }
    if (ends.length < 2) return null;
    return {lo: Math.min.apply(null, ends), hi: Math.max.apply(null, ends), runs: ends.length};
  }

  function drawBreakdown() {
    const sec = section("breakdown", "Where the step goes, per point");
    const whisker = el("span", "swatch swatch-whisker", []);
    sec.appendChild(el("div", "legend", SHARES.map((s) => {
      const sw = el("span", "swatch", []);
      sw.style.background = s[2];
      return el("span", null, [sw, s[1]]);
    }).concat([el("span", null, [whisker, "runs' range of the exposed comm's end"])])));
    for (const p of doc.points || []) {
      const row = el("div", "bd-row", [el("div", "bd-label", [p.point + ". " + (p.label || "")])]);
      row.lastChild.title = p.label || "";
      const sh = sharesOf(p);
      if (!sh) {
        row.appendChild(el("div", "bar-none", [p.status === "done" ? "no breakdown" : "no figures (" + (p.status || "?") + ")"]));
      } else {
        const bar = el("div", "bar", []);
        bar.setAttribute("data-point", String(p.point));
        for (const [key, name, color] of SHARES) {
          const v = isNum(sh[key]) ? sh[key] : 0;
          if (v <= 0) continue;
          const seg = el("span", null, [v >= 0.06 ? (100 * v).toFixed(0) + "%" : ""]);
          seg.style.width = (100 * v).toFixed(2) + "%";
          seg.style.background = color;
          seg.title = name + " " + (100 * v).toFixed(1) + " %";
          bar.appendChild(seg);
        }
        const wrap = el("div", "bar-wrap", [bar]);
        const e = exposedEnds(p);
        if (e) {
          const w = el("span", "whisker", []);
          w.setAttribute("data-point", String(p.point));
          w.setAttribute("data-lo", String(e.lo));
          w.setAttribute("data-hi", String(e.hi));
          w.style.left = (100 * Math.max(0, Math.min(1, e.lo))).toFixed(2) + "%";
          w.style.width = (100 * Math.max(0, Math.min(1, e.hi) - Math.max(0, e.lo))).toFixed(2) + "%";
          w.title = "over " + e.runs + " runs, exposed comm ended at " + (100 * e.lo).toFixed(1) + "\u2013" +
            (100 * e.hi).toFixed(1) + " % of the step";
          wrap.appendChild(w);
        }
        row.appendChild(wrap);
      }
      sec.appendChild(row);
    }
    note(sec, (steady ? "The steady state's step" : "The step's mean") + " split into forward, backward's compute, exposed " +
      "communication (what overlap did not hide), the optimizer and the rest; mean shares over the runs. The black whisker " +
      "on a bar spans, over the point's runs, where each run's exposed-communication segment ended (forward + backward " +
      "compute + exposed comm): how far the split moved from run to run.");
  }

  /* Each traced point's representative step (its "trace_step": the
   * first traced run's, master/trace_an.h) as swimlanes, drawn by the
   * dashboard's timeline.js. Only where some point has one: a sweep run
   * with --no-trace, or from before the trace, has no such section. */
  function drawTimelines() {
    const traced = (doc.points || []).filter((p) => p.trace_step && typeof p.trace_step === "object");
    if (!traced.length || !window.psbenchTimeline) return;
    const sec = section("timelines", "One steady-state step per point, traced");
    for (const p of traced) {
      const box = el("div", "tl-point", [el("h3", null, [p.point + ". " + (p.label || "")])]);
      box.setAttribute("data-point", String(p.point));
      sec.appendChild(box);
      drawn.timelines.push(Object.assign({point: p.point}, window.psbenchTimeline.draw(box, p.trace_step)));
    }
    note(sec, "Each run traced the last steps of its timed pass (--trace-steps); the step drawn is the median one: of " +
      "the steps every trainer traced whole (the first left out where more than 2), the one whose slowest trainer's step " +
      "is the median. A row per lane of each trainer and server; a line per bucket's hop between a trainer and a server " +
      "(sent \u2192 in at the server, answer out \u2192 in at the trainer); outlined, the critical path: the spans that " +
      "decided when the last trainer's optimizer could start. The table: where each bucket's time went (docs/results.md).");
  }

  function drawScaling() {
    const sec = section("scaling", "Scaling with trainers");
    const sb = seriesBy("ntrainer", [], (p) => figure(p, "samples_per_s"));
    if (sb.xs.length < 2) {
      drawn.skipped.push("scaling");
      note(sec, "Not drawn: the number of trainers did not vary" + (sb.xs.length ? " (" + sb.xs[0] + ")" : "") +
        "; vary --ntrainer for this chart.");
      return;
    }
    note(sec, "Samples per second, all trainers together (" + (steady ? "the steady state's, " : "") +
      "mean over runs), against the number of trainers." + BAND_NOTE);
    chart(sec, "chart-scaling", "scaling", sb, "trainers", "samples/s", false, false);
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
  /* Does the document have the steady state (issue 38) or only summaries? */
  const steady = (doc.points || []).some(steadyOf);
  drawFacts();
  drawBusyBanner();
  drawAnswer();
  drawPoints();
  drawCompression();
  drawCapChart();
  drawBreakdown();
  drawTimelines();
  drawScaling();
  drawEnvironment();
  window.psbenchReport = {ready: true, charts: drawn.charts, skipped: drawn.skipped, plots: drawn.plots,
                          timelines: drawn.timelines};
})();
