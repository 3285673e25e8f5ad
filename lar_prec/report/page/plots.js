// The page's small plots: a trend over runs, one operator's error histogram, mixed's trade-off
// curve. Each is a <figure> whose caption names what it shows, with both axes ticked and
// labelled, and its value on hover (a point's or a bar's data-tip, shown in the figure's tip box).
// report.js draws them from the report's JSON; nothing here decides a verdict.
var LarPlot = (function () {
'use strict';
// the SVG namespace taken from the template's own chart (the page spells out no URL at all)
var NS = null;
function node(ns, tag, attrs, text) {
  var e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, String(attrs[k])); });
  if (text !== undefined) e.textContent = text;
  return e;
}
function sv(tag, attrs, text) { return node(NS || (NS = document.querySelector('svg').namespaceURI), tag, attrs, text); }
function fmt(x) {
  if (x === null || x === undefined) return '\u2014';
  if (typeof x !== 'number') return String(x);
  if (x === 0) return '0';
  var a = Math.abs(x);
  if (a >= 1e-3 && a < 1e4) return String(Number(x.toPrecision(3)));
  return x.toExponential(2);
}
function pct(x) { return typeof x === 'number' ? (100 * x >= 10 || x === 0 ? (100 * x).toFixed(0) : Number((100 * x).toPrecision(2))) + '%' : '\u2014'; }
function finite(x) { return typeof x === 'number' && isFinite(x); }

// A log axis over the positive values (and the extra ones, a threshold or a tolerance): whole
// decades; 0 sits in a band under the axis, NaN/Inf (null) in one above it.
function logAxis(values, extra) {
  var pos = values.concat(extra || []).filter(function (v) { return finite(v) && v > 0; });
  var lo = pos.length ? Math.min.apply(null, pos) : 1e-8, hi = pos.length ? Math.max.apply(null, pos) : 1;
  var l0 = Math.floor(Math.log10(lo)), l1 = Math.ceil(Math.log10(hi));
  if (l1 <= l0) l1 = l0 + 1;
  var step = Math.max(1, Math.ceil((l1 - l0) / 5)), ticks = [];
  for (var k = l0; k <= l1; k += step) {
    ticks.push({ v: Math.pow(10, k), text: '1e' + k });
    // one or two decades: 2 and 5 of each ticked too, so a value can be read off the axis
    if (l1 - l0 <= 2 && k < l1) [2, 5].forEach(function (m) { ticks.push({ v: m * Math.pow(10, k), text: m + 'e' + k }); });
  }
  return { log: true, l0: l0, l1: l1, ticks: ticks, zero: values.some(function (v) { return v === 0; }),
           none: values.some(function (v) { return v === null || v === undefined || (typeof v === 'number' && !isFinite(v)); }) };
}
// A linear axis from lo to hi, ticks at round steps; text(v) labels a tick.
function linAxis(lo, hi, text, most) {
  if (!(hi > lo)) { hi = lo + 1; }
  var raw = (hi - lo) / (most || 5), mag = Math.pow(10, Math.floor(Math.log10(raw))), step = mag;
  [1, 2, 5, 10].some(function (m) { step = m * mag; return step >= raw; });
  var ticks = [];
  for (var v = Math.ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step; v += step) ticks.push({ v: v, text: (text || fmt)(v) });
  return { log: false, lo: lo, hi: hi, ticks: ticks };
}

