/* psbench dashboard: polls the master's JSON API about once a second and
 * renders the job phase, progress, nodes, live uPlot charts and the
 * processed-metrics tables.
 *
 * - Relative URLs only ("api/v1/status"), so the page works behind a path
 *   prefix.
 * - Never throws out of the poll loop: when the master is gone the page says
 *   "disconnected", keeps the last data and retries with a growing delay
 *   (up to 5 s). Failed requests are not logged by this script (the browser
 *   reports them itself); a bug while rendering is logged with
 *   console.error so that the browser test notices it.
 * - First it loads api/v1/history (the points the master kept since the
 *   job began: a page opened late, or during --linger, draws the whole
 *   run) and api/v1/config (the experiment, shown under the header), then
 *   polls. No point is added once the run has ended (done or failed).
 * - The warm-up pass is shaded on the charts (data-warmup-points and
 *   data-timed-points on each chart say how many points each pass has).
 * - The headline (api/v1/status's `headline`, its "all" row) opens the
 *   page as large figures, each with n, the steps behind it: the row's
 *   `steady` figures when the master gives them ("steady state", and a
 *   "few steps" mark when it says so), else the pass's, n then the "all
 *   trainers" batch_all count of api/v1/metrics. A busy or oversubscribed
 *   host (status's `host_state`) gets a warning banner with its warnings.
 * - The charts plot, by default, a statistic over the last 10 s (each
 *   history point's `window`; after the history the page polls
 *   api/v1/history/last for the next points), or, as chosen, the
 *   cumulative one over the pass; the choice is kept in localStorage. A
 *   master without history/last: the charts sample api/v1/metrics,
 *   cumulative only (the caption says so).
 * - Under --trace (api/v1/config's `trace`) it asks api/v1/trace/step
 *   every other poll and draws the latest step every trainer traced whole
 *   with timeline.js (window.psbenchTimeline, loaded before this script),
 *   the sweep report's drawing: one module for both.
 * - window.psbenchState exposes what the page knows (for tests and for a
 *   curious user at the console), window.psbenchFormat the formatting
 *   the charts use (tick labels: their canvas is not readable text); every
 *   chart container carries
 *   data-points (samples with at least one value) and data-series.
 */
