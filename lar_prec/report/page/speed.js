// A sweep's speed beside its precision (workflows/sweep/speed.py): each option timed as a point,
// speed-up against the default run (with its interval) over its output error, the default run's
// output tolerance as a line, the front (within precision, measurably faster, beaten by none on
// both) marked. Drawn from the report's JSON only; its own section after the sweep's.
(function () {
'use strict';
var R = JSON.parse(document.getElementById('report-data').textContent);
var S = R.speed;
if (R.command !== 'sweep' || !S || S.off || !(R.options || []).length) return;
var NS = document.getElementById('chart').namespaceURI;  // the page's own svg: no URL spelled out
function mk(ns, tag, attrs, text) {
  var e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]); });
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function num(x, d) { return typeof x === 'number' ? x.toFixed(d) : '\u2014'; }
function errText(x) { return typeof x === 'number' ? x.toExponential(2) : '\u2014'; }

var anchor = document.getElementById('sweep-section');
var sec = mk(null, 'section', { id: 'speed-section' });
var h = mk(null, 'h2', null, 'Speed against precision ');
h.appendChild(mk(null, 'small', null, S.rounds + ' interleaved rounds of --warmup-iter ' + S.warmup_iter + ' --iter ' + S.iter +
  ' without dumps, ' + S.threads + ' thread(s) on ' + S.device + ', the same for every option'));
sec.appendChild(h);
sec.appendChild(mk(null, 'p', { 'class': 'dim' }, S.how));
anchor.parentNode.insertBefore(sec, anchor.nextSibling);

var front = new Set(S.front || []);
var timed = (R.options || []).filter(function (o) { return o.speed; });
var d = R['default'];

// the table: time per iteration, spread, speed-up with interval, beside the precision verdict
var t = mk(null, 'table', { id: 'speed-table' });
var head = mk(null, 'tr');
['option', 'ms per iteration (median)', 'spread (ms)', 'speed-up [interval]', 'speed beside precision'].forEach(function (c) { head.appendChild(mk(null, 'th', null, c)); });
t.appendChild(mk(null, 'thead')).appendChild(head);
var tb = t.appendChild(mk(null, 'tbody'));
(d && d.speed ? [Object.assign({}, d, { option: 'default (no option)' })] : []).concat(timed).forEach(function (o) {
  var s = o.speed, tr = mk(null, 'tr', { 'data-option': o.option, 'class': front.has(o.option) ? 'speed-front' : null });
  var iv = s.speedup_interval;
  [o.option + (front.has(o.option) ? ' \u2605' : ''), num(s.median_ms, 2),
   s.spread_ms ? num(s.spread_ms[0], 2) + ' \u2013 ' + num(s.spread_ms[1], 2) : '\u2014',
   typeof s.speedup === 'number' ? num(s.speedup, 2) + 'x [' + num(iv[0], 2) + ', ' + num(iv[1], 2) + ']' : '\u2014',
   o.speed_words || s.words].forEach(function (c) { tr.appendChild(mk(null, 'td', null, c)); });
  tb.appendChild(tr);
});
sec.appendChild(t);