// One plot: spec.title (the caption: what it shows), spec.x and spec.y (axes from logAxis or
// linAxis, with .label), spec.w/.h; returns { fig, svg, X, Y, plot: the data area's rect }.
function frame(spec) {
  var W = spec.w || 560, H = spec.h || 220, L = spec.left || 58, R = 14, T = spec.y.log && spec.y.none ? 22 : 10;
  var B = 40 + (spec.y.log && spec.y.zero ? 12 : 0), pw = W - L - R, ph = H - T - B;
  var fig = node(null, 'figure', { 'class': 'plot' + (spec.cls ? ' ' + spec.cls : ''), id: spec.id });
  fig.appendChild(node(null, 'figcaption', null, spec.title));
  var svg = sv('svg', { 'class': 'plot-svg', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': spec.title });
  function scale(ax, a, b) {
    return function (v) {
      if (ax.log) {
        if (v === null || v === undefined || !isFinite(v)) return null;
        if (v <= 0) return undefined;
        return a + (Math.log10(v) - ax.l0) / (ax.l1 - ax.l0) * (b - a);
      }
      return a + (v - ax.lo) / (ax.hi - ax.lo) * (b - a);
    };
  }
  // an x axis with zeros keeps its first 14 px for them (the histogram's exact elements)
  var xz = spec.x.log && spec.x.zero ? 14 : 0;
  var sx = scale(spec.x, L + xz, L + pw), sy = scale(spec.y, T + ph, T);
  function X(v) { var p = sx(v); return p === undefined ? L + 6 : p === null ? L + pw + 8 : p; }
  function Y(v) { var p = sy(v); return p === undefined ? T + ph + 12 : p === null ? T - 12 : p; }
  var area = sv('rect', { 'class': 'plot-area', x: L, y: T, width: pw, height: ph, fill: '#fcfcfc', stroke: '#bbb' });
  svg.appendChild(area);
  spec.y.ticks.forEach(function (t) {
    var y = Y(t.v);
    svg.appendChild(sv('line', { x1: L, x2: L + pw, y1: y, y2: y, stroke: '#eee' }));
    svg.appendChild(sv('line', { x1: L - 4, x2: L, y1: y, y2: y, stroke: '#888' }));
    svg.appendChild(sv('text', { 'class': 'tick y-tick', x: L - 6, y: y + 4, 'text-anchor': 'end' }, t.text));
  });
  if (spec.y.log && spec.y.zero) svg.appendChild(sv('text', { 'class': 'tick y-tick', x: L - 6, y: T + ph + 16, 'text-anchor': 'end' }, '0'));
  if (spec.y.log && spec.y.none) svg.appendChild(sv('text', { 'class': 'tick y-tick', x: L - 6, y: T - 8, 'text-anchor': 'end' }, 'NaN/Inf'));
  spec.x.ticks.forEach(function (t) {
    var x = X(t.v);
    svg.appendChild(sv('line', { x1: x, x2: x, y1: T + ph, y2: T + ph + 4, stroke: '#888' }));
    svg.appendChild(sv('text', { 'class': 'tick x-tick', x: x, y: T + ph + 15 + (spec.y.log && spec.y.zero ? 12 : 0), 'text-anchor': 'middle' }, t.text));
  });
  if (xz) svg.appendChild(sv('text', { 'class': 'tick x-tick', x: L + 6, y: T + ph + 15, 'text-anchor': 'middle' }, '0'));
  svg.appendChild(sv('text', { 'class': 'axis-label x-label', x: L + pw / 2, y: H - 4, 'text-anchor': 'middle' }, spec.x.label));
  svg.appendChild(sv('text', { 'class': 'axis-label y-label', x: 12, y: T + ph / 2, 'text-anchor': 'middle', transform: 'rotate(-90 12 ' + (T + ph / 2) + ')' }, spec.y.label));
  fig.appendChild(svg);
  var tip = node(null, 'div', { 'class': 'plot-tip', role: 'status' });
  tip.hidden = true;
  fig.appendChild(tip);
  // values on hover: any element with a data-tip
  function show(ev) {
    var t = ev.target.closest ? ev.target.closest('[data-tip]') : null;
    if (!t) { tip.hidden = true; return; }
    tip.textContent = t.getAttribute('data-tip');
    tip.hidden = false;
    var box = fig.getBoundingClientRect(), r = t.getBoundingClientRect();
    tip.style.left = Math.max(0, Math.min(r.left - box.left + r.width / 2 + 8, W - 180)) + 'px';
    tip.style.top = Math.max(0, r.top - box.top - 8) + 'px';
  }
  svg.addEventListener('mouseover', show);
  svg.addEventListener('focusin', show);
  svg.addEventListener('mouseleave', function () { tip.hidden = true; });
  return { fig: fig, svg: svg, X: X, Y: Y, plot: { x: L, y: T, w: pw, h: ph } };
}
function point(f, x, y, tip, cls, r) {
  var c = sv('circle', { 'class': 'pt ' + (cls || ''), cx: x.toFixed(1), cy: y.toFixed(1), r: r || 3.5, 'data-tip': tip, tabindex: 0 });
  f.svg.appendChild(c);
  return c;
}
function hline(f, y, text, cls) {
  var yy = f.Y(y), p = f.plot;
  f.svg.appendChild(sv('line', { 'class': cls, x1: p.x, x2: p.x + p.w, y1: yy, y2: yy, 'stroke-dasharray': '6 4' }));
  f.svg.appendChild(sv('text', { 'class': cls + '-text', x: p.x + p.w - 4, y: yy - 4, 'text-anchor': 'end' }, text));
}
function runTicks(n) {
  // runs numbered from 1, oldest first: each of up to 8 ticked, else about 6 ticks, the last always
  var ax = linAxis(-0.5, n - 0.5, function (v) { return String(v + 1); }, 5);
  if (n <= 8) ax.ticks = Array.from({ length: n }, function (_, i) { return { v: i, text: String(i + 1) }; });  // every run
  ax.ticks = ax.ticks.filter(function (t) { return t.v >= 0 && t.v <= n - 1 && t.v === Math.round(t.v); });
  if (!ax.ticks.some(function (t) { return t.v === n - 1; })) ax.ticks.push({ v: n - 1, text: String(n) });
  return ax;
}

// A value over runs, oldest first: each run a point (a one-run series is one point), joined by a
// line; null values (NaN/Inf) in the band above. pts: [{ v, tip }].
function trend(pts, spec) {
  var y = logAxis(pts.map(function (p) { return p.v; }));
  y.label = spec.yLabel;
  var x = runTicks(pts.length);
  x.label = spec.xLabel || 'run, oldest first';
  var f = frame({ id: spec.id, cls: 'trend', title: spec.title, w: spec.w || 320, h: spec.h || 130, left: 52, x: x, y: y });
  var d = '';
  pts.forEach(function (p, i) {
    if (!finite(p.v)) return;
    d += (d ? ' L' : 'M') + f.X(i).toFixed(1) + ' ' + f.Y(p.v).toFixed(1);
  });
  if (pts.length > 1 && d) f.svg.appendChild(sv('path', { 'class': 'trend-line', d: d, fill: 'none' }));
  pts.forEach(function (p, i) { point(f, f.X(i), f.Y(finite(p.v) ? p.v : null), p.tip, finite(p.v) ? 'trend-pt' : 'trend-nonfinite', 3); });
  if (pts.length) {  // the latest value written beside its point
    var n = pts.length - 1, last = pts[n].v;
    f.svg.appendChild(sv('text', { 'class': 'pt-label last-value', x: (f.X(n) - 6).toFixed(1), y: (f.Y(finite(last) ? last : null) - 6).toFixed(1), 'text-anchor': 'end' },
      (n ? 'latest ' : '') + (finite(last) ? fmt(last) : 'NaN/Inf')));
  }
  return f.fig;
}

// One variable's error histogram from its quantiles: the elements between consecutive quantiles
// (0, p50, p90, p99, p99.9, max) as bars on a log error axis, their share of the elements on a
// log axis (so the 0.1% tail shows), the threshold as a line. null when no quantile is known.
var BANDS = [['err_p50', 0.5, 'p50'], ['err_p90', 0.4, 'p90'], ['err_p99', 0.09, 'p99'], ['err_p999', 0.009, 'p99.9'], ['max_err', 0.001, 'max']];
function histogram(v, spec) {
  if (!BANDS.every(function (b) { return typeof v[b[0]] === 'number'; })) return null;
  var edges = [0].concat(BANDS.map(function (b) { return v[b[0]]; }));
  var th = finite(v.threshold) ? v.threshold : null;
  // the first band starts at 0: a decade under p50 stands for it on the log axis
  var x = logAxis(edges.slice(1), (th ? [th] : []).concat(edges[1] > 0 ? [edges[1] / 10] : []));
  x.label = 'error of an element (' + (spec.metric || 'max_err metric') + '), log scale';
  var y = logAxis([1, 1e-3]);
  y.ticks = [1, 0.1, 0.01, 0.001].map(function (s) { return { v: s, text: pct(s) }; });
  y.l0 = -3.3; y.l1 = 0.05;
  y.label = 'share of elements';
  x.zero = edges[1] === 0;
  var f = frame({ id: spec.id, cls: 'hist', title: spec.title, w: spec.w || 620, h: spec.h || 230, left: 58, x: x, y: y });
  var p = f.plot;
  // bands whose upper quantiles are equal are one bar: their elements all have that error
  var bins = [];
  BANDS.forEach(function (b, k) {
    var last = bins[bins.length - 1];
    if (last && last.hi === edges[k + 1]) { last.share += b[1]; last.to = b[2]; return; }
    bins.push({ lo: edges[k], hi: edges[k + 1], share: b[1], from: k === 0 ? '0' : BANDS[k - 1][2] + ' ' + fmt(edges[k]), to: b[2] });
  });
  bins.forEach(function (b, k) {
    var x0 = b.lo > 0 ? f.X(b.lo) : (b.hi > 0 ? p.x + (x.zero ? 14 : 0) : f.X(0) - 5), x1 = b.hi > 0 ? f.X(b.hi) : f.X(0) + 5;
    if (x1 - x0 < 3) { x0 -= 1.5; x1 += 1.5; }  // elements all at one error: a narrow bar
    var top = f.Y(b.share);
    f.svg.appendChild(sv('rect', { 'class': 'hist-bar' + (th !== null && b.hi > th ? ' over' : ''), x: x0.toFixed(1), y: top.toFixed(1),
      width: (x1 - x0).toFixed(1), height: (p.y + p.h - top).toFixed(1), tabindex: 0,
      'data-tip': pct(b.share) + ' of the elements: error ' + (b.lo === b.hi ? fmt(b.hi) + ' (' + b.to + ')' : 'from ' + b.from + ' to ' + b.to + ' ' + fmt(b.hi)) }));
    f.svg.appendChild(sv('text', { 'class': 'bar-text', x: ((x0 + x1) / 2).toFixed(1), y: (top - 3 - 10 * (k % 2)).toFixed(1), 'text-anchor': 'middle' }, pct(b.share)));
  });
  if (th !== null && th > 0) {
    var tx = f.X(th);
    f.svg.appendChild(sv('line', { 'class': 'threshold', x1: tx, x2: tx, y1: p.y, y2: p.y + p.h, 'stroke-dasharray': '6 4' }));
    f.svg.appendChild(sv('text', { 'class': 'threshold-text', x: tx + 4, y: p.y + 12 }, 'threshold ' + fmt(th) + (finite(v.within_share) ? ', ' + pct(v.within_share) + ' within' : '')));
  }
  return f.fig;
}

// mixed's trade-off: each model tried as a point, output error (log) against the share of MACs
// left in float16 (0-100%); the verifications joined in order, the tolerance a line, the chosen
// keep-list ringed. pts: [{ label, err, nonfinite, macs, kind: 'alone'|'level'|'verification', chosen, tip }].
function tradeoff(pts, spec) {
  var y = logAxis(pts.map(function (q) { return q.nonfinite ? null : q.err; }), finite(spec.tolerance) ? [spec.tolerance] : []);
  y.label = 'output error';
  var x = linAxis(0, 1, pct, 5);
  x.label = 'share of MACs left in float16';
  var f = frame({ id: spec.id, cls: 'tradeoff', title: spec.title, w: 620, h: 260, left: 60, x: x, y: y });
  if (finite(spec.tolerance) && spec.tolerance > 0) hline(f, spec.tolerance, 'tolerance ' + fmt(spec.tolerance), 'tolerance');
  var ver = pts.filter(function (q) { return q.kind === 'verification' && finite(q.macs); });
  if (ver.length > 1) f.svg.appendChild(sv('path', { 'class': 'trend-line', fill: 'none',
    d: ver.map(function (q, i) { return (i ? 'L' : 'M') + f.X(q.macs).toFixed(1) + ' ' + f.Y(q.nonfinite ? null : q.err).toFixed(1); }).join(' ') }));
  pts.forEach(function (q, i) {
    if (!finite(q.macs)) return;
    var cx = f.X(q.macs), cy = f.Y(q.nonfinite ? null : q.err);
    if (q.chosen) f.svg.appendChild(sv('circle', { 'class': 'chosen-ring', cx: cx.toFixed(1), cy: cy.toFixed(1), r: 9 }));
    point(f, cx, cy, q.tip, 'tp-' + q.kind + (q.chosen ? ' chosen' : ''), 4.5);
    f.svg.appendChild(sv('text', { 'class': 'pt-label', x: (cx - 8).toFixed(1), y: (cy - 8 - 11 * (i % 2)).toFixed(1), 'text-anchor': 'end' }, q.short + (q.chosen ? ' (chosen)' : '')));
  });
  return f.fig;
}
// mixed's speed panel (issue 55): each timed point's speed-up against float32 (log, its interval
// over rounds a bar) over its output error (log); float32 (1x) and the tolerance as lines, the
// chosen keep-list ringed, a point whose spread overlaps float32's hollow (no measurable difference).
// pts: [{ short, err, nonfinite, speedup, low, high, measurable, chosen, kind, tip }].
function speedup(pts, spec) {
  var tol = finite(spec.tolerance) && spec.tolerance > 0 ? spec.tolerance : null;
  var x = logAxis(pts.map(function (q) { return q.nonfinite ? null : q.err; }), tol ? [tol] : []);
  x.label = 'output error';
  var ys = [1];
  pts.forEach(function (q) { ys.push(q.speedup, q.low, q.high); });
  var y = logAxis(ys.filter(function (v) { return finite(v) && v > 0; }));
  y.ticks = y.ticks.map(function (t) { return { v: t.v, text: fmt(t.v) + 'x' }; });
  y.label = 'speed-up against float32';
  var f = frame({ id: spec.id, cls: 'speedup', title: spec.title, w: 620, h: 260, left: 60, x: x, y: y });
  var p = f.plot, one = f.Y(1);
  // float32's line, labelled at its left end under the line (the option alone, the worst error, is on the right)
  f.svg.appendChild(sv('line', { 'class': 'baseline', x1: p.x, x2: p.x + p.w, y1: one, y2: one, 'stroke-dasharray': '6 4' }));
  f.svg.appendChild(sv('text', { 'class': 'baseline-text', x: p.x + 4, y: one + 12 }, 'float32 (1x)'));
  if (tol) {
    var tx = f.X(tol);
    f.svg.appendChild(sv('line', { 'class': 'tolerance', x1: tx, x2: tx, y1: p.y, y2: p.y + p.h, 'stroke-dasharray': '6 4' }));
    f.svg.appendChild(sv('text', { 'class': 'tolerance-text', x: tx + 4, y: p.y + 12 }, 'tolerance ' + fmt(tol)));
  }
  var placed = [];
  pts.forEach(function (q) {
    var cx = f.X(q.nonfinite ? null : q.err), cy = f.Y(q.speedup);
    if (finite(q.low) && finite(q.high) && q.low > 0)
      f.svg.appendChild(sv('line', { 'class': 'speed-interval', x1: cx.toFixed(1), x2: cx.toFixed(1), y1: f.Y(q.low).toFixed(1), y2: f.Y(q.high).toFixed(1) }));
    if (q.chosen) f.svg.appendChild(sv('circle', { 'class': 'chosen-ring', cx: cx.toFixed(1), cy: cy.toFixed(1), r: 9 }));
    point(f, cx, cy, q.tip, 'tp-' + q.kind + (q.measurable ? '' : ' same') + (q.chosen ? ' chosen' : ''), 4.5);
    // points often sit together (keep-lists of one error): a label moves up past those placed before it
    // (left of the point, or right of it where the left would leave the plot)
    var w = 6 * q.short.length, right = cx - 8 - w < p.x, x1 = right ? cx + 8 + w : cx - 8, ly = cy - 8;
    for (var k = 0; k < 6 && placed.some(function (b) { return Math.abs(b.y - ly) < 11 && x1 - w < b.x && b.x - b.w < x1; }); k++) ly -= 11;
    placed.push({ x: x1, y: ly, w: w });
    f.svg.appendChild(sv('text', { 'class': 'pt-label', x: (right ? cx + 8 : cx - 8).toFixed(1), y: ly.toFixed(1), 'text-anchor': right ? 'start' : 'end' }, q.short));
  });
  return f.fig;
}
return { frame: frame, logAxis: logAxis, linAxis: linAxis, trend: trend, histogram: histogram, tradeoff: tradeoff, speedup: speedup, fmt: fmt, pct: pct };
})();