(function () {
  "use strict";

  const POLL_MS = 1000;
  const TRACE_EVERY = 2;   /* polls between two asks for the traced step */
  const POLL_MAX_MS = 5000;
  const FETCH_TIMEOUT_MS = 4000;
  const MAX_SAMPLES = 3600;          /* one hour of history at one poll a second */
  const STALE_S = 5;                 /* a node not heard from for this long is greyed out */
  const CHART_HEIGHT = 260;
  const X_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400];

  const M_BATCH = "batch_level_metric,batch_all";
  const M_PS_BATCH = "parameter_server_batch_metric,param_index_batch";
  const M_PS_STRAG = "parameter_server_straggler_metric,param_index_straggler";
  /* Where a trainer's step goes (the breakdown chart), over all trainers. */
  const BREAKDOWN = [
    {key: "fwd", metric: "forward_metric,forward_pass", label: "forward"},
    {key: "bwd", metric: "backward_metric,backward_compute", label: "backward compute"},
    {key: "opt", metric: "optimizer_metric,step", label: "optimizer"},
    {key: "exp", metric: "hook_future_metric,exposed_wait", label: "exposed communication"}
  ];
  const ENDED = ["done", "failed"];
  const TABLE_COLS = ["count", "min", "max", "mean", "variance", "stdev", "p50", "p90", "p99"];
  const PHASES = ["waiting", "warmup", "running", "done", "failed"];
  const NODE_STATES = ["registered", "ready", "running", "done", "failed", "lost"];
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
                   "#db2777", "#65a30d", "#ea580c", "#4f46e5", "#0d9488", "#9333ea"];

  const state = {
    connected: false,    /* the last poll got all three endpoints */
    polls: 0,            /* polls finished */
    traceStep: null,     /* api/v1/trace/step's last answer (under --trace) */
    traceKey: null,      /* the step drawn: batch, start, spans */
    traceDrawn: null,    /* what timeline.js drew of it */
    okPolls: 0,          /* polls where all three endpoints answered */
    failStreak: 0,       /* consecutive polls with a failure */
    lastError: null,     /* text of the last failure, or null */
    lastUpdate: null,    /* Date.now() of the last successful poll */
    phase: null,         /* the phase the badge shows */
    status: null, nodes: null, metrics: null,   /* last good bodies */
    config: null,        /* api/v1/config, once it answered */
    historyPoints: 0,    /* points loaded from api/v1/history */
    samples: [],         /* chart history, see sampleMetrics() */
    stat: "p50",         /* which statistic the charts plot */
    mode: "window",      /* over what: "window" (the last 10 s) | "cumulative" (the pass) */
    shownMode: null,     /* what the charts show now: mode, or "cumulative" where no window is known */
    chartShown: "",      /* the caption saying so */
    historyLive: false,  /* api/v1/history/last answers: the charts follow the master's points */
    lastPointT: null,    /* t of the newest master point taken */
    headline: null,      /* the figures the headline shows, see renderHeadline() */
    busy: null,          /* the warnings the busy banner shows, or null */
    charts: {trainer: {points: 0, series: 0, data: []}, server: {points: 0, series: 0, data: []},
             breakdown: {points: 0, series: 0, data: []}}
  };
  window.psbenchState = state;

  const $ = (id) => document.getElementById(id);

  /* ------------------------------------------------------------------ utils */

  function isObj(v) { return v !== null && typeof v === "object" && !Array.isArray(v); }
  function isNum(v) { return typeof v === "number" && isFinite(v); }

  function fmt3(v) { return isNum(v) ? v.toFixed(3) : "\u2013"; }
  function fmtCount(v) { return isNum(v) ? String(Math.round(v)) : "\u2013"; }

  function fmtDuration(s) {
    if (!isNum(s) || s < 0) return "\u2013";
    if (s < 60) return s.toFixed(1) + " s";
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
    const pad = (n) => (n < 10 ? "0" : "") + n;
    return h > 0 ? h + " h " + pad(m) + " m " + pad(sec) + " s" : m + " m " + pad(sec) + " s";
  }

  function fmtClock(ms) {
    const d = new Date(ms);
    const pad = (n) => (n < 10 ? "0" : "") + n;
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  function setAttr(el, name, value) {
    value = String(value);
    if (el && el.getAttribute(name) !== value) el.setAttribute(name, value);
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function rankKeys(obj) {
    return Object.keys(isObj(obj) ? obj : {}).sort((a, b) => Number(a) - Number(b) || (a < b ? -1 : a > b ? 1 : 0));
  }

  function color(i) { return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length]; }

  /* ---------------------------------------------------------------- fetching */

  async function fetchJSON(path) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
    try {
      const r = await fetch(path, {cache: "no-store", signal: ctrl.signal,
                                   headers: {"Accept": "application/json"}});
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  async function poll() {
    const paths = ["api/v1/status", "api/v1/nodes", "api/v1/metrics"];
    const res = await Promise.allSettled(paths.map(fetchJSON));
    const ok = res.filter((r) => r.status === "fulfilled").length;
    const errs = res.filter((r) => r.status === "rejected")
                    .map((r) => (r.reason && r.reason.message) || String(r.reason));

    if (!state.config) {
      /* The experiment: asked for until the master answers (it does not
       * change during the job). Not part of "connected". */
      try {
        const c = await fetchJSON("api/v1/config");
        if (isObj(c)) state.config = c;
      } catch (e) { /* next poll */ }
    }
    /* The charts' next point: the master's (with its windows) where it
     * serves them, else a sample of the metrics (cumulative only). Not
     * part of "connected" either. */
    let last = null;
    if (!state.noHistoryLast) {
      try {
        last = await fetchJSON("api/v1/history/last");
      } catch (e) {
        /* An older master (404): not asked again; the metrics instead. */
        state.noHistoryLast = /HTTP 404/.test(String(e && e.message));
      }
    }
    /* The latest traced step (under --trace: the configuration says so),
     * every TRACE_EVERY polls: it changes at most as the nodes' parts come. */
    if (isObj(state.config) && state.config.trace === true && state.polls % TRACE_EVERY === 0) {
      try {
        const t = await fetchJSON("api/v1/trace/step");
        if (isObj(t)) state.traceStep = t;
      } catch (e) { /* next time */ }
    }
    state.historyLive = isObj(last);
    if (state.historyLive && isObj(last.point)) takePoint(last.point);
    state.polls++;
    if (res[0].status === "fulfilled" && isObj(res[0].value)) state.status = res[0].value;
    if (res[1].status === "fulfilled" && Array.isArray(res[1].value)) state.nodes = res[1].value;
    if (res[2].status === "fulfilled" && isObj(res[2].value)) {
      state.metrics = res[2].value;
      /* The metrics until the master's points come (or where none do). */
      if (!state.historyLive || state.lastPointT === null) sampleMetrics(state.metrics);
    }
    state.connected = ok === paths.length;
    if (state.connected) {
      state.okPolls++;
      state.failStreak = 0;
      state.lastError = null;
      state.lastUpdate = Date.now();
    } else {
      state.failStreak++;
      state.lastError = errs.join("; ") || "unexpected response";
    }
    render(ok, paths.length);
  }

  function render(ok, total) {
    /* Each part on its own: one failing does not hide the others. */
    for (const f of [renderHeader, renderBusy, renderHeadline, renderExperiment, renderNodes, renderCharts,
                     renderTrace, renderTables]) {
      try {
        f(ok, total);
      } catch (e) {
        console.error("psbench dashboard: " + f.name + ": " + (e && e.stack ? e.stack : e));
      }
    }
  }

  async function loop() {
    try {
      await poll();
    } catch (e) {
      console.error("psbench dashboard: poll: " + (e && e.stack ? e.stack : e));
    }
    const delay = state.failStreak === 0 ? POLL_MS
      : Math.min(POLL_MAX_MS, POLL_MS * Math.pow(2, Math.min(state.failStreak, 8) - 1));
    setTimeout(loop, delay);
  }

  /* ------------------------------------------------------------------ header */

  function renderHeader(ok, total) {
    const st = state.status;
    const badge = $("phase");
    if (isObj(st) && typeof st.phase === "string") {
      state.phase = st.phase;
      setText(badge, st.phase);
      setAttr(badge, "data-phase", st.phase);
      badge.className = "badge " + (PHASES.includes(st.phase) ? "phase-" + st.phase : "phase-unknown");

      const prog = isObj(st.progress) ? st.progress : {};
      const done = isNum(prog.batches_done) ? prog.batches_done : 0;
      const tot = isNum(prog.batches_total) ? prog.batches_total : 0;
      const pct = tot > 0 ? Math.max(0, Math.min(100, (100 * done) / tot)) : 0;
      $("progress-bar").style.width = pct.toFixed(1) + "%";
      setText($("progress-text"), tot > 0 ? done + " / " + tot + " batches (" + pct.toFixed(1) + "%)"
                                          : done + " batches");
      setText($("elapsed"), fmtDuration(st.elapsed_s));
      const n = isObj(st.nodes) ? st.nodes : {};
      const plural = (k, word) => (isNum(k) ? k : 0) + " " + word + (k === 1 ? "" : "s");
      setText($("node-counts"), plural(n.trainer, "trainer") + " \u00b7 " + plural(n.server, "server"));

      const errBox = $("error");
      const errText = typeof st.error === "string" && st.error ? "error: " + st.error
                    : st.phase === "failed" ? "the job failed" : "";
      setText(errBox, errText);
      errBox.hidden = !errText;
    }

    const conn = $("conn");
    if (ok === total) {
      setText(conn, "live");
      conn.className = "conn conn-live";
      conn.title = "connected to the master";
    } else {
      setText(conn, ok === 0 ? "disconnected" : "partial data");
      conn.className = "conn conn-lost";
      conn.title = state.lastError || "";
    }
    setAttr(conn, "data-connected", ok === total ? "true" : "false");
    document.body.classList.toggle("disconnected", ok !== total);

    setText($("updated"), state.lastUpdate === null
      ? (ok === total ? "updated" : "no answer from the master yet")
      : ok === total ? "updated " + fmtClock(state.lastUpdate)
      : "disconnected \u2013 showing data from " + fmtClock(state.lastUpdate) + ", retrying");
  }

  /* ------------------------------------------------------------------- nodes */

  const nodeRows = new Map();   /* "role/rank" -> {tr, cells} */

  /* The GPU a node computes on, from its environment: a CUDA server's
   * "gpu", a CUDA trainer's entry of "gpus" ("cuda_index", or by rank as
   * plain --device cuda places it). null: none named. */
  function gpuName(n) {
    const env = isObj(n.environment) ? n.environment : null;
    if (!env) return null;
    if (isObj(env.gpu) && typeof env.gpu.name === "string") return env.gpu.name;
    if (Array.isArray(env.gpus) && env.gpus.length > 0) {
      const k = Number.isInteger(env.cuda_index) && env.cuda_index >= 0
        ? env.cuda_index : Math.abs(Number(n.rank) || 0) % env.gpus.length;
      const g = env.gpus[k];
      if (isObj(g) && typeof g.name === "string") return g.name;
    }
    return null;
  }

  function deviceText(n) {
    if (n.device == null) return "\u2013";
    const gpu = gpuName(n);
    return gpu ? String(n.device) + " \u00b7 " + gpu : String(n.device);
  }

  function renderNodes() {
    const nodes = Array.isArray(state.nodes) ? state.nodes.filter(isObj) : [];
    const tbody = $("nodes").tBodies[0];
    nodes.sort((a, b) => String(a.role).localeCompare(String(b.role)) || (Number(a.rank) - Number(b.rank)));
    const seen = new Set();
    nodes.forEach((n, i) => {
      const key = String(n.role) + "/" + String(n.rank);
      seen.add(key);
      let row = nodeRows.get(key);
      if (!row) {
        const tr = el("tr");
        const cells = {
          role: el("td"), rank: el("td", "num"), host: el("td"), device: el("td"),
          state: el("td"), seen: el("td", "num")
        };
        const badge = el("span", "state");
        cells.state.appendChild(badge);
        cells.stateBadge = badge;
        for (const k of ["role", "rank", "host", "device", "state", "seen"]) tr.appendChild(cells[k]);
        row = {tr, cells};
        nodeRows.set(key, row);
      }
      const c = row.cells;
      setText(c.role, String(n.role));
      setText(c.rank, String(n.rank));
      setText(c.host, n.host == null ? "\u2013" : String(n.host));
      setText(c.device, deviceText(n));
      const s = n.state == null ? "unknown" : String(n.state);
      setText(c.stateBadge, s);
      c.stateBadge.className = "state" + (NODE_STATES.includes(s) ? " state-" + s : "");
      setText(c.seen, isNum(n.last_seen_s) ? n.last_seen_s.toFixed(1) + " s ago" : "\u2013");
      row.tr.classList.toggle("stale", isNum(n.last_seen_s) && n.last_seen_s > STALE_S &&
                                       s !== "done" && s !== "failed");
      if (tbody.rows[i] !== row.tr) tbody.insertBefore(row.tr, tbody.rows[i] || null);
    });
    for (const [key, row] of nodeRows) {
      if (!seen.has(key)) { row.tr.remove(); nodeRows.delete(key); }
    }
    $("nodes-empty").hidden = nodes.length > 0;
  }

  /* ------------------------------------------------------------------ charts */

  /* One sample: {t: seconds since the epoch, phase, trainer: {rank: STATS
   * of batch_all}, server: {rank: {batch: STATS, strag: STATS}},
   * breakdown: {fwd|bwd|opt|exp: STATS over all trainers}}, from a
   * metrics poll or a point of the master's history; `trainerAll` and
   * `trainerRanks`, `serverRanks` are the groups' "all" and per-rank
   * objects. */
  function makeSample(t, phase, trainerAll, trainerRanks, serverRanks) {
    const s = {t: t, phase: phase, trainer: {}, server: {}, breakdown: {}};
    for (const r of rankKeys(trainerRanks)) {
      if (r === "all") continue;
      if (isObj(trainerRanks[r]) && isObj(trainerRanks[r][M_BATCH])) s.trainer[r] = trainerRanks[r][M_BATCH];
    }
    for (const r of rankKeys(serverRanks)) {
      if (r === "all" || !isObj(serverRanks[r])) continue;
      const b = isObj(serverRanks[r][M_PS_BATCH]) ? serverRanks[r][M_PS_BATCH] : null;
      const g = isObj(serverRanks[r][M_PS_STRAG]) ? serverRanks[r][M_PS_STRAG] : null;
      if (b || g) s.server[r] = {batch: b, strag: g};
    }
    for (const d of BREAKDOWN) {
      if (isObj(trainerAll) && isObj(trainerAll[d.metric])) s.breakdown[d.key] = trainerAll[d.metric];
    }
    return s;
  }

  function pushSample(s) {
    /* Once the run has ended, one point says so and no more follow (the
     * master lingers: its figures no longer move). */
    const last = state.samples.length ? state.samples[state.samples.length - 1] : null;
    if (last && ENDED.includes(last.phase) && ENDED.includes(s.phase)) return;
    /* x must grow: a poll's time is the browser's clock, the history's
     * the master's; where they disagree the poll's point goes just after. */
    if (last && s.t <= last.t) s.t = last.t + 0.001;
    state.samples.push(s);
    if (state.samples.length > MAX_SAMPLES) state.samples.splice(0, state.samples.length - MAX_SAMPLES);
  }

  function sampleMetrics(m) {
    const groups = isObj(m.groups) ? m.groups : {};
    const tr = isObj(groups.trainer) ? groups.trainer : {};
    const sv = isObj(groups.server) ? groups.server : {};
    pushSample(makeSample(Date.now() / 1000, typeof m.phase === "string" ? m.phase : null, tr.all, tr.ranks,
                          sv.ranks));
  }

  /* The master's history (api/v1/history): its points become the first
   * samples. Its groups hold the ranks and "all" side by side. */
  function loadHistory(h) {
    const pts = isObj(h) && Array.isArray(h.points) ? h.points.filter(isObj) : [];
    for (const p of pts) takePoint(p);
    state.historyPoints = state.samples.length;
  }

  /* One of the master's points, once (the polls of history/last see the
   * same point until the next is taken). */
  function takePoint(p) {
    if (!isNum(p.t) || (state.lastPointT !== null && p.t <= state.lastPointT)) return;
    state.lastPointT = p.t;
    const g = isObj(p.groups) ? p.groups : {};
    const tr = isObj(g.trainer) ? g.trainer : {};
    const sv = isObj(g.server) ? g.server : {};
    pushSample(makeSample(p.t, typeof p.phase === "string" ? p.phase : null, tr.all, tr, sv));
  }

  /* The statistics offered over the window (history.h): no p99, and the
   * mean since the last poll is a cumulative view's. */
  const WINDOW_STATS = ["mean", "p50", "p90"];

  /* Whether any sample carries a window: a master that sends none is
   * charted cumulatively whatever the choice. */
  function windowKnown() {
    const has = (x) => isObj(x) && isObj(x.window);
    for (const s of state.samples) {
      if (Object.values(s.trainer).some(has) || Object.values(s.breakdown).some(has)) return true;
      for (const r of Object.values(s.server)) if (has(r.batch) || has(r.strag)) return true;
    }
    return false;
  }

  const STAT_NAMES = {mean: "mean", p50: "p50", p90: "p90", p99: "p99", interval: "mean since the last point"};

  /* What the charts show now: state.shownMode and the caption. */
  function chartCaption() {
    const win = state.mode === "window" && windowKnown();
    state.shownMode = win ? "window" : "cumulative";
    const stat = STAT_NAMES[state.stat] || state.stat;
    state.chartShown = win ? stat + " over the last 10 s"
      : state.stat === "interval" ? stat
      : stat + ", cumulative over the pass" +
        (state.mode === "window" ? " (the master sends no 10 s window)" : "");
    return state.chartShown;
  }

  /* The value plotted for STATS `cur` (and `prev`, the same rank's STATS of
   * the previous sample, for the interval mean). */
  function statValue(cur, prev) {
    if (!isObj(cur)) return null;
    if (state.shownMode === "window") {
      /* An empty window, or one past the samples the master keeps: a gap. */
      const w = cur.window;
      if (!isObj(w) || !isNum(w.count) || w.count <= 0) return null;
      return isNum(w[state.stat]) ? w[state.stat] : null;
    }
    /* No samples yet (the start, or just after the reset between the
     * warm-up and the timed pass): a gap, not a zero. */
    if (!isNum(cur.count) || cur.count <= 0) return null;
    if (state.stat !== "interval") return isNum(cur[state.stat]) ? cur[state.stat] : null;
    const c2 = cur.count, m2 = cur.mean;
    if (!isNum(c2) || !isNum(m2) || c2 <= 0) return null;
    if (!isObj(prev) || !isNum(prev.count) || !isNum(prev.mean) || prev.count > c2) return m2; /* first or reset */
    if (c2 === prev.count) return null;                                               /* nothing new */
    return (c2 * m2 - prev.count * prev.mean) / (c2 - prev.count);
  }

  /* Series definitions for one chart: [{key, label, color, dash, get(sample, prevSample)}]. */
  function seriesDefs(which) {
    if (which === "breakdown") {
      return BREAKDOWN.filter((d) => state.samples.some((s) => isObj(s.breakdown[d.key])))
        .map((d, i) => ({key: d.key, label: d.label, color: color(i + 2), dash: null,
                         get: (s, p) => statValue(s.breakdown[d.key], p && p.breakdown[d.key])}));
    }
    const ranks = new Set();
    for (const s of state.samples) for (const r of Object.keys(s[which])) ranks.add(r);
    const sorted = rankKeys(Object.fromEntries([...ranks].map((r) => [r, 1])));
    const defs = [];
    sorted.forEach((r) => {
      const i = Number(r) || 0;
      const c = color(which === "trainer" ? i : 2 * i);
      if (which === "trainer") {
        defs.push({key: "t" + r, label: "trainer " + r, color: c, dash: null,
                   get: (s, p) => statValue(s.trainer[r], p && p.trainer[r])});
      } else {
        defs.push({key: "b" + r, label: "server " + r + " batch", color: c, dash: null,
                   get: (s, p) => statValue(s.server[r] && s.server[r].batch, p && p.server[r] && p.server[r].batch)});
        /* The straggler line: its own colour, dashed, and said so in the legend. */
        defs.push({key: "s" + r, label: "server " + r + " straggler (dashed)", color: color(2 * i + 1),
                   dash: [6, 4],
                   get: (s, p) => statValue(s.server[r] && s.server[r].strag, p && p.server[r] && p.server[r].strag)});
      }
    });
    return defs;
  }

  const charts = {
    trainer: {id: "chart-trainer", plot: null, sig: "", ro: null},
    server: {id: "chart-server", plot: null, sig: "", ro: null},
    breakdown: {id: "chart-breakdown", plot: null, sig: "", ro: null}
  };

  /* Tick labels with as many decimals as the step between ticks needs, and
   * no more: ticks 2.5 apart read 375.0 / 377.5 / 380.0, not 375 / 378 / 380
   * (rounded to the value's own magnitude, two of them printed the same). */
  function tickDecimals(vals) {
    let step = Infinity;
    for (let i = 1; i < vals.length; i++) {
      const d = Math.abs(vals[i] - vals[i - 1]);
      if (d > 0 && d < step) step = d;
    }
    if (!isFinite(step)) return 0;
    /* The smallest count of decimals that writes the step exactly (to 1e-9). */
    for (let k = 0; k < 9; k++) {
      const scaled = step * Math.pow(10, k);
      if (Math.abs(scaled - Math.round(scaled)) < 1e-9 * Math.max(1, scaled)) return k;
    }
    return 9;
  }

  function fmtTicks(vals) {
    const k = tickDecimals(vals.filter(isNum));
    return vals.map((v) => (isNum(v) ? v.toFixed(k) : ""));
  }

  window.psbenchFormat = {ticks: fmtTicks, headline: (kind, v) => hlText(kind, v)};

  function chartWidth(box) {
    const w = box.clientWidth || (box.parentElement && box.parentElement.clientWidth) || 0;
    return Math.max(280, Math.floor(w));
  }

  /* [x0, x1] spans (seconds) of consecutive warm-up samples. */
  function warmupSpans() {
    const spans = [];
    let cur = null;
    for (const s of state.samples) {
      if (s.phase === "warmup") {
        if (cur) cur[1] = s.t; else cur = [s.t, s.t];
      } else if (cur) {
        cur[1] = s.t; /* up to the timed pass's first point */
        spans.push(cur);
        cur = null;
      }
    }
    if (cur) spans.push(cur);
    return spans;
  }

  /* Shades the warm-up pass under the series, with a label. */
  function drawWarmup(u) {
    const ctx = u.ctx;
    ctx.save();
    for (const [a, b] of warmupSpans()) {
      const x0 = Math.round(u.valToPos(a, "x", true)), x1 = Math.round(u.valToPos(b, "x", true));
      const left = Math.max(x0, u.bbox.left), right = Math.min(Math.max(x1, x0 + 2), u.bbox.left + u.bbox.width);
      if (right <= left) continue;
      ctx.fillStyle = "rgba(217, 119, 6, 0.12)";
      ctx.fillRect(left, u.bbox.top, right - left, u.bbox.height);
      ctx.fillStyle = "rgba(180, 83, 9, 0.9)";
      ctx.font = Math.round(11 * (window.devicePixelRatio || 1)) + "px sans-serif";
      ctx.fillText("warm-up", left + 4, u.bbox.top + 14 * (window.devicePixelRatio || 1));
    }
    ctx.restore();
  }

  function makePlot(box, defs) {
    const opts = {
      hooks: {drawClear: [drawWarmup]},
      width: chartWidth(box),
      height: CHART_HEIGHT,
      scales: {x: {time: true}},
      cursor: {drag: {x: false, y: false}},
      legend: {live: true},
      axes: [
        /* Whole seconds at least: no "12:00:33.500" ticks on a short run. */
        {stroke: "#6b7385", grid: {stroke: "#eef0f4"}, ticks: {stroke: "#e2e6ee"},
         incrs: X_INCRS, space: 60,
         values: (u, vals) => vals.map((v) => fmtClock(v * 1000))},
        {stroke: "#6b7385", grid: {stroke: "#eef0f4"}, ticks: {stroke: "#e2e6ee"}, size: 64,
         label: "ms \u00b7 " + state.chartShown, labelSize: 18,
         values: (u, vals) => fmtTicks(vals)}
      ],
      series: [{label: "time", value: (u, v, si, idx) => {
        if (idx == null) v = lastValue(u.data[0]);
        return v == null ? "\u2013" : fmtClock(v * 1000);
      }}].concat(defs.map((d) => ({
        label: d.label,
        stroke: d.color,
        width: 1.5,
        dash: d.dash || undefined,
        spanGaps: true,
        /* With the cursor over the chart: the value under it; otherwise the latest one. */
        value: (u, v, si, idx) => {
          if (idx == null) v = lastValue(u.data[si]);
          return v == null ? "\u2013" : v.toFixed(3);
        }
      })))
    };
    return new uPlot(opts, chartData(defs), box);
  }

  function lastValue(col) {
    if (!col) return null;
    for (let i = col.length - 1; i >= 0; i--) if (col[i] != null) return col[i];
    return null;
  }

  function chartData(defs) {
    const xs = state.samples.map((s) => s.t);
    const cols = defs.map((d) => state.samples.map((s, i) => {
      const v = d.get(s, i > 0 ? state.samples[i - 1] : null);
      return isNum(v) ? v : null;
    }));
    return [xs].concat(cols);
  }

  function countPoints(data) {
    let n = 0;
    for (let i = 0; i < data[0].length; i++) {
      for (let j = 1; j < data.length; j++) {
        if (data[j][i] !== null) { n++; break; }
      }
    }
    return n;
  }

  function renderChart(which) {
    const ch = charts[which];
    const box = $(ch.id);
    if (typeof uPlot !== "function") throw new Error("uPlot is not loaded");
    const defs = seriesDefs(which);
    /* The axis says what is shown: a new choice makes a new plot. */
    const sig = state.chartShown + "|" + defs.map((d) => d.key).join(",");
    let data;
    if (defs.length === 0) {
      if (ch.plot) { ch.plot.destroy(); ch.plot = null; }
      data = [[]];
    } else if (!ch.plot || sig !== ch.sig) {
      if (ch.plot) ch.plot.destroy();
      ch.plot = makePlot(box, defs);
      data = ch.plot.data;
    } else {
      data = chartData(defs);
      ch.plot.setData(data);
    }
    ch.sig = sig;
    const points = countPoints(data);
    /* The data plotted, for tests and the curious: x, then a column per series. */
    state.charts[which] = {points: points, series: defs.length, labels: defs.map((d) => d.label), data: data};
    setAttr(box, "data-points", points);
    setAttr(box, "data-series", defs.length);
    let warm = 0, timed = 0;
    for (let i = 0; i < data[0].length; i++) {
      let any = false;
      for (let j = 1; j < data.length; j++) any = any || data[j][i] !== null;
      if (!any) continue;
      if (state.samples[i].phase === "warmup") warm++; else timed++;
    }
    setAttr(box, "data-warmup-points", warm);
    setAttr(box, "data-timed-points", timed);

    if (!ch.ro && typeof ResizeObserver === "function") {
      let pending = false;
      ch.ro = new ResizeObserver(() => {
        if (pending) return;
        pending = true;
        requestAnimationFrame(() => {
          pending = false;
          if (ch.plot) {
            const w = chartWidth(box);
            if (w !== ch.plot.width) ch.plot.setSize({width: w, height: CHART_HEIGHT});
          }
        });
      });
      ch.ro.observe(box.parentElement || box);
    }
  }

  function renderCharts() {
    setText($("chart-shown"), "(" + chartCaption() + ")");
    renderChart("trainer");
    /* The server chart only where the job has servers (a pure allreduce
     * job has none); the breakdown only where trainers report it. */
    const c = state.config;
    const noServer = isObj(c) && isNum(c.nserver) && c.nserver + (isNum(c.ncudaserver) ? c.ncudaserver : 0) === 0;
    const fig = $("fig-server");
    if (fig) fig.hidden = noServer;
    if (!noServer) renderChart("server");
    renderChart("breakdown");
    const bfig = $("fig-breakdown");
    if (bfig) bfig.hidden = state.charts.breakdown.series === 0;
  }

  /* ---------------------------------------------------------------- headline */

  const SHARES = [
    {key: "forward", label: "forward", color: "#2563eb"},
    {key: "backward_compute", label: "backward compute", color: "#16a34a"},
    {key: "exposed_comm", label: "exposed comm", color: "#dc2626"},
    {key: "optimizer", label: "optimizer", color: "#d97706"},
    {key: "other", label: "other", color: "#9ca3af"}
  ];

  /* The headline's formats (window.psbenchFormat.headline: the tests
   * write the expected text with them). */
  const HL_FMT = {
    step_p50: (v) => v.toFixed(2) + " ms",
    samples_per_s: (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1)),
    bytes_per_step: (v) => {
      const units = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
      for (const [k, u] of units) if (v >= k) return (v / k).toFixed(2) + " " + u;
      return v.toFixed(0) + " B";
    },
    effective_gb_per_s: (v) => v.toFixed(2) + " GB/s",
    share: (v) => (100 * v).toFixed(1) + "%"
  };

  function hlText(kind, v) { return isNum(v) ? HL_FMT[kind](v) : "\u2013"; }

  /* The "all" row of the status's headline (one trainer: its own row). */
  function headlineRow() {
    const h = isObj(state.status) && isObj(state.status.headline) ? state.status.headline : null;
    const rows = h && Array.isArray(h.trainers) ? h.trainers.filter(isObj) : [];
    return rows.find((r) => r.trainer === "all") || (rows.length === 1 ? rows[0] : null);
  }

  /* The steps behind the pass's figures: the "all trainers" batch_all count. */
  function metricsSteps() {
    const m = state.metrics;
    const all = isObj(m) && isObj(m.groups) && isObj(m.groups.trainer) && isObj(m.groups.trainer.all)
      ? m.groups.trainer.all : null;
    return all && isObj(all[M_BATCH]) && isNum(all[M_BATCH].count) ? all[M_BATCH].count : null;
  }

  /* state.headline = {source: "steady" | "pass" | "none", final, fewSteps,
   * figures: {KEY: {value, text, n, steady}}, shares: {KEY: {value, text}}}. */
  function renderHeadline() {
    const box = $("headline");
    if (!box) return;
    const row = headlineRow();
    const steady = row && isObj(row.steady) ? row.steady : null;
    const passN = metricsSteps();
    const steadyN = steady && isNum(steady.n) ? steady.n : null;
    const hl = {source: !row ? "none" : steady ? "steady" : "pass",
                final: state.phase === "done", fewSteps: null, figures: {}, shares: {}};
    /* A figure the steady object has is the steady one (its n); the rest the pass's. */
    const pick = (key) => {
      const st = steady && isNum(steady[key]);
      const value = st ? steady[key] : row && isNum(row[key]) ? row[key] : null;
      return {value: value, n: st ? steadyN : passN, steady: st};
    };
    const figs = {step_p50: pick("step_p50_ms"), samples_per_s: pick("samples_per_s"),
                  bytes_per_step: pick("bytes_per_step"), effective_gb_per_s: pick("effective_gb_per_s")};
    for (const [key, f] of Object.entries(figs)) {
      f.text = hlText(key, f.value);
      hl.figures[key] = f;
      const e = $("hl-" + key);
      if (!e) continue;
      setText(e.querySelector(".fig-value"), f.text);
      setAttr(e, "data-value", f.value === null ? "" : f.value);
      setText(e.querySelector(".fig-n"), (f.steady ? "steady state \u00b7 " : "") +
              "n = " + (isNum(f.n) ? String(f.n) : "\u2013"));
    }
    const sh = steady && isObj(steady.shares) ? steady.shares : row && isObj(row.shares) ? row.shares : {};
    const bar = $("hl-sharebar"), legend = $("hl-share-legend");
    const sig = JSON.stringify(sh);
    for (const d of SHARES) hl.shares[d.key] = {value: isNum(sh[d.key]) ? sh[d.key] : null,
                                                 text: hlText("share", sh[d.key])};
    if (bar.getAttribute("data-sig") !== sig) {
      bar.setAttribute("data-sig", sig);
      bar.textContent = "";
      legend.textContent = "";
      for (const d of SHARES) {
        const v = hl.shares[d.key].value;
        if (v !== null && v > 0) {
          const seg = el("span");
          seg.style.width = (100 * Math.min(1, v)).toFixed(2) + "%";
          seg.style.background = d.color;
          seg.title = d.label + " " + hl.shares[d.key].text;
          bar.appendChild(seg);
        }
        const item = el("span", "share");
        item.setAttribute("data-key", d.key);
        const sw = el("span", "sw");
        sw.style.background = d.color;
        item.appendChild(sw);
        item.appendChild(document.createTextNode(d.label + " "));
        item.appendChild(el("b", null, hl.shares[d.key].text));
        legend.appendChild(item);
      }
    }
    const shareSteady = !!(steady && isObj(steady.shares));
    setText($("hl-shares").querySelector(".fig-n"), (shareSteady ? "steady state \u00b7 " : "") + "n = " +
            (isNum(shareSteady ? steadyN : passN) ? String(shareSteady ? steadyN : passN) : "\u2013"));
    const pass = isObj(state.status) && isObj(state.status.headline) ? state.status.headline.pass : null;
    setText($("hl-label"), "all trainers" + (steady ? ", steady state" : pass ? ", " + pass + " pass" : "") +
            (hl.final ? " \u00b7 final" : row ? " \u00b7 live" : " \u00b7 no step yet"));
    const few = $("hl-few");
    if (steady && steady.few_steps === true) hl.fewSteps = steadyN;
    few.hidden = !(steady && steady.few_steps === true);
    setText(few, few.hidden ? "" : "few steps (n=" + (isNum(steadyN) ? steadyN : "?") + ")");
    setAttr(box, "data-source", hl.source);
    state.headline = hl;
  }

  /* A host busy or oversubscribed during the timed pass: its figures may
   * say more about the host than the system benchmarked. */
  function renderBusy() {
    const hs = isObj(state.status) && isObj(state.status.host_state) ? state.status.host_state : null;
    const on = !!hs && (hs.busy === true || hs.oversubscribed === true);
    const box = $("busy");
    box.hidden = !on;
    if (!on) { state.busy = null; return; }
    const warnings = Array.isArray(hs.warnings) ? hs.warnings.filter((w) => typeof w === "string") : [];
    if (warnings.length === 0) {
      warnings.push(hs.busy === true ? "a host was busy during the timed pass"
                                     : "more processes than cores on a host (oversubscribed)");
    }
    state.busy = warnings;
    const list = $("busy-list");
    const sig = JSON.stringify(warnings);
    if (list.getAttribute("data-sig") === sig) return;
    list.setAttribute("data-sig", sig);
    list.textContent = "";
    for (const w of warnings) list.appendChild(el("li", null, w));
  }

  /* -------------------------------------------------------------- experiment */

  /* What the job is, from api/v1/config: each fact a <span data-key>. */
  function experimentFacts(c) {
    const r = isObj(c.resolved) ? c.resolved : {};
    const tc = isObj(r.trainer) && isObj(r.trainer.configurations) ? r.trainer.configurations : {};
    const n = (k) => (isNum(c[k]) ? c[k] : 0);
    const facts = [];
    const add = (key, label, v) => { if (v !== null && v !== undefined && v !== "") facts.push([key, label, String(v)]); };
    add("model", "model", c.model);
    add("hook", "hook", tc.ddp_hook || c.ddp_hook || null);
    add("trainers", "trainers", n("ntrainer") + n("ncudatrainer") +
        (n("ncudatrainer") ? " (" + n("ncudatrainer") + " CUDA)" : ""));
    add("servers", "servers", n("nserver") + n("ncudaserver") +
        (n("ncudaserver") ? " (" + n("ncudaserver") + " CUDA)" : ""));
    add("placement", "placement", c.placement);
    add("bucket_cap_mb", "bucket cap", isNum(tc.bucket_cap_mb) ? tc.bucket_cap_mb + " MB" : null);
    const devs = new Set();
    if (Array.isArray(state.nodes)) for (const nd of state.nodes) if (isObj(nd) && nd.device) devs.add(String(nd.device));
    if (devs.size === 0) devs.add(n("ncudatrainer") + n("ncudaserver") > 0 ? "cpu, cuda" : "cpu");
    add("device", "device", [...devs].sort().join(", "));
    /* The transport the trainers' links use once they are up; until then
     * what was asked for. */
    const tr = new Set();
    if (Array.isArray(state.nodes)) for (const nd of state.nodes) if (isObj(nd) && nd.transport) tr.add(nd.transport);
    add("transport", "transport", tr.size ? [...tr].sort().join(", ") : c.transport);
    return facts;
  }

  function renderExperiment() {
    const box = $("experiment");
    if (!box) return;
    const c = state.config;
    box.hidden = !isObj(c);
    if (!isObj(c)) return;
    const facts = experimentFacts(c);
    const sig = JSON.stringify(facts);
    if (box.getAttribute("data-sig") === sig) return;
    box.setAttribute("data-sig", sig);
    box.textContent = "";
    for (const [key, label, v] of facts) {
      const span = el("span", "fact");
      span.setAttribute("data-key", key);
      span.appendChild(document.createTextNode(label + " "));
      span.appendChild(el("b", null, v));
      box.appendChild(span);
    }
  }

  /* ------------------------------------------------------- processed metrics */

  const tables = new Map();   /* "group/key" -> {details, tbody, rows: Map(metric -> cells)} */

  function makeTable(group, key, open) {
    const details = el("details");
    details.open = open;
    details.setAttribute("data-key", key);
    const label = key === "all" ? "all " + group + "s" : group + " " + key;
    details.appendChild(el("summary", null, label));
    const wrap = el("div", "table-scroll");
    const table = el("table", "grid metrics");
    const thead = el("thead");
    const hr = el("tr");
    hr.appendChild(el("th", null, "metric"));
    for (const c of TABLE_COLS) hr.appendChild(el("th", "num", c));
    thead.appendChild(hr);
    table.appendChild(thead);
    const tbody = el("tbody");
    table.appendChild(tbody);
    wrap.appendChild(table);
    details.appendChild(wrap);
    return {details, tbody, rows: new Map()};
  }

  function fillTable(t, metricsObj) {
    const names = Object.keys(isObj(metricsObj) ? metricsObj : {}).filter((k) => isObj(metricsObj[k])).sort();
    const seen = new Set();
    names.forEach((name, i) => {
      seen.add(name);
      let cells = t.rows.get(name);
      if (!cells) {
        const tr = el("tr");
        const first = el("td", "metric", name);
        first.title = name;
        tr.appendChild(first);
        cells = {tr, vals: TABLE_COLS.map(() => tr.appendChild(el("td", "num")))};
        t.rows.set(name, cells);
      }
      const s = metricsObj[name];
      TABLE_COLS.forEach((c, j) => setText(cells.vals[j], c === "count" ? fmtCount(s[c]) : fmt3(s[c])));
      if (t.tbody.rows[i] !== cells.tr) t.tbody.insertBefore(cells.tr, t.tbody.rows[i] || null);
    });
    for (const [name, cells] of t.rows) {
      if (!seen.has(name)) { cells.tr.remove(); t.rows.delete(name); }
    }
  }

  function renderGroup(group, g) {
    const box = $("metrics-" + group);
    if (!box) return 0;
    const keys = [];
    if (isObj(g) && isObj(g.all) && Object.keys(g.all).length) keys.push("all");
    const ranks = isObj(g) ? rankKeys(g.ranks).filter((r) => isObj(g.ranks[r])) : [];
    keys.push(...ranks);
    let heading = box.querySelector("h3");
    if (!heading) { heading = el("h3", null, group + "s"); box.appendChild(heading); }
    heading.hidden = keys.length === 0;
    const seen = new Set();
    let prev = heading;
    for (const key of keys) {
      const id = group + "/" + key;
      seen.add(id);
      let t = tables.get(id);
      if (!t) {
        t = makeTable(group, key, key === "all" || ranks.length <= 8);
        tables.set(id, t);
      }
      fillTable(t, key === "all" ? g.all : g.ranks[key]);
      if (prev.nextSibling !== t.details) box.insertBefore(t.details, prev.nextSibling);
      prev = t.details;
    }
    for (const [id, t] of tables) {
      if (id.startsWith(group + "/") && !seen.has(id)) { t.details.remove(); tables.delete(id); }
    }
    return keys.length;
  }

  /* Counts that are not durations (the embedding servers' rows touched),
   * one line under the servers' tables. */
  function renderCounters(m) {
    const box = $("metrics-counters");
    const sv = isObj(m) && isObj(m.counters) && isObj(m.counters.server) ? m.counters.server : null;
    const ranks = sv && isObj(sv.ranks) ? sv.ranks : {};
    const keys = Object.keys(ranks).filter((k) => isObj(ranks[k])).sort((a, b) => Number(a) - Number(b));
    box.hidden = keys.length === 0;
    if (box.hidden) return;
    const parts = keys.map((k) => "server " + k + ": " + Number(ranks[k].rows_touched).toLocaleString());
    const all = isObj(sv.all) ? Number(sv.all.rows_touched).toLocaleString() : "?";
    box.textContent = "embedding rows touched by updates: " + parts.join(", ") + " (all: " + all + ")";
    box.setAttribute("data-all", isObj(sv.all) ? String(sv.all.rows_touched) : "");
  }

  function renderTables() {
    const m = state.metrics;
    const groups = isObj(m) && isObj(m.groups) ? m.groups : {};
    let n = 0;
    for (const group of ["trainer", "server"]) n += renderGroup(group, groups[group]);
    $("metrics-empty").hidden = n > 0;
    renderCounters(m);
  }

  /* ------------------------------------------------------------ traced step */

  /* The latest step every trainer traced whole (api/v1/trace/step), drawn
   * by timeline.js as the sweep report draws a point's; drawn again only
   * when it is another step or holds more spans. */
  function renderTrace() {
    const card = $("trace-card");
    if (!card || !isObj(state.config) || state.config.trace !== true) return;
    card.hidden = false;
    const t = state.traceStep;
    const box = $("trace-step");
    const has = isObj(t) && isNum(t.batch) && Array.isArray(t.spans);
    $("trace-empty").hidden = has;
    if (!has) {
      if (isObj(t) && typeof t.reason === "string") setText($("trace-empty"), t.reason);
      return;
    }
    const key = t.batch + ":" + t.start_ns + ":" + t.spans.length;
    if (state.traceKey === key || !window.psbenchTimeline) return;
    state.traceKey = key;
    box.textContent = "";
    setText($("trace-why"), "batch " + t.batch + ": " + (t.why || ""));
    state.traceDrawn = window.psbenchTimeline.draw(box, t);
    setAttr(box, "data-batch", String(t.batch));
  }

  /* -------------------------------------------------------------------- start */

  function start() {
    const sel = $("stat-select"), mode = $("mode-select");
    const saved = (k) => { try { return window.localStorage.getItem(k); } catch (e) { return null; } };
    const save = (k, v) => { try { window.localStorage.setItem(k, v); } catch (e) { /* private mode */ } };
    const has = (s, v) => s && Array.from(s.options).some((o) => o.value === v);
    if (mode && has(mode, saved("psbench.chartMode"))) mode.value = saved("psbench.chartMode");
    if (sel && has(sel, saved("psbench.chartStat"))) sel.value = saved("psbench.chartStat");
    /* Over the window only what it has: mean, p50, p90. */
    const sync = () => {
      if (mode) state.mode = mode.value;
      if (sel) {
        for (const o of sel.options) o.disabled = state.mode === "window" && !WINDOW_STATS.includes(o.value);
        if (sel.options[sel.selectedIndex].disabled) sel.value = "p50";
        state.stat = sel.value;
      }
    };
    sync();
    const changed = () => {
      sync();
      save("psbench.chartMode", state.mode);
      save("psbench.chartStat", state.stat);
      try { renderCharts(); } catch (e) { console.error("psbench dashboard: charts: " + e); }
    };
    if (sel) sel.addEventListener("change", changed);
    if (mode) mode.addEventListener("change", changed);
    /* The history first, so the charts start from the job's beginning;
     * then the polls. A master without it (or a failed request) leaves the
     * charts to the polls alone. */
    fetchJSON("api/v1/history").then(loadHistory, () => {}).finally(loop);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