// the scatter: x output error (log), y speed-up (linear, with its interval), tolerance line
var pts = timed.filter(function (o) { return typeof o.speed.speedup === 'number'; });
if (!pts.length) { sec.appendChild(mk(null, 'p', null, 'No option has a speed-up to plot (timing failed or the default run was not timed).')); return; }
var W = 720, H = 320, L = 60, RM = 20, T = 16, B = 44, pw = W - L - RM, ph = H - T - B;
var errs = pts.map(function (o) { return o.output_err; }).filter(function (x) { return typeof x === 'number' && x > 0; });
var tol = R.threshold && typeof R.threshold.value === 'number' ? R.threshold.value : null;
if (tol) errs.push(tol);
var lo = Math.floor(Math.log10(errs.length ? Math.min.apply(null, errs) : 1e-8)) - 1, hi = Math.ceil(Math.log10(errs.length ? Math.max.apply(null, errs) : 1));
if (hi <= lo) hi = lo + 1;
var ys = [1];
pts.forEach(function (o) { ys.push(o.speed.speedup_interval[0], o.speed.speedup_interval[1]); });
var y0 = Math.min.apply(null, ys) * 0.9, y1 = Math.max.apply(null, ys) * 1.1;
function X(e) { return L + (typeof e === 'number' && e > 0 ? (Math.log10(e) - lo) / (hi - lo) : 0) * pw; }
function Y(s) { return T + (1 - (s - y0) / (y1 - y0)) * ph; }
var svg = mk(NS, 'svg', { id: 'speed-plot', viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img', 'aria-label': 'speed-up against output error per option' });
svg.appendChild(mk(NS, 'rect', { x: L, y: T, width: pw, height: ph, fill: '#fcfcfc', stroke: '#ccc' }));
for (var k = lo; k <= hi; k++) svg.appendChild(mk(NS, 'text', { x: X(Math.pow(10, k)), y: H - B + 16, 'text-anchor': 'middle', 'font-size': 11, fill: '#555' }, '1e' + k));
svg.appendChild(mk(NS, 'text', { x: L + pw, y: H - 6, 'text-anchor': 'end', 'font-size': 11, fill: '#888' }, 'output error against the reference \u2192 (0 at the left edge)'));
svg.appendChild(mk(NS, 'text', { x: 12, y: T + ph / 2, 'font-size': 11, fill: '#888', transform: 'rotate(-90 12 ' + (T + ph / 2) + ')', 'text-anchor': 'middle' }, 'speed-up against the default run'));
[y0, 1, y1].forEach(function (v) { svg.appendChild(mk(NS, 'text', { x: L - 6, y: Y(v) + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#555' }, v.toFixed(2) + 'x')); });
svg.appendChild(mk(NS, 'line', { x1: L, x2: L + pw, y1: Y(1), y2: Y(1), stroke: '#999', 'stroke-dasharray': '3 3' }));
if (tol) {
  svg.appendChild(mk(NS, 'line', { 'class': 'speed-threshold', x1: X(tol), x2: X(tol), y1: T, y2: T + ph, stroke: '#d62d20', 'stroke-dasharray': '6 4' }));
  svg.appendChild(mk(NS, 'text', { x: X(tol) + 4, y: T + 12, 'font-size': 11, fill: '#d62d20' }, 'tolerance ' + errText(tol)));
}
var COLOR = { ok: '#3a9a5b', as_default: '#c67c00', diverges: '#d62d20' };
pts.forEach(function (o) {
  var s = o.speed, x = X(o.output_err), g = mk(NS, 'g', { 'class': 'speed-point' + (front.has(o.option) ? ' speed-front' : ''), 'data-option': o.option });
  g.appendChild(mk(NS, 'line', { x1: x, x2: x, y1: Y(s.speedup_interval[0]), y2: Y(s.speedup_interval[1]), stroke: '#888' }));
  g.appendChild(mk(NS, 'circle', { cx: x, cy: Y(s.speedup), r: front.has(o.option) ? 6 : 4, fill: COLOR[o.verdict] || '#8a8a8a',
    stroke: front.has(o.option) ? '#000' : 'none', 'stroke-width': 2 }));
  g.appendChild(mk(NS, 'text', { x: x + 8, y: Y(s.speedup) - 6, 'font-size': 11, fill: '#333' }, o.option + (front.has(o.option) ? ' \u2605' : '')));
  g.appendChild(mk(NS, 'title', null, (o.speed_words || o.option) + '; output error ' + errText(o.output_err)));
  svg.appendChild(g);
});
sec.appendChild(svg);
sec.appendChild(mk(null, 'p', { 'class': 'dim' }, '\u2605 the front: within precision (ok or as the default run), measurably faster, and no other such option both faster and more precise. ' +
  'Vertical bars: the speed-up\u2019s interval over rounds. Colour: green ok, amber as the default run, red diverges.'));
})();
