/* chakra report renderer: draws the blocks of the embedded report document.
   No dependencies and no network: every chart is built here from the JSON in #report-data. */
"use strict";
(function () {
  const report = window.__report = { timelines: [], tables: [], renderBlock: null };
  const DASH = "\u2013";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
    "#86bcb6", "#bab0ac", "#8cd17d", "#a0cbe8"];
  const HIGHLIGHT = "#d4007a";
  const LINE_COLORS = ["#333333", "#e15759", "#7f7f7f", "#4e79a7"];
  const NUMERIC = { int: 1, float: 1, us: 1, ns: 1, bytes: 1, pct: 1 };
  const FONT = "11px system-ui, -apple-system, \"Segoe UI\", Roboto, \"Helvetica Neue\", Arial, sans-serif";
  // The SVG namespace, taken from a parsed element so that no URL text appears in the page.
  const SVG_NS = (function () { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();

  /* ---------------- formatting ---------------- */
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const color = (i) => PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length];
  function sig3(x) { const a = Math.abs(x); return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2); }
  function fmtDuration(us) {
    if (!isNum(us)) return DASH;
    const a = Math.abs(us);
    if (a === 0) return "0";
    if (a < 1) return sig3(us * 1e3) + " ns";
    if (a < 1e3) return sig3(us) + " \u00b5s";
    if (a < 1e6) return sig3(us / 1e3) + " ms";
    return sig3(us / 1e6) + " s";
  }
  function fmtBytes(b) {
    if (!isNum(b)) return DASH;
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let i = 0, x = b;
    while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return (i === 0 ? String(Math.round(x)) : sig3(x)) + " " + units[i];
  }
  function fmtInt(v) { return Math.round(v).toLocaleString("en-US"); }
  function fmtFloat(v) {
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e9 || a < 1e-3) return v.toExponential(2);
    if (a >= 1e3) return v.toLocaleString("en-US", { maximumFractionDigits: 1 });
    return String(Number(v.toPrecision(4)));
  }
  function fmtPct(v) { const p = v * 100; return (p !== 0 && Math.abs(p) < 1 ? p.toFixed(2) : p.toFixed(1)) + "%"; }
  function fmtAuto(v) { return Number.isInteger(v) ? fmtInt(v) : fmtFloat(v); }
  function fmtValue(v, fmt) {
    if (v === null || v === undefined || (typeof v === "number" && !isFinite(v))) return DASH;
    if (typeof v !== "number") return String(v);
    switch (fmt) {
      case "int": return fmtInt(v);
      case "float": return fmtFloat(v);
      case "us": return fmtDuration(v);
      case "ns": return fmtDuration(v / 1e3);
      case "bytes": return fmtBytes(v);
      case "pct": return fmtPct(v);
      default: return fmtAuto(v);
    }
  }
  /** A value with a free-form chart unit: known units get scaled, others are appended. */
  function fmtUnit(v, unit) {
    if (!isNum(v)) return DASH;
    const u = (unit || "").toLowerCase();
    if (u === "us" || u === "\u00b5s" || u === "\u03bcs") return fmtDuration(v);
    if (u === "ns") return fmtDuration(v / 1e3);
    if (u === "ms") return fmtDuration(v * 1e3);
    if (u === "s") return fmtDuration(v * 1e6);
    if (u === "bytes" || u === "b") return fmtBytes(v);
    if (u === "pct") return fmtPct(v);
    return fmtAuto(v) + (unit ? " " + unit : "");
  }
  /** Short axis labels: SI suffixes for large values. */
  function fmtCompact(v) {
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e3) {
      const sfx = ["", "k", "M", "G", "T", "P", "E"];
      const i = Math.min(sfx.length - 1, Math.floor(Math.log10(a) / 3 + 1e-9));
      return Number((v / Math.pow(1000, i)).toPrecision(3)) + sfx[i];
    }
    if (a >= 1e-3) return String(Number(v.toPrecision(3)));
    return v.toExponential(0);
  }
  function fmtAxis(v, unit) {
    const u = (unit || "").toLowerCase();
    return ["us", "\u00b5s", "\u03bcs", "ns", "ms", "s", "bytes", "b", "pct"].includes(u) ? fmtUnit(v, unit) : fmtCompact(v);
  }
  function clip(text, maxChars) {
    text = String(text);
    return text.length <= maxChars ? text : text.slice(0, Math.max(1, maxChars - 1)) + "\u2026";
  }
  let measureCtx = null;
  function textWidth(text, font) {
    if (!measureCtx) measureCtx = document.createElement("canvas").getContext("2d");
    measureCtx.font = font || FONT;
    return measureCtx.measureText(String(text)).width;
  }
  /** `text`, shortened with an ellipsis to fit `px` pixels. */
  function fitText(text, px, font) {
    text = String(text);
    if (textWidth(text, font) <= px) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (textWidth(text.slice(0, mid) + "\u2026", font) <= px) lo = mid; else hi = mid - 1; }
    return lo ? text.slice(0, lo) + "\u2026" : "";
  }

  /* ---------------- DOM, SVG, tooltip ---------------- */
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs, parent) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function svgText(parent, x, y, text, attrs) {
    const t = svgEl("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = text;
    return t;
  }
  function newChart(box, w, h) {
    return svgEl("svg", { class: "chart", width: w, height: h, viewBox: "0 0 " + w + " " + h }, box);
  }
  let tipEl = null;
  function showTip(ev, lines) {
    if (!tipEl) { tipEl = el("div", "tip"); document.body.appendChild(tipEl); }
    tipEl.replaceChildren.apply(tipEl, lines.map((l, i) => el("div", i ? "" : "tip-h", l)));
    tipEl.style.display = "block";
    const w = tipEl.offsetWidth, h = tipEl.offsetHeight;
    let x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = ev.clientX - w - 10;
    if (y + h > window.innerHeight - 4) y = ev.clientY - h - 10;
    tipEl.style.left = Math.max(2, x) + "px";
    tipEl.style.top = Math.max(2, y) + "px";
  }
  function hideTip() { if (tipEl) tipEl.style.display = "none"; }
  /** One mousemove handler per chart: `describe(target)` returns tooltip lines or null. */
  function hover(node, describe) {
    node.addEventListener("mousemove", (ev) => { const lines = describe(ev.target, ev); if (lines) showTip(ev, lines); else hideTip(); });
    node.addEventListener("mouseleave", hideTip);
  }
  function legend(box, items) {
    const lg = el("div", "legend");
    for (const it of items) {
      const span = el("span"), sw = el("span", "sw" + (it[2] ? " " + it[2] : ""));
      if (it[2] !== "outline") sw.style.background = it[1];
      span.append(sw, String(it[0]));
      lg.appendChild(span);
    }
    box.appendChild(lg);
  }
  function blockTitle(box, text) { if (text) box.appendChild(el("h3", "block-title", text)); }
  /** True (after saying so in the box) when a chart has nothing to draw. */
  function empty(box, n) { if (n) return false; box.appendChild(el("div", "note", "(no data)")); return true; }
  function boxWidth(box) { return Math.round(Math.max(360, Math.min(1600, box.clientWidth || 900))); }
  function labelWidth(labels, maxW) {
    let w = 24;
    for (const l of labels) w = Math.max(w, textWidth(l));
    return Math.round(Math.min(w + 14, maxW));
  }

  /* ---------------- scales ---------------- */
  function niceStep(span, n) {
    const raw = span / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  function ticks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const s = niceStep(hi - lo, n), k0 = Math.ceil(lo / s - 1e-9), out = [];
    for (let k = k0; k * s <= hi + s * 1e-9; k++) out.push(k * s);
    return out;
  }
  /** Bytes tick at round multiples of KiB, MiB, ...: the scale to divide by first. */
  function unitScale(lo, hi, unit) {
    const u = (unit || "").toLowerCase(), m = Math.max(Math.abs(lo), Math.abs(hi));
    return (u === "bytes" || u === "b") && m >= 1024 ? Math.pow(1024, Math.floor(Math.log(m) / Math.log(1024))) : 1;
  }
  function unitTicks(lo, hi, n, unit) { const s = unitScale(lo, hi, unit); return ticks(lo / s, hi / s, n).map((v) => v * s); }
  function logTicks(lo, hi) {
    const a = Math.ceil(Math.log10(lo) - 1e-9), b = Math.floor(Math.log10(hi) + 1e-9), every = Math.max(1, Math.ceil((b - a + 1) / 10));
    const out = [];
    for (let e = a; e <= b; e += every) out.push(Math.pow(10, e));
    return out;
  }
  function linScale(lo, hi, a, b) { const k = (b - a) / ((hi - lo) || 1); return (v) => a + (v - lo) * k; }
  function logScale(lo, hi, a, b) {
    const l0 = Math.log10(lo), k = (b - a) / ((Math.log10(hi) - l0) || 1);
    return (v) => a + (Math.log10(v) - l0) * k;
  }
  /** Domain [lo, hi] of finite values, rounded outwards (to powers of ten on a log axis). */
  function domain(values, log, includeZero, unit) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) if (isNum(v) && (!log || v > 0)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    if (lo > hi) return log ? [1, 10] : [0, 1];
    if (log) return [Math.pow(10, Math.floor(Math.log10(lo))), Math.pow(10, Math.max(Math.ceil(Math.log10(hi)), Math.floor(Math.log10(lo)) + 1))];
    if (includeZero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
    if (lo === hi) { lo -= 1; hi += 1; }
    const u = unitScale(lo, hi, unit), s = niceStep((hi - lo) / u, 6) * u;
    return [Math.floor(lo / s) * s, Math.ceil(hi / s) * s];
  }
  function mix(c0, c1, t) {
    const p = (c, i) => parseInt(c.slice(1 + 2 * i, 3 + 2 * i), 16);
    const ch = (i) => Math.round(p(c0, i) + (p(c1, i) - p(c0, i)) * t);
    return "rgb(" + ch(0) + "," + ch(1) + "," + ch(2) + ")";
  }
  function ramp(stops, t) {
    t = Math.max(0, Math.min(1, t));
    const x = t * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x));
    return mix(stops[i], stops[i + 1], x - i);
  }

  /* ---------------- blocks ---------------- */
  function renderText(box, b) {
    for (const para of String(b.text).split(/\n[ \t]*\n/)) if (para.trim()) box.appendChild(el("p", b.warn ? "text warn" : "text", para.trim()));
  }

  function renderKv(box, b) {
    const grid = el("div", "kv");
    for (const item of b.items) {
      const card = el("div", "kv-card"), v = item[1];
      card.append(el("div", "kv-label", item[0]), el("div", "kv-value", typeof v === "number" ? fmtAuto(v) : fmtValue(v)));
      grid.appendChild(card);
    }
    box.appendChild(grid);
  }

  function compareCells(a, b) {
    const na = a === null || a === undefined, nb = b === null || b === undefined;
    if (na || nb) return na && nb ? 0 : na ? 1 : -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    if (typeof a === "number") return -1;
    if (typeof b === "number") return 1;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }

  function renderTable(box, b) {
    const cols = b.columns, limit = b.max_rows;
    // a bar column's cells carry a bar scaled to the column's largest magnitude
    const barMax = {};
    for (const c of cols) if (c.bar) barMax[c.key] = b.rows.reduce((m, r) => (isNum(r[c.key]) ? Math.max(m, Math.abs(r[c.key])) : m), 0);
    const state = { key: null, dir: 0, expanded: false, rows: b.rows.slice() };
    const table = el("table", "data"), head = el("tr"), tbody = el("tbody"), thead = el("thead");
    if (b.caption) table.appendChild(el("caption", null, b.caption));
    const ths = cols.map((c) => {
      const th = el("th", NUMERIC[c.format] ? "num" : "", c.label);
      th.tabIndex = 0;
      th.title = "Sort by " + c.label;
      th.addEventListener("click", () => sortBy(c));
      th.addEventListener("keydown", (ev) => { if (ev.key === "Enter") sortBy(c); });
      head.appendChild(th);
      return th;
    });
    thead.appendChild(head);
    table.append(thead, tbody);
    const wrap = el("div", "table-wrap");
    wrap.appendChild(table);
    box.appendChild(wrap);
    const more = isNum(limit) && state.rows.length > limit ? el("button", "more") : null;
    if (more) { more.addEventListener("click", () => { state.expanded = !state.expanded; fill(); }); box.appendChild(more); }

    function fill() {
      const n = more && !state.expanded ? limit : state.rows.length, frag = document.createDocumentFragment();
      for (let i = 0; i < n; i++) {
        const tr = el("tr"), row = state.rows[i];
        for (const c of cols) {
          const text = fmtValue(row[c.key], c.format), td = el("td", NUMERIC[c.format] ? "num" : "", text);
          if (text.length > 60) td.title = text;
          if (barMax[c.key] > 0 && isNum(row[c.key])) {
            const bar = el("span", "cell-bar");
            bar.style.width = (100 * Math.abs(row[c.key]) / barMax[c.key]).toFixed(0) + "px";
            td.prepend(bar);
          }
          tr.appendChild(td);
        }
        frag.appendChild(tr);
      }
      tbody.replaceChildren(frag);
      if (more) more.textContent = state.expanded ? "Show the first " + limit + " rows" : "Show all " + state.rows.length + " rows";
      ths.forEach((th, i) => { th.classList.toggle("sort-asc", cols[i].key === state.key && state.dir > 0); th.classList.toggle("sort-desc", cols[i].key === state.key && state.dir < 0); });
    }
    function sortBy(c) {
      // Numbers first sort largest-first (what one looks for in a profile), text A to Z; a second click reverses.
      state.dir = state.key === c.key ? -state.dir : NUMERIC[c.format] ? -1 : 1;
      state.key = c.key;
      const dir = state.dir, k = c.key;
      state.rows.sort((x, y) => {
        const a = x[k], z = y[k];
        if (a === null || a === undefined || z === null || z === undefined) return compareCells(a, z);
        return dir * compareCells(a, z);
      });
      fill();
    }
    fill();
    report.tables.push(state);
  }

  function renderBars(box, b) {
    blockTitle(box, b.title);
    const cats = b.categories, series = b.series, stacked = !!b.stacked, unit = b.unit || "";
    if (empty(box, cats.length * series.length)) return;
    if (series.length > 1) legend(box, series.map((s, i) => [s.name, color(i)]));
    let lo = 0, hi = 0;
    cats.forEach((_, i) => {
      let pos = 0, neg = 0;
      for (const s of series) {
        const v = s.values[i];
        if (!isNum(v)) continue;
        if (stacked) { if (v >= 0) pos += v; else neg += v; } else { pos = Math.max(pos, v); neg = Math.min(neg, v); }
      }
      hi = Math.max(hi, pos); lo = Math.min(lo, neg);
    });
    const dom = domain([lo, hi], false, true, unit);
    const W = boxWidth(box), labelW = labelWidth(cats, W * 0.35), right = 80, top = 6;
    const nSub = stacked ? 1 : series.length, sub = nSub === 1 ? 16 : Math.max(5, Math.min(12, Math.floor(40 / nSub)));
    const rowH = sub * nSub + 6, H = top + cats.length * rowH + 24;
    const x = linScale(dom[0], dom[1], labelW, W - right), chart = newChart(box, W, H);
    for (const t of unitTicks(dom[0], dom[1], Math.max(2, Math.floor((W - labelW - right) / 90)), unit)) {
      svgEl("line", { class: t === 0 ? "axis" : "grid", x1: x(t), x2: x(t), y1: top, y2: H - 20 }, chart);
      svgText(chart, x(t), H - 6, fmtAxis(t, unit), { "text-anchor": "middle" });
    }
    cats.forEach((cat, i) => {
      const y0 = top + i * rowH + 3;
      svgText(chart, labelW - 6, y0 + (rowH - 6) / 2 + 4, fitText(cat, labelW - 10), { "text-anchor": "end" }).appendChild(svgEl("title", {})).textContent = String(cat);
      let pos = 0, neg = 0, total = 0;
      series.forEach((s, j) => {
        const v = s.values[i];
        if (!isNum(v) || v === 0) return;
        total += v;
        let a, z;
        if (stacked) { if (v >= 0) { a = pos; z = pos += v; } else { z = neg; a = neg += v; } } else { a = Math.min(0, v); z = Math.max(0, v); }
        const y = stacked ? y0 : y0 + j * sub;
        svgEl("rect", { class: "bar", x: x(a), y: y, width: Math.max(0.5, x(z) - x(a)), height: Math.max(1, sub - 1), fill: color(j), "data-i": i, "data-j": j }, chart);
      });
      if (nSub === 1 && (series.length === 1 || stacked)) {
        const end = total >= 0 ? x(stacked ? pos : Math.max(0, total)) : x(0);
        svgText(chart, end + 4, y0 + sub / 2 + 4, fmtUnit(total, unit), { class: "note" });
      }
    });
    hover(chart, (t) => {
      if (!t.dataset || t.dataset.i === undefined) return null;
      const i = +t.dataset.i, j = +t.dataset.j, lines = [String(cats[i]), series[j].name + ": " + fmtUnit(series[j].values[i], unit)];
      if (stacked && series.length > 1) lines.push("total: " + fmtUnit(series.reduce((a, s) => a + (isNum(s.values[i]) ? s.values[i] : 0), 0), unit));
      return lines;
    });
  }

  function renderHeatmap(box, b) {
    blockTitle(box, b.title);
    const xs = b.x, ys = b.y, vals = b.values, unit = b.unit || "", log = b.scale === "log";
    if (empty(box, xs.length * ys.length)) return;
    const center = isNum(b.center) && (!log || b.center > 0) ? b.center : null;
    const f = log ? (v) => (v > 0 ? Math.log10(v) : NaN) : (v) => v;
    let lo = Infinity, hi = -Infinity;
    for (const row of vals) for (const v of row) { const t = isNum(v) ? f(v) : NaN; if (isFinite(t)) { lo = Math.min(lo, t); hi = Math.max(hi, t); } }
    if (lo > hi) { lo = 0; hi = 1; }
    const c = center === null ? 0 : f(center), spread = Math.max(Math.abs(lo - c), Math.abs(hi - c)) || 1;
    const SEQ = ["#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"];
    const DIV = ["#2166ac", "#92c5de", "#f7f7f7", "#f4a582", "#b2182b"];
    const shade = (t) => center === null ? ramp(SEQ, hi > lo ? (t - lo) / (hi - lo) : 0.5) : ramp(DIV, 0.5 + (t - c) / spread / 2);
    const fill = (v) => { if (!isNum(v)) return "#e9ecef"; const t = f(v); return shade(isFinite(t) ? t : lo); };
    const dark = (v) => { if (!isNum(v)) return false; const t = isFinite(f(v)) ? f(v) : lo; return center === null ? (t - lo) / ((hi - lo) || 1) > 0.6 : Math.abs(t - c) / spread > 0.6; };

    const W = boxWidth(box), labelW = labelWidth(ys, W * 0.3), nx = xs.length, ny = ys.length;
    const cw = Math.max(3, Math.min(56, (W - labelW - 20) / Math.max(1, nx)));
    const ch = ny <= 40 ? Math.max(14, Math.min(28, cw)) : Math.max(3, Math.min(28, cw));
    const xLen = xs.reduce((m, s) => Math.max(m, textWidth(s)), 6), rotate = xLen + 4 > cw;
    const top = rotate ? Math.min(130, xLen * 0.82 + 14) : 18, gridH = ny * ch, H = top + gridH + 44;
    const chart = newChart(box, Math.max(W, labelW + nx * cw + 10), H);
    const kx = Math.max(1, Math.ceil((rotate ? 12 : 40) / cw)), ky = Math.max(1, Math.ceil(12 / ch));
    xs.forEach((s, j) => {
      if (j % kx) return;
      const cx = labelW + (j + 0.5) * cw;
      if (rotate) svgText(chart, cx + 3, top - 4, fitText(s, 140), { transform: "rotate(-55 " + (cx + 3) + " " + (top - 4) + ")" });
      else svgText(chart, cx, top - 5, fitText(s, cw * kx - 2), { "text-anchor": "middle" });
    });
    ys.forEach((s, i) => { if (!(i % ky)) svgText(chart, labelW - 5, top + (i + 0.5) * ch + 4, fitText(s, labelW - 8), { "text-anchor": "end" }); });
    const cellFont = FONT.replace("11px", "10px");
    const cellText = (v) => { const t = fmtUnit(v, unit); return textWidth(t, cellFont) <= cw - 4 ? t : fmtCompact(v); };
    const showValues = cw >= 40 && ch >= 16 && nx * ny <= 600;
    vals.forEach((row, i) => {
      const g = svgEl("g", {}, chart);
      row.forEach((v, j) => {
        svgEl("rect", { class: "cell", x: labelW + j * cw, y: top + i * ch, width: Math.max(1, cw - (cw > 6 ? 1 : 0)), height: Math.max(1, ch - (ch > 6 ? 1 : 0)), fill: fill(v), "data-i": i, "data-j": j }, g);
        if (showValues && isNum(v)) svgText(g, labelW + (j + 0.5) * cw, top + (i + 0.5) * ch + 4, cellText(v), { "text-anchor": "middle", "pointer-events": "none", style: "font-size:10px;fill:" + (dark(v) ? "#fff" : "#222") });
      });
    });
    // color legend: a strip of small rects (no gradient ids needed) with min, center and max
    const ly = top + gridH + 14, lw = 220, n = 44, l0 = center === null ? lo : c - spread, l1 = center === null ? hi : c + spread;
    for (let k = 0; k < n; k++) svgEl("rect", { x: labelW + k * lw / n, y: ly, width: lw / n + 0.5, height: 10, fill: shade(l0 + (l1 - l0) * (k + 0.5) / n) }, chart);
    const inv = (t) => (log ? Math.pow(10, t) : t);
    svgText(chart, labelW, ly + 24, fmtUnit(inv(l0), unit));
    svgText(chart, labelW + lw, ly + 24, fmtUnit(inv(l1), unit), { "text-anchor": "end" });
    if (center !== null) svgText(chart, labelW + lw / 2, ly + 24, fmtUnit(center, unit), { "text-anchor": "middle" });
    svgText(chart, labelW + lw + 12, ly + 9, (log ? "log scale" : "linear scale") + (center !== null ? ", centered" : ""), { class: "note" });
    hover(chart, (t) => {
      if (!t.dataset || t.dataset.i === undefined) return null;
      const i = +t.dataset.i, j = +t.dataset.j;
      return [fmtUnit(vals[i][j], unit), "x: " + xs[j], "y: " + ys[i]];
    });
  }

  function renderScatter(box, b) {
    blockTitle(box, b.title);
    const pts = b.points, groups = b.groups || [], labels = b.labels || [], lines = b.lines || [], lx = !!b.log_x, ly = !!b.log_y;
    if (empty(box, pts.length + lines.length)) return;
    const items = groups.map((g, i) => [g, color(i)]);
    lines.forEach((l, i) => items.push([l.name, LINE_COLORS[i % LINE_COLORS.length], "line"]));
    if (items.length) legend(box, items);
    const xsAll = pts.map((p) => p[0]), ysAll = pts.map((p) => p[1]);
    for (const l of lines) for (const p of l.points) { xsAll.push(p[0]); ysAll.push(p[1]); }
    const dx = domain(xsAll, lx, false), dy = domain(ysAll, ly, false);
    const W = Math.min(boxWidth(box), 980), H = Math.round(Math.min(520, Math.max(300, W * 0.55)));
    const m = { l: 70, r: 24, t: 10, b: 46 };
    const sx = (lx ? logScale : linScale)(dx[0], dx[1], m.l, W - m.r), sy = (ly ? logScale : linScale)(dy[0], dy[1], H - m.b, m.t);
    const chart = newChart(box, W, H);
    for (const t of lx ? logTicks(dx[0], dx[1]) : ticks(dx[0], dx[1], 7)) {
      svgEl("line", { class: "grid", x1: sx(t), x2: sx(t), y1: m.t, y2: H - m.b }, chart);
      svgText(chart, sx(t), H - m.b + 15, fmtCompact(t), { "text-anchor": "middle" });
    }
    for (const t of ly ? logTicks(dy[0], dy[1]) : ticks(dy[0], dy[1], 6)) {
      svgEl("line", { class: "grid", x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t) }, chart);
      svgText(chart, m.l - 6, sy(t) + 4, fmtCompact(t), { "text-anchor": "end" });
    }
    svgEl("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "none", class: "axis" }, chart);
    if (b.x_label) svgText(chart, (m.l + W - m.r) / 2, H - 8, b.x_label, { "text-anchor": "middle", class: "title" });
    if (b.y_label) svgText(chart, 14, (m.t + H - m.b) / 2, b.y_label, { "text-anchor": "middle", class: "title", transform: "rotate(-90 14 " + (m.t + H - m.b) / 2 + ")" });
    const ok = (p) => isNum(p[0]) && isNum(p[1]) && (!lx || p[0] > 0) && (!ly || p[1] > 0);
    lines.forEach((l, i) => {
      const p = l.points.filter(ok);
      if (p.length < 2) return;
      const poly = svgEl("polyline", { points: p.map((q) => sx(q[0]).toFixed(1) + "," + sy(q[1]).toFixed(1)).join(" "), fill: "none", stroke: LINE_COLORS[i % LINE_COLORS.length], "stroke-width": 2, "data-line": i }, chart);
      poly.appendChild(svgEl("title", {})).textContent = l.name;
    });
    let skipped = 0;
    pts.forEach((p, k) => {
      if (!ok(p)) { skipped++; return; }
      svgEl("circle", { class: "pt", cx: sx(p[0]), cy: sy(p[1]), r: 4, fill: isNum(p[3]) ? color(p[3]) : "#666", "fill-opacity": 0.85, stroke: "#fff", "data-k": k }, chart);
    });
    if (skipped) box.appendChild(el("div", "note", skipped + " point(s) not drawn (missing or not positive on a log axis)"));
    hover(chart, (t) => {
      if (!t.dataset || t.dataset.k === undefined) return null;
      const p = pts[+t.dataset.k];
      const head = isNum(p[2]) ? labels[p[2]] : "point " + t.dataset.k;
      const out = [String(head)];
      if (isNum(p[3])) out.push("group: " + groups[p[3]]);
      out.push((b.x_label || "x") + ": " + fmtFloat(p[0]), (b.y_label || "y") + ": " + fmtFloat(p[1]));
      return out;
    });
  }
  /** Per row: its samples as dots (outliers red), the median's confidence interval as a band with
      the median as a bar, and the mean's interval as a whisker below; one axis for all rows. */
  function renderIntervals(box, b) {
    blockTitle(box, b.title);
    const rows = b.rows, unit = b.unit || "", log = !!b.log, groups = b.groups || [];
    let lo = Infinity, hi = -Infinity;
    for (const r of rows) for (const v of r.samples) if (!log || v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (empty(box, lo <= hi ? rows.length : 0)) return;
    if (groups.length > 1) legend(box, groups.map((g, i) => [g, color(i)]));
    if (log) { lo /= 1.15; hi *= 1.15; } else { const pad = hi > lo ? 0.04 * (hi - lo) : 0.05 * Math.abs(hi) || 1e-9; lo -= pad; hi += pad; }
    const W = boxWidth(box), labelW = labelWidth(rows.map((r) => r.label).concat(rows.map((r) => r.note)), W * 0.3);
    const rowH = 56, top = 8, right = 20, axisY = top + rowH * rows.length + 4, H = axisY + 36;
    const sx = (log ? logScale : linScale)(lo, hi, labelW, W - right);
    // a CI's end may lie off the axis (below 0 on a log one): drawn at its edge
    const x = (v) => sx(Math.min(Math.max(v, lo), hi));
    const chart = newChart(box, W, H);
    chart.classList.add("intervals");
    rows.forEach((r, k) => {
      const cy = top + k * rowH + rowH * 0.42, c = isNum(r.group) ? color(r.group) : color(0), st = { fill: c, "fill-opacity": 0.18 };
      svgText(chart, labelW - 8, cy + 4, fitText(r.label, labelW - 10), { "text-anchor": "end" }).appendChild(svgEl("title", {})).textContent = String(r.label);
      if (r.note) svgText(chart, labelW - 8, cy + 18, fitText(r.note, labelW - 10), { "text-anchor": "end", class: "note" });
      const mci = r.median_ci, wci = r.mean_ci;
      if (mci && isNum(mci[0]) && isNum(mci[1])) svgEl("rect", Object.assign({ class: "ci-median", x: x(mci[0]), y: cy - 16, width: Math.max(x(mci[1]) - x(mci[0]), 1), height: 32, "data-r": k, "data-ci": "median" }, st), chart);
      const out = new Set(r.outliers);
      r.samples.forEach((v, i) => {
        const jitter = ((i * 0.6180339887) % 1 - 0.5) * 24;
        svgEl("circle", { class: "pt", cx: x(v), cy: cy + jitter, r: 2.2, fill: out.has(i) ? "#d1342f" : c, "fill-opacity": 0.55, "data-r": k, "data-i": i }, chart);
      });
      if (isNum(r.median)) svgEl("line", { class: "median", x1: x(r.median), x2: x(r.median), y1: cy - 18, y2: cy + 18, stroke: c, "stroke-width": 3 }, chart);
      if (wci && isNum(wci[0]) && isNum(wci[1])) {
        const a = x(wci[0]), z = x(wci[1]), y = cy + 22;
        svgEl("path", { class: "ci-mean", d: "M" + a + "," + (y - 4) + "V" + (y + 4) + "M" + a + "," + y + "H" + z + "M" + z + "," + (y - 4) + "V" + (y + 4), stroke: "#1d2330", fill: "none", "data-r": k, "data-ci": "mean" }, chart);
      }
    });
    svgEl("line", { class: "axis", x1: labelW, x2: W - right, y1: axisY, y2: axisY }, chart);
    const tks = [];
    if (log) for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) for (const m of [1, 2, 5]) { const v = m * Math.pow(10, e); if (v >= lo && v <= hi) tks.push(v); }
    for (const t of log ? tks : ticks(lo, hi, Math.max(2, Math.floor((W - labelW - right) / 110)))) {
      svgEl("line", { class: "axis", x1: x(t), x2: x(t), y1: axisY, y2: axisY + 4 }, chart);
      svgText(chart, x(t), axisY + 17, fmtAxis(t, unit), { "text-anchor": "middle" });
    }
    if (log) svgText(chart, W - right, axisY + 31, "log scale", { "text-anchor": "end", class: "note" });
    hover(chart, (t) => {
      if (!t.dataset || t.dataset.r === undefined) return null;
      const r = rows[+t.dataset.r], ci = t.dataset.ci === "median" ? r.median_ci : r.mean_ci;
      if (t.dataset.i !== undefined) return [String(r.label), "sample " + t.dataset.i + ": " + fmtUnit(r.samples[+t.dataset.i], unit) + (r.outliers.includes(+t.dataset.i) ? " (outlier)" : "")];
      return [String(r.label), t.dataset.ci + " 95% CI: " + fmtUnit(ci[0], unit) + " " + DASH + " " + fmtUnit(ci[1], unit)];
    });
  }

  /* ---------------- timeline ---------------- */
  const AXIS_H = 26, PROC_H = 18, LANE_H = 14, TRACK_PAD = 4, GUTTER = 180, MAX_LANES = 12, MAX_VIEW_H = 620;

  /** First index i with arr[i] > v (arr non-decreasing). */
  function upperBound(arr, v) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] > v) hi = mid; else lo = mid + 1; }
    return lo;
  }

  class Timeline {
    /** `b`: the trace as `readTrace` returns it; `bytes`: the trace's file, what the download saves. */
    constructor(box, b, bytes) {
      this.b = b;
      this.bytes = bytes;
      this.prepare(b);
      const kinds = b.kinds.map((k, i) => [k, color(i)]);
      if (b.highlight.length) kinds.push(["critical path", HIGHLIGHT, "outline"]);
      if (b.flows.length) kinds.push(["flow", "#555", "line"]);
      legend(box, kinds);
      const tools = el("div", "tl-tools"), reset = el("button", "tl-reset", "Reset zoom");
      const save = el("button", "tl-reset", "Perfetto JSON");
      save.title = "Download this timeline as Chrome/Perfetto trace JSON (open it in ui.perfetto.dev)";
      save.addEventListener("click", () => this.download());
      // Flows between many ranks hide the slices under them: off by default past 8 processes.
      const procs = new Set(b.tracks.map((t) => t.pid)).size;
      this.showFlows = procs <= 8;
      const flowsBtn = el("button", "tl-flows");
      const flowsLabel = () => { flowsBtn.textContent = (this.showFlows ? "Hide" : "Show") + " flows (" + b.flows.length.toLocaleString("en-US") + ")"; };
      flowsLabel();
      flowsBtn.title = "Draw the arrows that link each collective across ranks";
      flowsBtn.addEventListener("click", () => { this.showFlows = !this.showFlows; flowsLabel(); this.draw(); });
      this.info = el("span", "tl-info");
      tools.append(reset, save);
      if (b.flows.length) tools.append(flowsBtn);
      tools.append(this.info, el("span", "", "wheel: zoom \u00b7 drag: pan \u00b7 shift+wheel: scroll rows \u00b7 double-click: reset"));
      box.appendChild(tools);
      this.wrap = el("div", "tl-wrap");
      this.canvas = el("canvas", "timeline");
      this.wrap.appendChild(this.canvas);
      box.appendChild(this.wrap);
      this.ctx = this.canvas.getContext("2d");
      this.view = { t0: 0, t1: 1, y: 0 };
      this.lastDraw = null;
      this.pending = false;
      reset.addEventListener("click", () => this.reset());
      this.listen();
      this.resize();
      this.reset();
      if (window.ResizeObserver) new ResizeObserver(() => { if (this.resize()) this.draw(); }).observe(this.wrap);
    }

    /** Splits events by track and nesting depth (a stack per track) into start-sorted lanes. */
    prepare(b) {
      const nT = b.tracks.length, ev = b.events, n = ev.length;
      const order = new Int32Array(n), depth = new Int32Array(n);
      for (let i = 0; i < n; i++) order[i] = i;
      order.sort((i, j) => ev[i][0] - ev[j][0] || ev[i][1] - ev[j][1] || ev[j][2] - ev[i][2]);
      const tracks = [];
      for (let t = 0; t < nT; t++) tracks.push({ lanes: [], depthOf: null });
      let tMin = Infinity, tMax = -Infinity, p = 0;
      for (let t = 0; t < nT; t++) {
        const lists = [], stack = [];
        for (; p < n && ev[order[p]][0] === t; p++) {
          const e = ev[order[p]], s = e[1], end = e[1] + e[2];
          while (stack.length && stack[stack.length - 1] <= s) stack.pop();
          const d = Math.min(stack.length, MAX_LANES - 1);
          stack.push(end);
          (lists[d] = lists[d] || []).push(order[p]);
          depth[order[p]] = d;
          if (s < tMin) tMin = s;
          if (end > tMax) tMax = end;
        }
        for (let d = 0; d < Math.max(1, lists.length); d++) {
          const ids = lists[d] || [], m = ids.length;
          const L = { s: new Float64Array(m), e: new Float64Array(m), pm: new Float64Array(m), nm: new Int32Array(m), kd: new Int32Array(m) };
          let run = -Infinity;
          for (let k = 0; k < m; k++) {
            const e = ev[ids[k]];
            L.s[k] = e[1]; L.e[k] = e[1] + e[2]; L.nm[k] = e[3]; L.kd[k] = e[4];
            run = Math.max(run, L.e[k]); L.pm[k] = run;
          }
          tracks[t].lanes.push(L);
        }
      }
      for (const h of b.highlight) { tMin = Math.min(tMin, h[1]); tMax = Math.max(tMax, h[1] + h[2]); }
      if (!(tMin <= tMax)) { tMin = 0; tMax = 1; }
      if (tMax - tMin < 1e-3) tMax = tMin + 1e-3;
      this.tMin = tMin; this.tMax = tMax; this.tracks = tracks;
      this.kindBusy = new Float64Array(Math.max(1, b.kinds.length));
      // a highlight is [slice, ts, dur]: drawn on its slice's track and lane
      const hl = this.hl = b.highlight.map((h) => [ev[h[0]][0], h[1], h[2], depth[h[0]]]);
      this.hlOrder = hl.map((_, i) => i).sort((i, j) => hl[i][0] - hl[j][0] || hl[i][3] - hl[j][3] || hl[i][1] - hl[j][1]);
      // rows: a header per process (first-appearance order), then that process's tracks
      const procs = new Map();
      b.tracks.forEach((tr, i) => { const key = String(tr.pid); if (!procs.has(key)) procs.set(key, []); procs.get(key).push(i); });
      const rows = [];
      let y = 0;
      for (const [pid, members] of procs) {
        const first = b.tracks[members[0]];
        rows.push({ proc: true, y: y, h: PROC_H, label: (first.process || "process") + " (pid " + pid + ")" });
        y += PROC_H;
        for (const i of members) {
          const h = tracks[i].lanes.length * LANE_H + TRACK_PAD;
          tracks[i].y = y;
          rows.push({ proc: false, y: y, h: h, track: i, label: b.tracks[i].name || "tid " + b.tracks[i].tid });
          y += h;
        }
      }
      this.rows = rows;
      this.contentH = y;
    }

    resize() {
      const w = Math.max(400, this.wrap.clientWidth || 900), h = AXIS_H + Math.min(this.contentH, MAX_VIEW_H) + 2;
      const dpr = window.devicePixelRatio || 1;
      if (w === this.w && h === this.h && dpr === this.dpr) return false;
      this.w = w; this.h = h; this.dpr = dpr;
      this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(h * dpr);
      this.canvas.style.width = w + "px"; this.canvas.style.height = h + "px";
      this.clamp();
      return true;
    }

    get plotW() { return this.w - GUTTER - 10; }
    timeAt(x) { return this.view.t0 + (x - GUTTER) / this.plotW * (this.view.t1 - this.view.t0); }
    xAt(t) { return GUTTER + (t - this.view.t0) / (this.view.t1 - this.view.t0) * this.plotW; }

    /** Client coordinates of (track, time, depth): lets tests aim mouse events. */
    locate(track, t, depth) {
      const r = this.canvas.getBoundingClientRect();
      return { x: r.left + this.xAt(t), y: r.top + AXIS_H + this.tracks[track].y - this.view.y + 2 + (depth || 0) * LANE_H + LANE_H / 2 };
    }

    reset() {
      const pad = (this.tMax - this.tMin) * 0.01;
      this.view.t0 = this.tMin - pad; this.view.t1 = this.tMax + pad; this.view.y = 0;
      this.draw();
    }

    clamp() {
      const v = this.view, pad = (this.tMax - this.tMin) * 0.01, lo = this.tMin - pad, hi = this.tMax + pad;
      let span = Math.min(Math.max(v.t1 - v.t0, 1e-3), hi - lo);
      if (v.t0 < lo) v.t0 = lo;
      if (v.t0 + span > hi) v.t0 = hi - span;
      v.t1 = v.t0 + span;
      v.y = Math.max(0, Math.min(v.y, this.contentH - (this.h - AXIS_H - 2)));
    }

    zoom(cx, factor) {
      const t = this.timeAt(Math.max(GUTTER, Math.min(cx, GUTTER + this.plotW))), v = this.view;
      v.t0 = t - (t - v.t0) * factor; v.t1 = t + (v.t1 - t) * factor;
      this.clamp(); this.schedule();
    }

    listen() {
      const c = this.canvas;
      c.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const scale = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? 400 : 1, dx = ev.deltaX * scale, dy = ev.deltaY * scale;
        if (ev.shiftKey) { this.view.y += dy || dx; this.clamp(); this.schedule(); }
        else if (Math.abs(dx) > Math.abs(dy)) { const k = (this.view.t1 - this.view.t0) / this.plotW; this.view.t0 += dx * k; this.view.t1 += dx * k; this.clamp(); this.schedule(); }
        else this.zoom(ev.clientX - c.getBoundingClientRect().left, Math.exp(dy * 0.002));
      }, { passive: false });
      let drag = null;
      c.addEventListener("mousedown", (ev) => {
        if (ev.button !== 0) return;
        drag = { x: ev.clientX, y: ev.clientY, t0: this.view.t0, t1: this.view.t1, vy: this.view.y };
        c.classList.add("dragging"); hideTip(); ev.preventDefault();
      });
      window.addEventListener("mousemove", (ev) => {
        if (!drag) return;
        const k = (drag.t1 - drag.t0) / this.plotW, dt = (ev.clientX - drag.x) * k;
        this.view.t0 = drag.t0 - dt; this.view.t1 = drag.t1 - dt; this.view.y = drag.vy - (ev.clientY - drag.y);
        this.clamp(); this.schedule();
      });
      window.addEventListener("mouseup", () => { if (drag) { drag = null; c.classList.remove("dragging"); } });
      c.addEventListener("mousemove", (ev) => { if (drag) return; const lines = this.describe(ev.offsetX, ev.offsetY); if (lines) showTip(ev, lines); else hideTip(); });
      c.addEventListener("mouseleave", hideTip);
      c.addEventListener("dblclick", () => this.reset());
    }

    schedule() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.draw(); });
    }

    /** The event under canvas point (x, y), or null: searched in that row's lane only. */
    eventAt(x, y) {
      const cy = y - AXIS_H + this.view.y;
      if (y < AXIS_H || x < GUTTER) return null;
      const row = this.rows.find((r) => cy >= r.y && cy < r.y + r.h);
      if (!row || row.proc) return null;
      const lanes = this.tracks[row.track].lanes, d = Math.floor((cy - row.y - 2) / LANE_H);
      if (d < 0 || d >= lanes.length) return null;
      const L = lanes[d], t = this.timeAt(x), tol = 2 * (this.view.t1 - this.view.t0) / this.plotW;
      let best = -1;
      for (let i = upperBound(L.s, t + tol) - 1, k = 0; i >= 0 && k < 3; i--, k++) {
        if (L.e[i] >= t - tol && (best < 0 || L.e[i] - L.s[i] < L.e[best] - L.s[best])) best = i;
      }
      return best < 0 ? null : { track: row.track, lane: L, i: best };
    }

    describe(x, y) {
      if (x < GUTTER && y >= AXIS_H) {
        const cy = y - AXIS_H + this.view.y, row = this.rows.find((r) => cy >= r.y && cy < r.y + r.h);
        if (!row) return null;
        if (row.proc) return [row.label];
        const tr = this.b.tracks[row.track];
        return [row.label, (tr.process || "process") + " \u00b7 pid " + tr.pid + " \u00b7 tid " + tr.tid];
      }
      const hit = this.eventAt(x, y);
      if (!hit) return null;
      const L = hit.lane, i = hit.i;
      return [this.b.names[L.nm[i]], "kind: " + this.b.kinds[L.kd[i]], "track: " + this.rows.find((r) => r.track === hit.track).label,
        "start: +" + fmtDuration(L.s[i] - this.tMin) + " (ts " + L.s[i] + " \u00b5s)", "duration: " + fmtDuration(L.e[i] - L.s[i])];
    }

    draw() {
      const ctx = this.ctx, W = this.w, H = this.h, v = this.view, x0 = GUTTER, x1 = GUTTER + this.plotW;
      const k = this.plotW / (v.t1 - v.t0), started = performance.now(), stats = { rects: 0, runs: 0, labels: 0, events: 0 };
      ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
      ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
      const tk = this.timeTicks();
      ctx.save();
      ctx.beginPath(); ctx.rect(0, AXIS_H, W, H - AXIS_H); ctx.clip();
      ctx.fillStyle = "#edf0f3";
      for (const t of tk.ticks) ctx.fillRect(Math.round(this.xAt(t)), AXIS_H, 1, H - AXIS_H);
      let alt = 0;
      for (const row of this.rows) {
        const top = AXIS_H + row.y - v.y;
        if (row.proc) alt = 0;
        if (top > H || top + row.h < AXIS_H) continue;
        if (row.proc) {
          ctx.fillStyle = "#e4e8ee"; ctx.fillRect(0, top, W, row.h);
          ctx.fillStyle = "#1d2127"; ctx.font = "600 11px system-ui, sans-serif";
          ctx.fillText(clip(row.label, Math.floor((W - 12) / 6.5)), 6, top + row.h / 2);
          ctx.font = "11px system-ui, sans-serif";
          continue;
        }
        if (alt++ % 2) { ctx.fillStyle = "rgba(0,0,0,0.025)"; ctx.fillRect(0, top, W, row.h); }
        ctx.fillStyle = "#333"; ctx.fillText(clip(row.label, Math.floor((GUTTER - 16) / 6.3)), 12, top + LANE_H / 2 + 2);
        const lanes = this.tracks[row.track].lanes;
        ctx.save(); ctx.beginPath(); ctx.rect(x0, top, x1 - x0, row.h); ctx.clip();
        for (let d = 0; d < lanes.length; d++) this.drawLane(lanes[d], top + 2 + d * LANE_H, LANE_H - 2, x0, x1, k, stats);
        ctx.restore();
      }
      if (this.showFlows) this.drawFlows(x0, x1, k);
      this.drawHighlights(x0, x1, k);
      ctx.restore();
      this.drawAxis(tk, W);
      if (this.contentH > H - AXIS_H) { // vertical position indicator
        const vh = H - AXIS_H, bh = Math.max(16, vh * vh / this.contentH);
        ctx.fillStyle = "rgba(0,0,0,0.25)"; ctx.fillRect(W - 5, AXIS_H + (vh - bh) * v.y / (this.contentH - vh), 4, bh);
      }
      this.info.textContent = "window " + fmtDuration(Math.min(v.t1 - v.t0, this.tMax - this.tMin)) + " of " + fmtDuration(this.tMax - this.tMin) + " \u00b7 " + this.b.events.length.toLocaleString("en-US") + " events";
      stats.ms = performance.now() - started;
      this.lastDraw = stats;
    }

    /** Draws one lane's visible events. Runs of sub-pixel events merge into one rect colored by
        the kind with the most busy time, its opacity showing how busy the run is. */
    drawLane(L, y, h, x0, x1, k, stats) {
      const ctx = this.ctx, n = L.s.length, t0 = this.view.t0, t1 = this.view.t1, names = this.b.names;
      const busy = this.kindBusy, touched = [];
      let runA = -1, runZ = -1, runBusy = 0;
      const add = (kd, d) => { if (busy[kd] === 0) touched.push(kd); busy[kd] += d + 1e-9; runBusy += d; };
      const flush = () => {
        if (runZ < 0) return;
        let best = touched[0];
        for (const q of touched) { if (busy[q] > busy[best]) best = q; }
        for (const q of touched) busy[q] = 0;
        touched.length = 0;
        const w = Math.max(1, runZ - runA);
        ctx.globalAlpha = 0.35 + 0.65 * Math.min(1, runBusy * k / w);
        ctx.fillStyle = color(best); ctx.fillRect(runA, y, w, h);
        ctx.globalAlpha = 1;
        stats.runs++; runZ = -1; runBusy = 0;
      };
      for (let i = upperBound(L.pm, t0); i < n; i++) {
        const s = L.s[i];
        if (s > t1) break;
        const e = L.e[i];
        if (e < t0) continue;
        stats.events++;
        let a = x0 + (s - t0) * k, z = x0 + (e - t0) * k;
        if (a < x0 - 1) a = x0 - 1;
        if (z > x1 + 1) z = x1 + 1;
        if (z - a < 1) {
          if (runZ < 0 || a > runZ + 0.5) { flush(); runA = a; runZ = a + 1; }
          if (z > runZ) runZ = z;
          add(L.kd[i], e - s);
          continue;
        }
        flush();
        ctx.fillStyle = color(L.kd[i]);
        ctx.fillRect(a, y, z - a > 3 ? z - a - 0.5 : z - a, h);
        stats.rects++;
        if (z - a > 34) {
          const va = Math.max(a, x0), vz = Math.min(z, x1), room = vz - va - 6;
          let text = clip(names[L.nm[i]], Math.floor(room / 6.2));
          if (text.length >= 3 && ctx.measureText(text).width > room) text = clip(text, Math.floor(text.length * 0.8));
          if (text.length >= 3) { ctx.fillStyle = "#111"; ctx.fillText(text, va + 3, y + h / 2 + 0.5); stats.labels++; }
        }
      }
      flush();
    }

    trackY(t, depth) { return AXIS_H + this.tracks[t].y - this.view.y + 2 + depth * LANE_H; }

    drawFlows(x0, x1, k) {
      const ctx = this.ctx, t0 = this.view.t0, heads = [];
      ctx.strokeStyle = "rgba(40,40,40,0.55)"; ctx.lineWidth = 1;
      ctx.beginPath();
      for (const f of this.b.flows) {
        const xa = x0 + (f[1] - t0) * k, xb = x0 + (f[3] - t0) * k;
        if ((xa < x0 && xb < x0) || (xa > x1 && xb > x1)) continue;
        const ya = this.trackY(f[0], 0) + LANE_H / 2, yb = this.trackY(f[2], 0) + LANE_H / 2;
        if ((ya < AXIS_H && yb < AXIS_H) || (ya > this.h && yb > this.h)) continue;
        ctx.moveTo(xa, ya); ctx.lineTo(xb, yb);
        heads.push([xa, ya, xb, yb]);
      }
      ctx.stroke();
      ctx.fillStyle = "rgba(40,40,40,0.75)";
      ctx.beginPath();
      for (const [xa, ya, xb, yb] of heads) {
        const ang = Math.atan2(yb - ya, xb - xa), s = 6;
        ctx.moveTo(xb, yb);
        ctx.lineTo(xb - s * Math.cos(ang - 0.4), yb - s * Math.sin(ang - 0.4));
        ctx.lineTo(xb - s * Math.cos(ang + 0.4), yb - s * Math.sin(ang + 0.4));
        ctx.closePath();
      }
      ctx.fill();
    }

    /** Outlines the highlighted events; neighbours closer than 3 px share one outline. */
    drawHighlights(x0, x1, k) {
      const ctx = this.ctx, t0 = this.view.t0, hl = this.hl;
      let cur = null;
      const flush = () => { if (cur) ctx.rect(cur.a, this.trackY(cur.t, cur.d) - 1, cur.z - cur.a, LANE_H); cur = null; };
      ctx.strokeStyle = HIGHLIGHT; ctx.lineWidth = 2;
      ctx.beginPath();
      for (const i of this.hlOrder) {
        const h = hl[i], d = h[3];
        let a = x0 + (h[1] - t0) * k, z = x0 + (h[1] + h[2] - t0) * k;
        if (z < x0 || a > x1) continue;
        a = Math.max(a, x0 - 2); z = Math.min(z, x1 + 2);
        if (z - a < 2) { const m = (a + z) / 2; a = m - 1; z = m + 1; }
        if (cur && cur.t === h[0] && cur.d === d && a <= cur.z + 3) { cur.z = Math.max(cur.z, z); continue; }
        flush();
        cur = { t: h[0], d: d, a: a, z: z };
      }
      flush();
      ctx.stroke();
    }

    /** Tick positions and a unit fixed by the step so that neighbouring labels always differ. */
    timeTicks() {
      const v = this.view, step = niceStep(v.t1 - v.t0, Math.max(2, this.plotW / 110));
      const unit = step < 1 ? [1e-3, "ns"] : step < 1e3 ? [1, "\u00b5s"] : step < 1e6 ? [1e3, "ms"] : [1e6, "s"];
      const dec = Math.max(0, -Math.floor(Math.log10(step / unit[0]) + 1e-9));
      const out = [];
      for (let i = Math.ceil((v.t0 - this.tMin) / step); this.tMin + i * step <= v.t1; i++) out.push(this.tMin + i * step);
      return { ticks: out, label: (t) => ((t - this.tMin) / unit[0]).toFixed(dec) + " " + unit[1] };
    }

    drawAxis(tk, W) {
      const ctx = this.ctx;
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, AXIS_H);
      ctx.fillStyle = "#9aa4af"; ctx.fillRect(0, AXIS_H - 1, W, 1); ctx.fillRect(GUTTER - 1, 0, 1, this.h);
      ctx.fillStyle = "#333"; ctx.textAlign = "center";
      for (const t of tk.ticks) {
        const x = Math.round(this.xAt(t));
        ctx.fillRect(x, AXIS_H - 6, 1, 5);
        if (x > GUTTER + 8 && x < W - 20) ctx.fillText(tk.label(t), x, AXIS_H / 2 - 1);
      }
      ctx.textAlign = "left"; ctx.fillStyle = "#5f6b7a";
      ctx.fillText("time since start", 8, AXIS_H / 2 - 1);
    }
  }

  /** Saves the embedded trace file unchanged: the bytes `chakra timeline` writes. */
  Timeline.prototype.download = function () {
    const blob = new Blob([this.bytes], { type: "application/json" });
    const link = document.createElement("a");
    link.download = "timeline.json";
    const address = URL.createObjectURL(blob);  // a blob in this page: nothing leaves the machine
    link.setAttribute("href", address);
    link.click();
    setTimeout(() => URL.revokeObjectURL(address), 1000);
  };

  /** The bytes of a gzip file given in base64, decompressed by the browser (DecompressionStream). */
  function gunzip(base64) {
    if (typeof DecompressionStream !== "function") return Promise.reject(new Error("this browser cannot decompress the embedded timeline (it lacks DecompressionStream); open the report in a current browser"));
    const bin = atob(base64), packed = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) packed[i] = bin.charCodeAt(i);
    const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).arrayBuffer().then((buf) => new Uint8Array(buf));
  }

  /** What the canvas draws of a Chrome trace: tracks named and ordered by the "M" events (sort
      indices, then first appearance), the "X" slices as [track, ts, dur, name, kind] in trace
      order, and each "f" flow step with its flow's "s" as [track_a, ts_a, track_b, ts_b]. */
  function readTrace(doc, highlight) {
    const procName = new Map(), procSort = new Map(), threadName = [], threadSort = [], found = new Map(), places = [];
    const track = (e) => {
      const key = e.pid + (typeof e.tid === "string" ? " s" : " n") + e.tid;
      let i = found.get(key);
      if (i === undefined) { i = places.length; found.set(key, i); places.push(e); }
      return i;
    };
    const names = [], kinds = [], nameIx = new Map(), kindIx = new Map();
    const intern = (list, ix, v) => { let i = ix.get(v); if (i === undefined) { i = list.length; ix.set(v, i); list.push(v); } return i; };
    const events = [], starts = new Map(), steps = [];
    for (const e of doc.traceEvents) {
      if (e.ph === "X") events.push([track(e), e.ts, e.dur, intern(names, nameIx, e.name), intern(kinds, kindIx, e.cat || "")]);
      else if (e.ph === "s") starts.set(e.id, e);
      else if (e.ph === "f") steps.push(e);
      else if (e.ph === "M" && e.name === "process_name") procName.set(e.pid, e.args.name);
      else if (e.ph === "M" && e.name === "process_sort_index") procSort.set(e.pid, e.args.sort_index);
      else if (e.ph === "M" && e.name === "thread_name") threadName[track(e)] = e.args.name;
      else if (e.ph === "M" && e.name === "thread_sort_index") threadSort[track(e)] = e.args.sort_index;
    }
    const flows = [];
    for (const f of steps) { const s = starts.get(f.id); if (s) flows.push([track(s), s.ts, track(f), f.ts]); }
    const sortKey = (i) => [procSort.has(places[i].pid) ? procSort.get(places[i].pid) : Infinity, threadSort[i] !== undefined ? threadSort[i] : Infinity, i];
    const keys = places.map((_, i) => sortKey(i));
    const order = places.map((_, i) => i).sort((i, j) => keys[i][0] - keys[j][0] || keys[i][1] - keys[j][1] || i - j);
    const at = new Int32Array(places.length);
    order.forEach((i, k) => { at[i] = k; });
    const tracks = order.map((i) => ({ pid: places[i].pid, tid: places[i].tid,
      name: threadName[i] !== undefined ? threadName[i] : "tid " + places[i].tid,
      process: procName.has(places[i].pid) ? procName.get(places[i].pid) : "pid " + places[i].pid }));
    for (const e of events) e[0] = at[e[0]];
    for (const f of flows) { f[0] = at[f[0]]; f[2] = at[f[2]]; }
    return { tracks: tracks, names: names, kinds: kinds, events: events, flows: flows, highlight: highlight };
  }

  // Timelines unpack one after another, so that report.timelines keeps the document's order.
  let unpacked = Promise.resolve();
  function renderTimeline(box, b) {
    const done = unpacked.then(() => gunzip(b.trace_gz)).then((bytes) => {
      const view = readTrace(JSON.parse(new TextDecoder().decode(bytes)), b.highlight);
      if (!empty(box, view.events.length)) report.timelines.push(new Timeline(box, view, bytes));
    });
    unpacked = done.catch(() => null);
    return done;
  }

  /* ---------------- document ---------------- */
  const RENDERERS = { text: renderText, kv: renderKv, table: renderTable, bars: renderBars, heatmap: renderHeatmap, timeline: renderTimeline, scatter: renderScatter, intervals: renderIntervals };

  /** Renders one block into a new box in `parent`: a promise of true once drawn (timelines
      unpack asynchronously), or of false after a failure became an error box and a console error. */
  function renderBlock(parent, block, where) {
    const box = el("div", "block block-" + block.type);
    parent.appendChild(box);
    const fail = (err) => {
      box.replaceChildren(el("div", "block-error", "Could not draw this " + block.type + " block (" + where + "): " + (err && err.message || err)));
      console.error("chakra report: " + where + " (" + block.type + ") failed:", err);
      return false;
    };
    try {
      const fn = RENDERERS[block.type];
      if (!fn) throw new Error("unknown block type " + JSON.stringify(block.type));
      return Promise.resolve(fn(box, block)).then(() => true, fail);
    } catch (err) {
      return Promise.resolve(fail(err));
    }
  }
  report.renderBlock = renderBlock;

  /** Draws the document; document.body.dataset.rendered says how many blocks drew, once all have. */
  function renderDocument() {
    const drawn = [];
    try {
      const doc = JSON.parse(document.getElementById("report-data").textContent);
      report.doc = doc;
      const head = el("header", "report-head");
      head.appendChild(el("h1", "", doc.title));
      if (doc.subtitle) head.appendChild(el("p", "subtitle", doc.subtitle));
      if (doc.generated) head.appendChild(el("p", "generated", "Generated " + doc.generated));
      const layout = el("div", "layout"), nav = el("nav", "toc"), main = el("main");
      layout.append(nav, main);
      document.body.prepend(head, layout);
      for (const sec of doc.sections) {
        const a = el("a", "", sec.title);
        a.setAttribute("href", "#" + sec.id);
        nav.appendChild(a);
        const section = el("section", "report-section");
        section.id = sec.id;
        section.appendChild(el("h2", "", sec.title));
        main.appendChild(section);
        sec.blocks.forEach((block, i) => drawn.push(renderBlock(section, block, "section " + JSON.stringify(sec.id) + " block " + i)));
      }
    } catch (err) {
      console.error("chakra report: rendering failed:", err);
    }
    Promise.all(drawn).then((ok) => { document.body.dataset.rendered = String(ok.filter(Boolean).length); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderDocument);
  else renderDocument();
})();
