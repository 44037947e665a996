// sluice's run view: the live page (data fetched from /api/*) and the
// self-contained report (data inlined). Every chart is uPlot; every figure
// is derived from the recorded timeline (internal/history) as
// docs/see.md says.
(function () {
  "use strict";
  var C = { // lane columns (history.Col*)
    sent: 0, ok: 1, r429: 2, r529: 3, r5xx: 4, inTok: 5, outTok: 6, cacheW: 7, cacheR: 8,
    inFlight: 9, limit: 10, cap: 11, dead: 12, paused: 13, wait0: 14, bucket0: 22
  };
  var NWAITS = 8, NDIMS = 4, BCOLS = 4;
  var WAITS = ["etiquette cap", "concurrency (ramp/AIMD)", "requests", "input_tokens", "output_tokens", "tokens", "retry-after pause", "circuit breaker"];
  var WAIT_COLORS = ["#7c8da6", "#9c6ade", "#1f6fb4", "#d9531e", "#2e9e6b", "#c2185b", "#b26a00", "#c62828"];
  var DIMS = ["requests", "input_tokens", "output_tokens", "tokens"];
  var DIM_COLORS = ["#1f6fb4", "#d9531e", "#2e9e6b", "#c2185b"];
  var RATE_WINDOW = 15; // seconds a rate is measured over

  var embedded = JSON.parse(document.getElementById("sluice-data").textContent || "null");
  var LIVE = !embedded || !embedded.timeline;
  var token = new URLSearchParams(location.search).get("token") || "";
  var TL = null, ST = null, REP = null, JUDGE = null;
  var charts = {};
  var errors = [];

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }
  function fmtInt(v) { return v == null || isNaN(v) ? "–" : String(Math.round(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function fmtNum(v, d) { return v == null || isNaN(v) ? "–" : v.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d }); }
  function fmtUSD(v) { return v == null || isNaN(v) ? "–" : "$" + (v >= 100 ? fmtNum(v, 2) : v.toFixed(4)); }
  function fmtDur(s) {
    if (s == null || isNaN(s) || s < 0) return "–";
    s = Math.round(s);
    var h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, x = s % 60;
    return (h > 0 ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(x).padStart(2, "0");
  }
  function pad2(n) { return n < 10 ? "0" + n : "" + n; }
  function fmtClock(ms) { var d = new Date(ms); return pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds()); }
  function human(v) {
    if (v == null || isNaN(v)) return "–";
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return fmtNum(v, v < 10 ? 1 : 0);
  }
  function pct(v) { return v == null || isNaN(v) ? "–" : (100 * v).toFixed(v < 0.1 ? 1 : 0) + " %"; }

  // ---- the timeline: merging increments, deriving series ----

  function laneKey(l) { return l.org + "/" + l.pool; }

  // filled gives a timeline's lists that Go wrote as null (none yet) their
  // empty value.
  function filled(tl) {
    if (!tl) return tl;
    ["events", "lanes", "segments", "t", "seg", "done"].forEach(function (k) { tl[k] = tl[k] || []; });
    tl.unpriced = tl.unpriced || tl.t.map(function () { return 0; });
    return tl;
  }

  // merge appends the increment inc (Timeline.Since) to TL.
  function merge(inc) {
    if (!TL || !inc) { TL = filled(inc); return; }
    inc = filled(inc);
    var n0 = TL.t.length, add = inc.t.length;
    TL.segments = inc.segments;
    TL.report = inc.report;
    TL.t = TL.t.concat(inc.t); TL.seg = TL.seg.concat(inc.seg); TL.done = TL.done.concat(inc.done);
    TL.unpriced = TL.unpriced.concat(inc.unpriced);
    ["cost", "tok", "b"].forEach(function (k) { for (var i = 0; i < TL[k].length; i++) TL[k][i] = TL[k][i].concat(inc[k][i]); });
    var byKey = {};
    TL.lanes.forEach(function (l) { byKey[laneKey(l)] = l; });
    inc.lanes.forEach(function (l) {
      var have = byKey[laneKey(l)];
      if (!have) {
        have = { org: l.org, pool: l.pool, c: l.c.map(function () { return new Array(n0).fill(null); }) };
        TL.lanes.push(have); byKey[laneKey(l)] = have;
      }
      for (var c = 0; c < have.c.length; c++) have.c[c] = have.c[c].concat(l.c[c]);
    });
    TL.lanes.forEach(function (l) {
      if (l.c[0].length < n0 + add) for (var c = 0; c < l.c.length; c++) while (l.c[c].length < n0 + add) l.c[c].push(null);
    });
    var seen = {};
    TL.events.forEach(function (e) { seen[e.t + e.kind + e.state + e.id] = true; });
    (inc.events || []).forEach(function (e) { if (!seen[e.t + e.kind + e.state + e.id]) TL.events.push(e); });
  }

  // rate: per minute of the counter arr at i, over about RATE_WINDOW
  // seconds within the segment; null across a gap.
  function rate(arr, i) {
    var t = TL.t, seg = TL.seg, j = i - 1;
    if (j < 0 || seg[j] !== seg[i]) return null;
    while (j > 0 && seg[j - 1] === seg[i] && (t[i] - t[j - 1]) / 1000 <= RATE_WINDOW) j--;
    var a = arr[i], b = arr[j], dt = (t[i] - t[j]) / 60000;
    if (a == null || b == null || dt <= 0) return null;
    return Math.max(0, (a - b) / dt);
  }
  function rates(arr) { var out = []; for (var i = 0; i < TL.t.length; i++) out.push(rate(arr, i)); return out; }
  function sumLanes(col) {
    var out = new Array(TL.t.length).fill(null);
    TL.lanes.forEach(function (l) {
      l.c[col].forEach(function (v, i) { if (v != null) out[i] = (out[i] || 0) + v; });
    });
    return out;
  }

  // xs maps the timeline onto the charts' x axis (seconds): a null point
  // is inserted in each gap between segments so every line breaks there.
  function axis(extra) {
    var x = [], idx = [];
    for (var i = 0; i < TL.t.length; i++) {
      if (i > 0 && TL.seg[i] !== TL.seg[i - 1]) { x.push((TL.t[i - 1] + TL.t[i]) / 2000); idx.push(-1); }
      x.push(TL.t[i] / 1000); idx.push(i);
    }
    (extra || []).forEach(function (s) { if (!x.length || s > x[x.length - 1]) { x.push(s); idx.push(-2); } });
    return { x: x, idx: idx };
  }
  function mapped(ax, arr) { return ax.idx.map(function (i) { return i < 0 ? null : arr[i]; }); }

  function gaps() {
    var g = [];
    for (var i = 1; i < TL.t.length; i++) if (TL.seg[i] !== TL.seg[i - 1]) g.push([TL.t[i - 1] / 1000, TL.t[i] / 1000]);
    return g;
  }
  function marks() {
    return TL.events.filter(function (e) { return e.kind === "route" || e.kind === "replan" || e.kind === "halt" || e.kind === "interrupt" || (e.kind === "key" && e.state === "dead"); });
  }

  // ---- uPlot ----

  function width(node) { return Math.max(240, Math.floor(node.getBoundingClientRect().width) || 600); }

  // overlay draws the gaps (shaded, "not running") and the event marks
  // on every time chart.
  function overlay(u) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, dpr = devicePixelRatio || 1;
    ctx.save();
    gaps().forEach(function (g) {
      var a = u.valToPos(g[0], "x", true), b = u.valToPos(g[1], "x", true);
      ctx.fillStyle = "rgba(120,120,120,0.13)";
      ctx.fillRect(a, top, Math.max(2, b - a), h);
      ctx.fillStyle = "#667085"; ctx.font = (11 * dpr) + "px sans-serif";
      if (b - a > 70 * dpr) ctx.fillText("not running", a + 4 * dpr, top + 14 * dpr);
    });
    marks().forEach(function (e) {
      var x = u.valToPos(e.t / 1000, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.strokeStyle = e.kind === "replan" ? "#9c6ade" : e.kind === "route" ? "#1f6fb4" : "#c62828";
      ctx.setLineDash([4 * dpr, 3 * dpr]); ctx.lineWidth = dpr;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
    });
    ctx.restore();
  }

  // chart draws data in the chart id: a new uPlot the first time (or when
  // its series change), else the same one given the new data — a live
  // update costs a redraw, not a new chart.
  function chart(id, series, data, o) {
    o = o || {};
    var node = $(id);
    var key = series.map(function (s) { return s.label; }).join("|") + "|" + (o.height || 220);
    var c = charts[id];
    if (c && c._key === key && node.contains(c.root)) {
      c._hooks = o.draw || [];
      c._sluiceData = data;
      if (c._visible) c.setData(data); else c._stale = true; // drawn when scrolled into view
      return c;
    }
    var opts = {
      width: width(node), height: o.height || 220,
      cursor: { sync: { key: "t" } },
      scales: { x: { time: true }, y: o.yScale || { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.08 : 1]; } } },
      series: [{ value: function (u, v) { return v == null ? "–" : fmtClock(v * 1000); } }].concat(series.map(function (s) { s.points = s.points || { show: false }; return s; })),
      axes: [{ values: timeTicks, space: 70 }, { size: 60, values: o.yValues || function (u, vs) { return vs.map(human); } }],
      bands: o.bands,
      hooks: { draw: [function (u) { overlay(u); (u._hooks || o.draw || []).forEach(function (f) { f(u); }); }] },
      legend: { live: true }
    };
    if (charts[id]) { charts[id].destroy(); }
    node.textContent = "";
    c = charts[id] = new uPlot(opts, data, node);
    c._sluiceData = data;
    c._key = key;
    c._hooks = o.draw || [];
    c._visible = true;
    if (seen) seen.observe(node);
    return c;
  }

  // inked reports whether a chart has drawn: its x scale set and a path
  // built for some series (uPlot 1.6 keeps each series' last paths).
  function inked(u) {
    if (u.scales.x.min == null) return false;
    for (var i = 1; i < u.series.length; i++) if (u.series[i]._paths) return true;
    return false;
  }

  // seen tracks which charts are on screen: a live update redraws those,
  // and the others when they come into view.
  var seen = window.IntersectionObserver ? new IntersectionObserver(function (entries) {
    entries.forEach(function (en) {
      var c = charts[en.target.id];
      if (!c) return;
      c._visible = en.isIntersecting;
      if (c._visible && c._stale) {
        c._stale = false;
        if (c._redo) { var f = c._redo; c._redo = null; f(); } else c.setData(c._sluiceData);
      }
    });
  }, { rootMargin: "200px" }) : null;

  // timeTicks labels the x axis in the viewer's 24-hour clock.
  function timeTicks(u, vs, ax, space, incr) {
    return vs.map(function (v) {
      var d = new Date(v * 1000), hm = String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
      return incr < 60 ? hm + ":" + String(d.getSeconds()).padStart(2, "0") : hm;
    });
  }

  function firstRouting() {
    for (var i = 0; i < TL.events.length; i++) if (TL.events[i].kind === "route") return TL.events[i];
    return null;
  }
  function segTotal() { var s = TL.segments[0]; return s ? s.total : 0; }

  // ---- drawing ----

  function drawProgress() {
    var r = firstRouting(), total = segTotal(), extra = [];
    var t0 = TL.t.length ? TL.t[0] / 1000 : 0, d0 = TL.done.length ? TL.done[0] : 0;
    if (r && r.pred > 0) { t0 = r.t / 1000; [r.low, r.pred, r.high].forEach(function (p) { if (p > 0) extra.push(t0 + p); }); extra.sort(function (a, b) { return a - b; }); }
    var ax = axis(extra);
    var done = mapped(ax, TL.done);
    var series = [{ label: "done", stroke: "#1f6fb4", width: 2, value: function (u, v) { return fmtInt(v); } }];
    var data = [ax.x, done];
    var bands;
    if (r && r.pred > 0 && total > 0) {
      var line = function (p) { return ax.x.map(function (x) { return x < t0 ? null : Math.min(total, d0 + (total - d0) * (x - t0) / p); }); };
      var hi = r.low > 0 ? r.low : r.pred, lo = r.high > 0 ? r.high : r.pred;
      data.push(line(r.pred), line(hi), line(lo));
      series.push({ label: "planned", stroke: "#667085", width: 1, dash: [6, 4], value: function (u, v) { return fmtInt(v); } },
        { label: "plan, fast end", stroke: "rgba(102,112,133,0.35)", width: 1, value: function (u, v) { return fmtInt(v); } },
        { label: "plan, slow end", stroke: "rgba(102,112,133,0.35)", width: 1, value: function (u, v) { return fmtInt(v); } });
      bands = [{ series: [3, 4], fill: "rgba(31,111,180,0.08)" }];
    }
    if (total > 0) { data.push(ax.x.map(function () { return total; })); series.push({ label: "total", stroke: "#2e7d32", width: 1, dash: [2, 3], value: function (u, v) { return fmtInt(v); } }); }
    chart("chart-progress", series, data, { bands: bands });
    var note = "Results done (durable) over time";
    if (r && r.pred > 0) note += "; the band is the planner's prediction for the " + r.route + " route (" + fmtDur(r.low || r.pred) + " to " + fmtDur(r.high || r.pred) + ", mid " + fmtDur(r.pred) + ")";
    $("progress-note").textContent = note + ". Dashed marks: route, re-plans, halts, interrupts.";
  }

  function drawCost() {
    var ax = axis();
    var cost = mapped(ax, TL.cost[0]);
    var n = TL.t.length - 1, up = unpriced(n);
    var series = [{ label: up > 0 ? "spent, priced part" : "spent", stroke: "#d9531e", width: 2, fill: "rgba(217,83,30,0.08)", value: function (u, v) { return fmtUSD(v); } }];
    var data = [ax.x, cost];
    var proj = projected();
    if (proj > 0) { data.push(ax.x.map(function () { return proj; })); series.push({ label: "projected", stroke: "#b26a00", dash: [6, 4], width: 1, value: function (u, v) { return fmtUSD(v); } }); }
    var maxc = TL.segments.length ? TL.segments[TL.segments.length - 1].max_cost : 0;
    if (maxc > 0) { data.push(ax.x.map(function () { return maxc; })); series.push({ label: "--max-cost", stroke: "#c62828", width: 1, value: function (u, v) { return fmtUSD(v); } }); }
    chart("chart-cost", series, data, { yValues: function (u, vs) { return vs.map(function (v) { return v === 0 ? "$0" : "$" + (v < 1 ? v.toFixed(3) : human(v)); }); } });
    $("cost-note").textContent = n < 0 ? "" : up > 0 ? "Cost unknown: " + fmtInt(up) + " requests of models without a price (add their prices with --models); the priced part so far is " + fmtUSD(TL.cost[0][n]) + "." :
      "At list prices: " + fmtUSD(TL.cost[0][n]) + " so far (sync " + fmtUSD(TL.cost[1][n]) + ", batch " + fmtUSD(TL.cost[2][n]) + ")" +
      (proj > 0 ? "; " + fmtUSD(proj) + " projected for the whole input at the cost per result so far" : "") + (maxc > 0 ? "; --max-cost " + fmtUSD(maxc) : "") + ".";
  }

  // unpriced is how many requests so far have no price (a model the
  // catalog lacks): with any, the cost is unknown and the figures are
  // only the priced part.
  function unpriced(n) { return TL.unpriced && n >= 0 ? TL.unpriced[n] || 0 : 0; }

  function projected() {
    var n = TL.t.length - 1, s = TL.segments[0];
    if (n < 0 || !s || s.total <= s.done0 || unpriced(n) > 0) return 0;
    var d = TL.done[n] - s.done0;
    return d > 0 ? TL.cost[0][n] / d * (s.total - s.done0) : 0;
  }

  function drawErrors() {
    var ax = axis();
    var cols = [[C.r429, "429 rate-limited", "#b26a00"], [C.r529, "529 overloaded", "#9c6ade"], [C.r5xx, "5xx / lost", "#c62828"]];
    var data = [ax.x], series = [];
    cols.forEach(function (c) {
      data.push(mapped(ax, rates(sumLanes(c[0]))));
      series.push({ label: c[1], stroke: c[2], width: 1.5, value: function (u, v) { return v == null ? "–" : fmtNum(v, 1) + "/min"; } });
    });
    chart("chart-errors", series, data, { height: 180 });
  }

  // bindingAt: the wait reason with the most waited time between points
  // i-1 and i of lane l (-1: none).
  function bindingAt(l, i) {
    if (i === 0 || TL.seg[i] !== TL.seg[i - 1]) return -1;
    var best = -1, most = 0;
    for (var w = 0; w < NWAITS; w++) {
      var a = l.c[C.wait0 + w][i], b = l.c[C.wait0 + w][i - 1];
      if (a != null && b != null && a - b > most) { most = a - b; best = w; }
    }
    return best;
  }
  function bindingOver(l) {
    var n = TL.t.length - 1, best = -1, most = 0;
    for (var w = 0; w < NWAITS; w++) {
      var a = l.c[C.wait0 + w][n]; if (a != null && a > most) { most = a; best = w; }
    }
    return best;
  }

  // laneSection returns lane k's panel, built once: its header, numbers
  // and table are refilled on each update, its charts updated in place.
  function laneSection(box, k) {
    var sec = $("lane-" + k);
    if (sec) return sec;
    sec = el("section", { "class": "panel lane", id: "lane-" + k });
    ["h2", "div.kv", "h3:Use of each limit", "p.note:Per minute, as a share of the limit the headers state; the binding one is drawn thick. The strip under the chart says what held work back in each interval.",
      "div.chart#chart-lane-use-" + k, "div.legend-strip", "h3:Concurrency", "div.chart#chart-lane-conc-" + k, "h3:Buckets",
      "p.note:Depth: the bucket's learned depth, in seconds of refill. Over the last minute, as a share of the limit: what sluice used, and what the headers showed spent beyond sluice's own charges — others' use (a colleague's, or a charge sluice's estimate missed).",
      "div.buckets"].forEach(function (spec) {
      var text = null, i = spec.indexOf(":");
      if (i >= 0) { text = spec.slice(i + 1); spec = spec.slice(0, i); }
      var id = null, j = spec.indexOf("#");
      if (j >= 0) { id = spec.slice(j + 1); spec = spec.slice(0, j); }
      var parts = spec.split("."), e = el(parts[0], null, text);
      if (parts[1]) e.className = parts[1];
      if (id) e.id = id;
      sec.appendChild(e);
    });
    var leg = sec.querySelector(".legend-strip");
    WAITS.forEach(function (w, i) { var s = el("span"); var sw = el("i"); sw.style.background = WAIT_COLORS[i]; s.appendChild(sw); s.appendChild(document.createTextNode(w)); leg.appendChild(s); });
    box.appendChild(sec);
    return sec;
  }

  function drawLanes() {
    var box = $("lanes");
    box.className = "lanes-grid";
    TL.lanes.forEach(function (l, k) {
      var n = TL.t.length - 1;
      var sec = laneSection(box, k);
      var h = sec.querySelector("h2");
      h.textContent = l.org + " · " + l.pool;
      var b = bindingOver(l);
      if (b >= 0) h.appendChild(el("span", { "class": "pill" }, "bound by " + WAITS[b]));
      if (l.c[C.dead][n] === 1) h.appendChild(el("span", { "class": "pill dead" }, "dead: no live key"));
      var kv = sec.querySelector(".kv");
      kv.textContent = "";
      var okpm = rate(l.c[C.ok], n);
      [["ok", fmtInt(l.c[C.ok][n])], ["now", (okpm == null ? "–" : fmtInt(okpm)) + "/min"], ["in flight", fmtInt(l.c[C.inFlight][n]) + " / limit " + fmtInt(l.c[C.limit][n]) + " / cap " + fmtInt(l.c[C.cap][n])],
        ["429", fmtInt(l.c[C.r429][n])], ["529", fmtInt(l.c[C.r529][n])], ["5xx", fmtInt(l.c[C.r5xx][n])]].forEach(function (p) {
        var s = el("span", null, p[0] + " "); s.appendChild(el("b", { "data-lane": laneKey(l), "data-k": p[0] }, p[1])); kv.appendChild(s);
      });
      var tbl = el("table");
      var hr = el("tr"); ["bucket", "limit/min", "depth", "level", "sluice", "others"].forEach(function (t, i) { hr.appendChild(el("th", i ? { "class": "num" } : null, t)); });
      tbl.appendChild(hr);
      var any = false;
      for (var d = 0; d < NDIMS; d++) {
        var base = C.bucket0 + d * BCOLS, lim = l.c[base][n];
        if (!(lim > 0)) continue;
        any = true;
        var own = [C.sent, C.inTok, C.outTok, -1][d];
        var ownRate = own >= 0 ? rate(l.c[own], n) : (rate(l.c[C.inTok], n) || 0) + (rate(l.c[C.outTok], n) || 0);
        var others = rate(l.c[base + 3], n);
        var tr = el("tr");
        [DIMS[d], human(lim), fmtNum(l.c[base + 1][n] / (lim / 60), 1) + " s", human(l.c[base + 2][n]), pct(ownRate / lim), pct(others / lim)].forEach(function (t, i) { tr.appendChild(el("td", i ? { "class": "num" } : null, t)); });
        tbl.appendChild(tr);
      }
      var bx = sec.querySelector(".buckets");
      bx.textContent = "";
      if (any) { var sc = el("div", { "class": "scroll" }); sc.appendChild(tbl); bx.appendChild(sc); } else bx.appendChild(el("p", { "class": "note" }, "No rate-limit headers seen yet."));

      later("chart-lane-use-" + k, function () { drawLaneUse(l, k, b, n); });
      later("chart-lane-conc-" + k, function () { drawLaneConc(l, k); });
    });
  }

  // later runs draw now, or, for a chart off screen, when it comes into
  // view: a live update computes only what is seen.
  function later(id, draw) {
    var c = charts[id];
    if (c && !c._visible && $(id) && $(id).contains(c.root)) { c._redo = draw; c._stale = true; return; }
    draw();
  }

  function drawLaneUse(l, k, b, n) {
      var ax = axis();
      var data = [ax.x], series = [];
      var bind = b >= 2 && b <= 5 ? b - 2 : -1;
      var use = [rates(l.c[C.ok]), rates(l.c[C.inTok]), rates(l.c[C.outTok])];
      use.push(use[1].map(function (v, i) { return v == null ? null : v + (use[2][i] || 0); }));
      for (var dd = 0; dd < NDIMS; dd++) {
        var bl = C.bucket0 + dd * BCOLS;
        if (!(l.c[bl][n] > 0)) continue;
        var u = use[dd].map(function (v, i) { var lim = l.c[bl][i]; return v == null || !(lim > 0) ? null : 100 * v / lim; });
        data.push(mapped(ax, u));
        series.push({ label: DIMS[dd], stroke: DIM_COLORS[dd], width: dd === bind ? 3 : 1.3, value: function (u, v) { return v == null ? "–" : v.toFixed(0) + " %"; } });
        var oth = rates(l.c[bl + 3]).map(function (v, i) { var lim = l.c[bl][i]; return v == null || !(lim > 0) ? null : 100 * v / lim; });
        if (oth.some(function (v) { return v > 5; })) {
          data.push(mapped(ax, oth));
          series.push({ label: DIMS[dd] + " by others", stroke: DIM_COLORS[dd], dash: [3, 3], width: 1, value: function (u, v) { return v == null ? "–" : v.toFixed(0) + " %"; } });
        }
      }
      if (series.length === 0) { data.push(mapped(ax, rates(l.c[C.ok]))); series.push({ label: "ok per minute", stroke: DIM_COLORS[0], width: 1.5 }); }
      var strip = function (u) {
        var ctx = u.ctx, dpr = devicePixelRatio || 1, y = u.bbox.top + u.bbox.height - 6 * dpr;
        for (var i = 1; i < TL.t.length; i++) {
          var w = bindingAt(l, i);
          if (w < 0) continue;
          var a = u.valToPos(TL.t[i - 1] / 1000, "x", true), z = u.valToPos(TL.t[i] / 1000, "x", true);
          ctx.fillStyle = WAIT_COLORS[w]; ctx.fillRect(a, y, Math.max(1, z - a), 6 * dpr);
        }
      };
      chart("chart-lane-use-" + k, series, data, { height: 200, draw: [strip], yValues: function (u, vs) { return vs.map(function (v) { return v + " %"; }); } });
  }

  function drawLaneConc(l, k) {
      var ax2 = axis();
      chart("chart-lane-conc-" + k, [
        { label: "in flight", stroke: "#1f6fb4", width: 1.5, fill: "rgba(31,111,180,0.08)" },
        { label: "AIMD limit", stroke: "#9c6ade", width: 1.5 },
        { label: "cap", stroke: "#667085", dash: [5, 4], width: 1 }
      ], [ax2.x, mapped(ax2, l.c[C.inFlight]), mapped(ax2, l.c[C.limit]), mapped(ax2, l.c[C.cap])], { height: 160 });
  }

  // chunks folds the batch events into one bar per chunk.
  function chunks() {
    var by = {}, order = [];
    TL.events.forEach(function (e) {
      if (e.kind !== "batch") return;
      var c = by[e.id];
      if (!c) { c = by[e.id] = { id: e.id, org: e.lane || "", n: e.n || 0, start: e.t, created: null, ended: null, end: null, state: "open", why: "" }; order.push(c); }
      if (e.n) c.n = e.n;
      if (e.batch) c.batch = e.batch;
      if (e.state === "created") c.created = e.t;
      if (e.state === "ended") c.ended = e.t;
      if (["harvested", "abandoned", "dropped", "canceled"].indexOf(e.state) >= 0) { c.end = e.t; c.state = e.state; }
      if (e.state === "cancel") { c.state = "cancel"; c.why = e.why || ""; }
      if (e.why && e.state !== "created") c.why = e.why;
    });
    return order;
  }

  function drawBatch() {
    var cs = chunks();
    $("batch-panel").hidden = cs.length === 0;
    if (!cs.length) return;
    var now = TL.t.length ? TL.t[TL.t.length - 1] : Date.now();
    var colors = { harvested: "#2e7d32", dropped: "#7c8da6", abandoned: "#d9531e", canceled: "#c62828", cancel: "#c62828", open: "#1f6fb4" };
    var xs = [], ys = [];
    cs.forEach(function (c, i) { xs.push(c.start / 1000); ys.push(i + 0.5); });
    var ax = axis();
    var x = ax.x.slice();
    var data = [x, x.map(function () { return null; })];
    var bars = function (u) {
      var ctx = u.ctx, dpr = devicePixelRatio || 1;
      var rowH = Math.max(2 * dpr, Math.min(14 * dpr, u.bbox.height / cs.length - 2 * dpr));
      cs.forEach(function (c, i) {
        var y = u.valToPos(i + 0.5, "y", true) - rowH / 2;
        var a = u.valToPos(c.start / 1000, "x", true), m = u.valToPos((c.ended || c.end || now) / 1000, "x", true), z = u.valToPos((c.end || now) / 1000, "x", true);
        ctx.fillStyle = colors[c.state] || "#1f6fb4";
        ctx.fillRect(a, y, Math.max(2 * dpr, m - a), rowH);
        if (z > m) { ctx.globalAlpha = 0.4; ctx.fillRect(m, y, z - m, rowH); ctx.globalAlpha = 1; }
      });
    };
    chart("chart-batch", [{ label: "chunks", stroke: "transparent", show: true }], data, {
      height: Math.min(420, 90 + cs.length * 14), draw: [bars],
      yScale: { range: function () { return [0, cs.length]; } },
      yValues: function (u, vs) { return vs.map(function (v) { return ""; }); }
    });
    var by = {};
    cs.forEach(function (c) { by[c.state] = (by[c.state] || 0) + 1; });
    $("batch-note").textContent = cs.length + " chunks (" + Object.keys(by).map(function (k) { return by[k] + " " + k; }).join(", ") +
      "). A bar runs from the chunk's create to its batch's end (solid), then to its results being durable (light). Green: harvested; orange: abandoned and re-driven on sync; red: cancelled (stuck, or at its deadline); blue: open.";
  }

  function eventText(e) {
    switch (e.kind) {
      case "route": return "route: " + e.route + (e.share ? " (" + pct(e.share) + " by batch)" : "") + (e.pred ? ", predicted " + fmtDur(e.pred) : "") + (e.why ? " — " + e.why : "");
      case "replan": return "re-plan " + (e.state || "") + ": " + e.route + (e.share ? " (" + pct(e.share) + " of the unsent by batch)" : "") + (e.pred ? ", predicted " + fmtDur(e.pred) + " more" : "") + (e.why ? " — " + e.why : "");
      case "batch": return "batch chunk " + e.id + (e.lane ? " on " + e.lane : "") + ": " + e.state + (e.n ? " (" + e.n + " requests)" : "") + (e.batch ? " " + e.batch : "") + (e.why ? " — " + e.why : "");
      case "key": return "key " + (e.id || "") + (e.lane ? " (org " + e.lane + ")" : "") + ": " + e.state + (e.why ? " " + e.why : "");
      default: return e.kind + (e.state ? " " + e.state : "") + (e.why ? ": " + e.why : "");
    }
  }

  var eventsDrawn = "";
  function drawEvents() {
    var t = $("events");
    var key = TL.events.length + "/" + TL.segments.length;
    if (key === eventsDrawn) return; // no new event: the table stands
    eventsDrawn = key;
    t.textContent = "";
    var t0 = TL.segments.length ? TL.segments[0].start : 0;
    var hr = el("tr"); ["time", "after", "what"].forEach(function (x) { hr.appendChild(el("th", null, x)); }); t.appendChild(hr);
    var evs = TL.events.filter(function (e) { return !(e.kind === "batch" && e.state === "intent"); });
    // A long run has thousands of chunk events: the last MAX_BATCH_ROWS
    // are listed (the chart above shows every chunk).
    var nb = 0, MAX_BATCH_ROWS = 300;
    evs.forEach(function (e) { if (e.kind === "batch") nb++; });
    var skipped = Math.max(0, nb - MAX_BATCH_ROWS);
    if (skipped > 0) {
      var seen = 0;
      evs = evs.filter(function (e) { return e.kind !== "batch" || ++seen > skipped; });
    }
    TL.segments.forEach(function (s, i) { if (i > 0) evs.push({ t: s.start, kind: "resume", why: "process " + s.pid + " continued the run (segment " + s.seg + ")" }); });
    evs.sort(function (a, b) { return a.t - b.t; });
    if (skipped > 0) { var sr = el("tr"); sr.appendChild(el("td", { colspan: 3, "class": "muted" }, skipped + " earlier batch chunk events are not listed; the chart above shows every chunk.")); t.appendChild(sr); }
    if (!evs.length) { var r = el("tr"); r.appendChild(el("td", { colspan: 3, "class": "muted" }, "No event yet.")); t.appendChild(r); }
    evs.forEach(function (e) {
      var r = el("tr");
      r.appendChild(el("td", null, fmtClock(e.t)));
      r.appendChild(el("td", { "class": "num" }, fmtDur((e.t - t0) / 1000)));
      r.appendChild(el("td", { "class": "wrap" }, eventText(e)));
      t.appendChild(r);
    });
  }

  function drawKeys() {
    var t = $("keys"), rows = [];
    if (ST && ST.keys) rows = ST.keys.map(function (k) { return [k.key, k.org, k.state]; });
    else if (REP && REP.keys) rows = REP.keys.map(function (k) { return [k.label + " …" + k.last4, k.org, k.dead ? "dead" : k.suspect ? "suspect" : "live", k.reason || ""]; });
    $("keys-panel").hidden = rows.length === 0;
    t.textContent = "";
    var hr = el("tr"); ["key (label …last 4)", "organization", "state", ""].forEach(function (x) { hr.appendChild(el("th", null, x)); }); t.appendChild(hr);
    rows.forEach(function (k) {
      var r = el("tr");
      r.appendChild(el("td", null, k[0])); r.appendChild(el("td", null, k[1]));
      r.appendChild(el("td", { "class": "state-" + k[2] }, k[2])); r.appendChild(el("td", { "class": "wrap muted" }, k[3] || ""));
      t.appendChild(r);
    });
  }

  function card(label, value, sub, bar, key) {
    var c = el("div", { "class": "card" });
    c.appendChild(el("div", { "class": "label" }, label));
    c.appendChild(el("div", { "class": "value", "data-k": key }, value));
    if (sub) c.appendChild(el("div", { "class": "sub" }, sub));
    if (bar != null) { var b = el("div", { "class": "bar" }), f = el("div"); f.style.width = Math.min(100, Math.max(0, 100 * bar)) + "%"; b.appendChild(f); c.appendChild(b); }
    return c;
  }

  function drawCards() {
    var box = $("cards"), n = TL.t.length - 1, s = TL.segments[0] || {};
    box.textContent = "";
    if (n < 0) { box.appendChild(card("status", ST ? ST.phase : "–", "waiting for the first sample")); return; }
    var total = s.total || 0, done = TL.done[n];
    var t0 = TL.segments.length ? TL.segments[0].start : TL.t[0];
    var elapsed = (TL.t[n] - t0) / 1000;
    var r = firstRouting();
    var rpm = null, eta = null;
    if (ST) { rpm = ST.rate_per_minute; eta = ST.eta_seconds; }
    else { var j = n; while (j > 0 && TL.seg[j - 1] === TL.seg[n] && TL.t[n] - TL.t[j - 1] <= 60000) j--; if (TL.t[n] > TL.t[j]) rpm = (TL.done[n] - TL.done[j]) / ((TL.t[n] - TL.t[j]) / 60000); }
    box.appendChild(card("done", fmtInt(done) + (total ? " / " + fmtInt(total) : ""), total ? pct(done / total) : "", total ? done / total : null, "done"));
    var ended = TL.report || (ST && ST.phase === "ended");
    if (REP) elapsed = REP.wall_seconds; else if (ST) elapsed = ST.elapsed_seconds;
    if (REP) rpm = REP.throughput_rpm;
    box.appendChild(card(ended ? "wall-clock" : "elapsed · ETA", fmtDur(elapsed) + (!ended && eta >= 0 ? " · " + fmtDur(eta) : ""),
      r && r.pred ? "planned " + fmtDur(r.pred) + (r.low && r.high ? " (" + fmtDur(r.low) + "–" + fmtDur(r.high) + ")" : "") : "", null, "elapsed"));
    box.appendChild(card("throughput", rpm == null ? "–" : fmtInt(rpm) + "/min", REP ? "requests over the whole run" : "results over the last minute", null, "rate"));
    var proj = projected(), maxc = TL.segments.length ? TL.segments[TL.segments.length - 1].max_cost : 0;
    var up = unpriced(n);
    box.appendChild(card("cost", up > 0 ? "unknown" : fmtUSD(TL.cost[0][n]), up > 0 ? fmtInt(up) + " unpriced; priced part " + fmtUSD(TL.cost[0][n]) + (maxc > 0 ? " · max " + fmtUSD(maxc) : "") :
      (proj > 0 && !ended ? "projected " + fmtUSD(proj) : "") + (maxc > 0 ? " · max " + fmtUSD(maxc) : ""), maxc > 0 ? TL.cost[0][n] / maxc : null, "cost"));
    var e429 = sumLanes(C.r429)[n] || 0, e529 = sumLanes(C.r529)[n] || 0, e5 = sumLanes(C.r5xx)[n] || 0;
    box.appendChild(card("429 · 529 · 5xx", fmtInt(e429) + " · " + fmtInt(e529) + " · " + fmtInt(e5), "answers retried or given up on", null, "errors"));
    var reps = TL.events.filter(function (e) { return e.kind === "replan" && e.state === "applied"; });
    var cur = reps.length ? reps[reps.length - 1] : r;
    box.appendChild(card("route", cur ? cur.route + (cur.share ? " " + pct(cur.share) : "") : "–", reps.length ? reps.length + " re-plan" + (reps.length > 1 ? "s" : "") : (r ? "as planned" : ""), null, "route"));
    var inflight = sumLanes(C.inFlight)[n] || 0, binf = TL.b[4][n] || 0;
    box.appendChild(card("in flight", fmtInt(inflight) + (binf ? " + " + fmtInt(binf) : ""), binf ? "sync + in batches" : "sync attempts", null, "inflight"));
  }

  // ---- the text report's tables (report, and the live page once ended) ----

  function table(head, rows, numFrom) {
    var t = el("table"), hr = el("tr");
    head.forEach(function (h, i) { hr.appendChild(el("th", i >= numFrom ? { "class": "num" } : null, h)); });
    t.appendChild(hr);
    rows.forEach(function (r) { var tr = el("tr"); r.forEach(function (v, i) { tr.appendChild(el("td", i >= numFrom ? { "class": "num" } : { "class": "wrap" }, v)); }); t.appendChild(tr); });
    var s = el("div", { "class": "scroll" }); s.appendChild(t); return s;
  }

  var reportDrawn = null;
  function drawReport() {
    var box = $("report");
    if (REP === reportDrawn) return; // drawn once: a report does not change
    reportDrawn = REP;
    box.textContent = "";
    if (!REP) return;
    var p = el("section", { "class": "panel", id: "report-summary" });
    p.appendChild(el("h2", null, "Report"));
    var rq = REP.requests || {};
    var rows = [
      ["input → output", REP.input + " → " + REP.output],
      ["lines", fmtInt(rq.total) + " (" + fmtInt(rq.invalid) + " invalid, " + fmtInt(rq.already_done) + " already done, " + fmtInt(rq.redriven) + " driven again)"],
      ["written now", fmtInt(rq.written) + " (" + fmtInt(REP.succeeded) + " succeeded, " + fmtInt(REP.errored.final) + " errored final, " + fmtInt(REP.errored.transport) + " errored after retries, " + fmtInt(rq.from_cache) + " from the cache)"],
      ["wall-clock", fmtDur(REP.wall_seconds) + ", " + fmtInt(REP.throughput_rpm) + " requests/min"],
      ["retries", fmtInt(REP.retries.rate_limited) + " rate-limited (429), " + fmtInt(REP.retries.overloaded) + " overloaded (529), " + fmtInt(REP.retries.failed) + " failed"],
      ["binding limit", REP.binding_limit],
      ["route", (REP.route || "–") + (REP.predicted_seconds ? " (predicted " + fmtDur(REP.predicted_seconds) + ", took " + fmtDur(REP.wall_seconds) + ")" : "") + (REP.route_why ? " — " + REP.route_why : "")],
      ["cost", REP.cost.total.usd == null ? "unknown: " + fmtInt(REP.cost.total.unknown_model_requests) + " requests of models without a price; priced part " + fmtUSD(REP.cost.total.priced_usd) :
        fmtUSD(REP.cost.total.usd) + " (sync " + fmtUSD(REP.cost.total.sync_usd) + ", batch " + fmtUSD(REP.cost.total.batch_usd) + ")"]
    ];
    (REP.replans || []).forEach(function (r) { rows.push(["re-planned at " + fmtDur(r.at_seconds), r.route + (r.batch_share ? " (" + pct(r.batch_share) + " of the unsent by batch)" : "") + ", predicted " + fmtDur(r.predicted_seconds) + " more — " + r.why]); });
    if (REP.cache && REP.cache.mode) rows.push(["response cache (" + REP.cache.mode + ")", fmtInt(REP.cache.hits) + " answered at no cost (saved " + fmtUSD(REP.cache.saved_usd) + "), " + fmtInt(REP.cache.stored) + " stored"]);
    var pc = REP.prompt_cache;
    if (pc && (pc.read_tokens + pc.write_tokens > 0)) rows.push(["prompt cache", fmtInt(pc.read_tokens) + " tokens read, " + fmtInt(pc.write_tokens) + " written; saved " + fmtUSD(pc.saved_usd)]);
    if (REP.stopped) rows.push(["stopped", REP.stopped]);
    p.appendChild(table(["", ""], rows, 9));
    p.appendChild(el("h3", null, "Lanes"));
    var lrows = (REP.lanes || []).filter(function (l) { return l.attempts > 0; }).map(function (l) {
      var bs = (l.buckets || []).map(function (b) { return b.dim + " " + human(b.limit_per_minute) + "/min (" + fmtNum(b.depth_seconds, 1) + " s" + (b.from === "named" ? ", from a 429's message" : "") + ")"; });
      if (l.not_visible && l.not_visible.length) bs.push("not visible: " + l.not_visible.join(", "));
      return [l.org, l.pool, fmtInt(l.ok), pct(l.share), fmtInt(l.rate_limited), fmtInt(l.overloaded), fmtInt(l.failed), l.final_limit + "/" + l.cap, fmtInt(l.mean_latency_ms) + " ms", bs.join("; ") + (l.dead ? " (dead)" : "")];
    });
    var lt = table(["org", "pool", "ok", "share", "429", "529", "5xx", "limit/cap", "latency", "buckets (depth)"], lrows, 2);
    lt.querySelectorAll("tr").forEach(function (tr) { var c = tr.lastChild; if (c) c.className = "wrap"; });
    p.appendChild(lt);
    var b = REP.batch;
    if (b && (b.Created || b.Adopted)) {
      p.appendChild(el("h3", null, "Batches"));
      p.appendChild(table(["created", "adopted", "ended", "cancelled", "given up", "re-routed", "results"], [[fmtInt(b.Created), fmtInt(b.Adopted), fmtInt(b.Ended), fmtInt(b.Cancelled), fmtInt(b.GivenUp), fmtInt(b.Rerouted), fmtInt(b.Results)]], 0));
    }
    box.appendChild(p);
    if (JUDGE) drawJudge(box);
  }

  function drawJudge(box) {
    var p = el("section", { "class": "panel", id: "judge" });
    p.appendChild(el("h2", null, "Verdicts"));
    var s = JUDGE.summary || {}, classes = ["ok", "parse_error", "truncated", "refused", "invalid_request", "transport"];
    p.appendChild(el("p", { "class": "note" }, "Verdict classes per group: ok is a parsed verdict; parse_error, truncated and refused are answers that did not give one; invalid_request and transport are requests that got no answer."));
    p.appendChild(table(["group", "n"].concat(classes), (s.groups || []).map(function (g) {
      return [g.group, fmtInt(g.n)].concat(classes.map(function (c) { return fmtInt((g.classes || {})[c] || 0); }));
    }), 1));
    (JUDGE.distributions || []).forEach(function (d, i) {
      p.appendChild(el("h3", null, d.field + " — distribution by group"));
      var node = el("div", { "class": "chart", id: "chart-judge-" + i });
      p.appendChild(node);
      box.appendChild(p);
      var x = d.bins.map(function (b) { return b.lo; });
      var data = [x], series = [];
      var palette = ["#1f6fb4", "#d9531e", "#2e9e6b", "#c2185b", "#9c6ade", "#b26a00", "#7c8da6"];
      d.groups.forEach(function (g, k) {
        data.push(g.counts);
        series.push({ label: g.group + " (mean " + fmtNum(g.mean, 1) + ", n " + g.n + ")", stroke: palette[k % palette.length], width: 1.5,
          fill: k === 0 ? "rgba(31,111,180,0.08)" : undefined, paths: uPlot.paths.stepped({ align: 1 }) });
      });
      var opts = { width: width(node), height: 200, scales: { x: { time: false } }, series: [{ label: d.field }].concat(series),
        axes: [{ label: d.field }, { size: 50 }], legend: { live: false } };
      node.textContent = "";
      charts[node.id] = new uPlot(opts, data, node);
      charts[node.id]._sluiceData = data;
    });
    box.appendChild(p);
  }

  // ---- putting it together ----

  function header() {
    var seg = TL && TL.segments.length ? TL.segments[0] : null;
    $("cmd").textContent = seg ? seg.cmd : (ST ? ST.cmd : "");
    var phase = ST ? ST.phase : (TL && TL.report ? (TL.report.status || "ended") : "recorded");
    if (TL && TL.report && TL.report.status) phase = TL.report.status;
    var b = $("phase"); b.textContent = phase; b.className = "badge " + phase;
    var title = (embedded && embedded.title) || "";
    $("what").textContent = REP && !JUDGE ? REP.input + " → " + REP.output : title.replace(/^sluice [a-z]+: /, ""); // a judge's report names its engine files: the title names the user's
    var n = TL ? TL.t.length - 1 : -1;
    $("updated").textContent = n >= 0 ? (LIVE ? "updated " : "last sample ") + fmtClock(TL.t[n]) : "";
    if (TL && TL.segments.length > 1) $("footer").textContent = TL.segments.length + " segments: the run was resumed " + (TL.segments.length - 1) + " time" + (TL.segments.length > 2 ? "s" : "") + "; grey bands are the time no process ran it.";
  }

  var drawMs = [];
  function drawAll() {
    if (!TL) return;
    var t0 = performance.now();
    draw();
    drawMs.push(performance.now() - t0);
  }

  function draw() {
    if (TL.report) {
      REP = TL.report.report || REP;
      JUDGE = TL.report.judge || JUDGE;
    }
    header();
    drawCards();
    drawProgress(); drawCost(); drawErrors(); drawLanes(); drawBatch(); drawEvents(); drawKeys(); drawReport();
    document.body.setAttribute("data-points", TL.t.length);
    if (drawMs.length === 0) fit(); // the layout settled: size the charts once (and on resize)
  }

  // fit sizes every chart to its box (after the layout settled).
  function fit() {
    for (var id in charts) {
      var n = $(id);
      if (n && Math.abs(width(n) - charts[id].width) > 1) charts[id].setSize({ width: width(n), height: charts[id].height });
    }
  }

  function showError(msg) {
    if (errors.indexOf(msg) >= 0) return;
    errors.push(msg);
    var d = el("div", { "class": "error" }, msg);
    document.querySelector("main").prepend(d);
  }

  function api(path) {
    var sep = path.indexOf("?") >= 0 ? "&" : "?";
    return fetch(path + (token ? sep + "token=" + encodeURIComponent(token) : ""), { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r.json();
    });
  }

  var lastFull = 0, polling = false;
  function poll() {
    if (polling) return;
    polling = true;
    var full = !TL || Date.now() - lastFull > 5 * 60e3;
    var since = !full && TL.t.length ? TL.t[TL.t.length - 1] : 0;
    Promise.all([api("/api/status"), api("/api/history" + (since ? "?since=" + since : ""))]).then(function (res) {
      ST = res[0];
      if (full) { TL = filled(res[1]); lastFull = Date.now(); } else merge(res[1]);
      drawAll();
    }).catch(function (e) {
      if (ST && ST.phase !== "ended") showError("The run's process does not answer (" + e.message + "): it may have ended. The report beside the results holds the whole run.");
    }).then(function () { polling = false; });
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(fit, 150);
  });

  // For tests and the curious: what each chart holds, and the last point.
  window.sluiceView = {
    charts: function () {
      var out = {};
      for (var id in charts) {
        var d = charts[id]._sluiceData, n = 0;
        for (var s = 1; s < d.length; s++) d[s].forEach(function (v) { if (v != null) n++; });
        out[id] = n;
      }
      return out;
    },
    // drawn: for each chart, whether its canvas holds a line: a pixel
    // inside the plot area in a series' colour, not only grid and axes.
    drawn: function () {
      var out = {};
      for (var id in charts) out[id] = inked(charts[id]);
      return out;
    },
    drawMs: function () { return drawMs; },
    redraw: function () { drawAll(); return drawMs[drawMs.length - 1]; },
    last: function () { var n = TL ? TL.t.length - 1 : -1; return n < 0 ? null : { t: TL.t[n], done: TL.done[n], cost: TL.cost[0][n] }; }
  };

  if (LIVE) {
    // Every 2 s, or less often when drawing takes long (a day of history
    // on a slow phone): the page stays responsive.
    var tick = function () {
      poll();
      var last = drawMs.length ? drawMs[drawMs.length - 1] : 0;
      setTimeout(tick, Math.max(2000, 5 * last));
    };
    tick();
  } else {
    TL = filled(embedded.timeline);
    drawAll();
  }
})();
