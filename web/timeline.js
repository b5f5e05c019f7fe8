/* timeline.js — one traced step drawn as swimlanes, shared by the sweep's
 * report (report.js; master/tools/sweep_report.c inlines this before it)
 * and the dashboard (app.js, GET /api/v1/trace/step).
 *
 * The step is master/trace_an.h's trace_an_step_json: "lanes" (a process
 * and its lane each), "spans" (lane, name, cat, ts and dur in us from the
 * step's first span, ids), "flows" ({from, to}: span indices, a bucket's
 * hop between a trainer and a server), "critical" (span indices: the
 * critical path, forward first) and "buckets" (each trainer's bucket's
 * parts in ms). Drawn as an SVG: a row per lane, a bar per span coloured
 * by its category, a line per flow from the sender's span's start to the
 * receiver's span's end (the wire and the return of docs/results.md), the
 * critical path's bars outlined and joined by a dashed line; then a table
 * of the buckets' parts. A plain browser script: no modules, no network;
 * every string reaches the page as text.
 *
 *   window.psbenchTimeline.draw(parent, step) -> {lanes, bars, flows, critical}
 */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  /* The span categories of shared/trace.h. */
  const CATS = [["compute", "compute", "#2563eb"], ["wait", "waiting", "#9ca3af"], ["bucket", "bucket", "#16a34a"],
                ["comm", "trainer comm", "#7c3aed"], ["server", "server", "#d97706"], ["device", "device", "#db2777"],
                ["master", "master", "#4b5563"]];
  const COLOR = Object.fromEntries(CATS.map((c) => [c[0], c[2]]));
  const PARTS = ["queue", "wire", "straggler", "fold", "return", "apply"];
  const LABEL_W = 170, LANE_H = 24, BAR_H = 13, THIN_H = 4, AXIS_H = 18, PAD_R = 12;
  const ENCLOSING = ["step", "bucket_wait"];

  function el(tag, cls, children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const c of children || []) {
      if (c == null) continue;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const ms = (us) => (us / 1000).toFixed(3);

  function spanText(s, lane) {
    const ids = ["bucket", "trainer", "server"].filter((k) => isNum(s[k])).map((k) => k + " " + s[k]);
    return s.name + " \u00b7 " + lane.process + " " + lane.lane + " \u00b7 +" + ms(s.ts) + " ms, " + ms(s.dur) + " ms" +
      (ids.length ? " \u00b7 " + ids.join(", ") : "");
  }

  function legend() {
    const items = CATS.filter((c) => c[0] !== "master").map((c) => {
      const sw = el("span", "tl-swatch", []);
      sw.style.background = c[2];
      return el("span", null, [sw, c[1]]);
    });
    items.push(el("span", null, [el("span", "tl-swatch tl-swatch-critical", []), "critical path"]));
    items.push(el("span", null, [el("span", "tl-swatch tl-swatch-flow", []), "a bucket's hop"]));
    return el("div", "tl-legend", items);
  }

  function bucketTable(step) {
    const rows = (step.buckets || []).map((b) => el("tr", null, [
      el("td", "num", [String(b.bucket)]), el("td", "num", [String(b.trainer)]),
      el("td", "num", [b.server >= 0 ? String(b.server) : "\u2013"])].concat(PARTS.map((p) => {
        const v = b[p + "_ms"];
        const td = el("td", "num", [isNum(v) ? v.toFixed(3) : "\u2013"]);
        if ((b.clamped || []).indexOf(p) >= 0) td.title = "below 0 by less than the clocks' uncertainty: taken as 0";
        return td;
      }))));
    const head = el("tr", null, ["bucket", "trainer", "server"].concat(PARTS.map((p) => p + " ms")).map(
      (h) => el("th", "num", [h])));
    return el("div", "tl-scroll", [el("table", "grid tl-buckets", [el("thead", null, [head]), el("tbody", null, rows)])]);
  }

  function draw(parent, step) {
    const box = el("div", "tl", []);
    parent.appendChild(box);
    const lanes = step.lanes || [], spans = step.spans || [], flows = step.flows || [];
    const critical = new Set(step.critical || []);
    const dur = Math.max(1, isNum(step.dur_us) ? step.dur_us : 0,
                         ...spans.map((s) => (isNum(s.ts) && isNum(s.dur) ? s.ts + s.dur : 0)));
    box.appendChild(el("div", "tl-caption", [
      "batch " + step.batch + ": the slowest trainer's step " + (isNum(step.step_ms) ? step.step_ms.toFixed(3) + " ms" : "\u2013") +
      "; " + lanes.length + " lanes, " + spans.length + " spans, critical path " + critical.size + " spans"]));
    box.appendChild(legend());
    const width = Math.max(600, Math.floor(parent.clientWidth || 900) - 4);
    const height = AXIS_H + lanes.length * LANE_H + 4;
    const x = (us) => LABEL_W + (Math.max(0, us) / dur) * (width - LABEL_W - PAD_R);
    const yMid = (lane) => AXIS_H + lane * LANE_H + LANE_H / 2;
    const root = svg("svg", {class: "tl-svg", width: width, height: height, viewBox: "0 0 " + width + " " + height});
    root.setAttribute("role", "img");
    /* The axis: 0, the middle, the end, in ms. */
    for (const f of [0, 0.5, 1]) {
      const t = svg("text", {x: x(f * dur), y: 12, class: "tl-axis", "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle"});
      t.textContent = ms(f * dur) + " ms";
      root.appendChild(t);
    }
    lanes.forEach((l, i) => {
      const g = svg("g", {class: "tl-lane", "data-lane": i});
      g.appendChild(svg("rect", {x: 0, y: AXIS_H + i * LANE_H, width: width, height: LANE_H,
                                 class: i % 2 ? "tl-row tl-row-odd" : "tl-row"}));
      const t = svg("text", {x: 4, y: yMid(i) + 4, class: "tl-label"});
      t.textContent = l.process + " \u00b7 " + l.lane;
      g.appendChild(t);
      root.appendChild(g);
    });
    let bars = 0;
    /* The spans that enclose others on their lane (a step, a bucket's
     * wait for its answer) as thin bars at the lane's foot, drawn first:
     * what they hold stays in view. */
    const thin = (s) => ENCLOSING.indexOf(s.name) >= 0;
    const order = spans.map((s, i) => i).sort((a, b) => thin(spans[b]) - thin(spans[a]) || a - b);
    order.forEach((i) => {
      const s = spans[i], lane = lanes[s.lane];
      if (!lane) return;
      const x0 = x(s.ts), w = Math.max(1, x(s.ts + s.dur) - x0), h = thin(s) ? THIN_H : BAR_H;
      const y0 = thin(s) ? yMid(s.lane) + LANE_H / 2 - THIN_H - 1 : yMid(s.lane) - BAR_H / 2;
      const r = svg("rect", {x: x0, y: y0, width: w, height: h, rx: thin(s) ? 1 : 2,
                             fill: COLOR[s.cat] || "#6b7280", class: "tl-bar" + (critical.has(i) ? " tl-critical" : ""),
                             "data-span": i, "data-name": s.name});
      const title = svg("title", {});
      title.textContent = spanText(s, lane) + (critical.has(i) ? " \u00b7 on the critical path" : "");
      r.appendChild(title);
      root.appendChild(r);
      bars++;
    });
    let nflows = 0;
    for (const f of flows) {
      const a = spans[f.from], b = spans[f.to];
      if (!a || !b) continue;
      const line = svg("line", {x1: x(a.ts), y1: yMid(a.lane), x2: x(b.ts + b.dur), y2: yMid(b.lane), class: "tl-flow",
                                "data-bucket": f.bucket, "data-trainer": f.trainer});
      const title = svg("title", {});
      title.textContent = "bucket " + f.bucket + ", trainer " + f.trainer + ": " + a.name + " \u2192 " + b.name;
      line.appendChild(title);
      root.appendChild(line);
      nflows++;
    }
    /* The critical path's links, span end to the next one's start. */
    const path = (step.critical || []).map((i) => spans[i]).filter(Boolean);
    if (path.length > 1) {
      const pts = [];
      for (const s of path) pts.push(x(s.ts) + "," + yMid(s.lane), x(s.ts + s.dur) + "," + yMid(s.lane));
      root.appendChild(svg("polyline", {points: pts.join(" "), class: "tl-critical-line"}));
    }
    box.appendChild(el("div", "tl-scroll", [root]));
    if ((step.buckets || []).length) box.appendChild(bucketTable(step));
    return {lanes: lanes.length, bars: bars, flows: nflows, critical: critical.size};
  }

  window.psbenchTimeline = {draw: draw};
})();
