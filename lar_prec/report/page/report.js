(function () {
'use strict';
function fatal(msg) {
  var f = document.getElementById('fatal');
  f.hidden = false;
  f.textContent = 'The report script failed: ' + msg + ' (the JSON is in the page source).';
}
window.addEventListener('error', function (e) { fatal(e.message || String(e)); });
var t0 = (window.performance && performance.now) ? performance.now() : 0;

var R = JSON.parse(document.getElementById('report-data').textContent);
var SVGNS = document.getElementById('chart').namespaceURI;
var vars = R.vars || [], roots = R.roots || [], runs = R.runs || [];
var byId = new Map(), consumers = new Map(), rootRank = new Map();
vars.forEach(function (v, i) { v._i = (v.exec_index === undefined || v.exec_index === null) ? i : v.exec_index; v._p = i; byId.set(v.id, v); });
vars.forEach(function (v) { (v.inputs || []).forEach(function (u) { if (!consumers.has(u)) consumers.set(u, []); consumers.get(u).push(v.id); }); });
roots.forEach(function (r, k) { if (!rootRank.has(r.id)) rootRank.set(r.id, k + 1); });
var STATUS_COLOR = { ok: '#3a9a5b', index_equivalent: '#5fa87a', divergent: '#d62d20', nonfinite: '#8e44ad', shape_mismatch: '#c67c00', dtype_mismatch: '#c67c00', missing: '#8a8a8a' };
var STATUS_FILL = { ok: '#e3f3e8', index_equivalent: '#e3f3e8', divergent: '#fbd5d1', nonfinite: '#ead8f3', shape_mismatch: '#fbe7c6', dtype_mismatch: '#fbe7c6', missing: '#eeeeee' };

function el(tag, attrs) {
  var e = document.createElement(tag);
  setAttrs(e, attrs);
  for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
  return e;
}
function sv(tag, attrs) {
  var e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs);
  for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
  return e;
}
function setAttrs(e, attrs) {
  if (!attrs) return;
  Object.keys(attrs).forEach(function (k) {
    var val = attrs[k];
    if (val === undefined || val === null) return;
    if (k === 'class') e.setAttribute('class', val);
    else if (k === 'text') e.textContent = val;
    else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), val);
    else e.setAttribute(k, String(val));
  });
}
function add(e, c) {
  if (c === undefined || c === null) return;
  if (Array.isArray(c)) { c.forEach(function (x) { add(e, x); }); return; }
  e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
}
function fmt(x) {
  if (x === null || x === undefined) return '\u2014';
  if (typeof x !== 'number') return String(x);
  if (x === 0) return '0';
  var a = Math.abs(x);
  if (a >= 1e-3 && a < 1e4) return String(Number(x.toPrecision(3)));
  return x.toExponential(2);
}
// statuses that are no divergence (compare/records.py AGREEING): equal within the threshold, or
// indices that differ but index values that agree
function agrees(s) { return s === 'ok' || s === 'index_equivalent'; }
function shape(s) { return '(' + (s || []).join(',') + ')'; }
function statusBadge(s) { return el('span', { 'class': 'st st-' + s, text: s }); }
function varLink(id, label) {
  var v = byId.get(id);
  var text = label !== undefined ? label : (v ? v.name : 'var ' + id);
  return el('a', { 'class': 'var', title: v ? ('var ' + id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.status + ' \u00b7 max_err ' + fmt(v.max_err)) : ('var ' + id + ' (not compared)'),
                   onclick: function (ev) { ev.preventDefault(); select(id, true); } }, text);
}
function shq(s) { s = String(s); return /^[A-Za-z0-9_+=.,\/:@%^-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }

// ---------------------------------------------------------------- header
// one key/value of the page's header list (nothing for an empty value)
function metaRow(meta, k, v) {
  if (v === undefined || v === null || v === '') return;
  meta.appendChild(el('dt', null, k)); meta.appendChild(el('dd', null, v));
}
// where the inputs came from (seeded random when no --input was given) and the constant ones
function inputsRow(meta) {
  var s = R.input_summary;
  if (!s) return;
  var said = [s.line ? s.line.replace(/^inputs: /, '') : 'given'].concat(s.warnings || []);
  metaRow(meta, 'inputs', said.join('; '));
}
function header() {
  var bad = vars.some(function (v) { return !agrees(v.status); });
  var vd = document.getElementById('verdict');
  vd.textContent = R.verdict || (bad ? 'divergence found' : 'no divergence');
  vd.className = 'verdict ' + (bad ? 'bad' : 'good');
  var meta = document.getElementById('meta');
  var th = R.threshold || {};
  function row(k, v) { metaRow(meta, k, v); }
  row('command', R.command);
  row('model', R.model);
  row('cause', R.cause);
  inputsRow(meta);
  if (R.observer) row('observer check', R.observer.summary);
  if (R.algorithm_choice) row('algorithms', R.algorithm_choice.known ? R.algorithm_choice.how : 'not known: ' + (R.algorithm_choice.why || ''));
  if (R.storage && R.storage.how) row('disk', R.storage.how + (R.storage.pruned_runs ? ' (' + R.storage.vars_removed + ' var files of ' + R.storage.pruned_runs + ' runs not kept)' : ''));
  row('threshold', fmt(th.value) + ' (' + th.mode + ', metric ' + th.metric + ')' + (th.reason ? ': ' + th.reason : ''));
  if (th.per_dtype && Object.keys(th.per_dtype).length)
    row('per dtype', Object.keys(th.per_dtype).map(function (k) { return k + ' ' + fmt(th.per_dtype[k]); }).join(', '));
  var counts = {};
  vars.forEach(function (v) { counts[v.status] = (counts[v.status] || 0) + 1; });
  row('variables', [vars.length + ' compared: '].concat(Object.keys(counts).map(function (s) { return [statusBadge(s), ' ' + counts[s] + ' ']; })));
  row('roots', String(roots.length));
  var notes = document.getElementById('notes');
  (R.notes || []).forEach(function (n) { notes.appendChild(el('li', null, n)); });
  var diffs = R.environment_differences || [];
  if (diffs.length) {
    var box = document.getElementById('envdiff'), ul = document.getElementById('envdiff-list');
    box.hidden = false;
    diffs.forEach(function (d) {
      ul.appendChild(el('li', null, el('b', null, d.field + ': '), Object.keys(d.values || {}).map(function (k) { return k + ': ' + d.values[k]; }).join('; ')));
    });
  }
}

// ---------------------------------------------------------------- variable by column (sweep: options, devices: targets)
// One table for both views: a row per variable in execution order, a column per option or
// target, each cell the variable's max_err there, coloured by its status there (the status the
// report decided; the page decides none). Sortable by any column, filterable, paginated.
var MATRIX_PAGE = 200;
function badge(text, kind, title) { return el('span', { 'class': 'st st-' + kind, title: title, text: text }); }
function matrixView(box, spec) {
  var pos = new Map();
  spec.ids.forEach(function (id, i) { pos.set(id, i); });
  var cache = new Map();
  function cellOf(id, c) {
    var k = id + ' ' + c.key;
    if (!cache.has(k)) cache.set(k, spec.cell(id, c));
    return cache.get(k);
  }
  function name(id) { var v = byId.get(id); return v ? v.name : 'var ' + id; }
  function notOk(id) { return spec.cols.some(function (c) { var x = cellOf(id, c); return x.status !== 'ok' && x.status !== 'na'; }); }
  var st = { sort: 'variable', dir: 1, q: '', onlyBad: false, page: 0, rows: spec.ids.slice() };
  var filter = el('input', { type: 'search', id: spec.id + '-filter', size: 30, placeholder: 'filter: variable name, type or var id' });
  var only = el('input', { type: 'checkbox', id: spec.id + '-only-bad' });
  var info = el('span', { id: spec.id + '-info' });
  var prev = el('button', { type: 'button', id: spec.id + '-prev', text: '\u2039 prev' });
  var next = el('button', { type: 'button', id: spec.id + '-next', text: 'next \u203a' });
  box.appendChild(el('div', { 'class': 'controls' }, filter, el('label', null, only, ' only rows not ok somewhere'),
    el('span', null, prev, ' ', info, ' ', next)));
  var headRow = el('tr');
  var body = el('tbody');
  box.appendChild(el('div', { 'class': 'tablewrap mxwrap' }, el('table', { id: spec.id, 'class': 'matrix' }, el('thead', null, headRow), body)));
  var legend = el('div', { 'class': 'legend' });
  spec.legend.forEach(function (l) { legend.appendChild(el('span', { 'class': 'mx-key mx-' + l[0] }, l[1])); });
  box.appendChild(legend);
  var heads = [{ key: 'variable', label: 'variable', title: 'in execution order' }]
    .concat(spec.cols.map(function (c) { return { key: c.key, label: c.label, num: true, col: c, title: c.title }; }));
  function sortValue(id, h) {
    return h.col ? cellOf(id, h.col).sort : pos.get(id);
  }
  function order() {
    var h = heads.filter(function (x) { return x.key === st.sort; })[0];
    st.rows.sort(function (a, b) {
      var x = sortValue(a, h), y = sortValue(b, h);
      var xn = x === null || x === undefined, yn = y === null || y === undefined;
      if (xn || yn) return xn && yn ? pos.get(a) - pos.get(b) : (xn ? 1 : -1);   // not compared: last either way
      if (x < y) return -st.dir;
      if (x > y) return st.dir;
      return pos.get(a) - pos.get(b);
    });
  }
  function drawHead() {
    headRow.textContent = '';
    heads.forEach(function (h) {
      var cls = (h.num ? 'num ' : '') + (st.sort === h.key ? (st.dir > 0 ? 'sorted-asc' : 'sorted-desc') : '');
      headRow.appendChild(el('th', { 'class': cls, 'data-key': h.key, title: (h.title ? h.title + '; ' : '') + 'click to sort',
        onclick: function () {
          if (st.sort === h.key) st.dir = -st.dir; else { st.sort = h.key; st.dir = h.col ? -1 : 1; }  // errors: worst first
          st.page = 0; drawHead(); order(); draw();
        } }, h.label));
    });
  }
  function cellNode(id, c) {
    var x = cellOf(id, c);
    var td = el('td', { 'class': 'mx mx-' + x.status + (x.root ? ' mx-root' : ''), title: x.title, 'data-col': c.key },
      x.root ? el('span', { 'class': 'mx-tag', text: x.root }) : null, el('span', { 'class': 'mx-val', text: x.text }));
    if (x.sub !== undefined && x.sub !== null) td.appendChild(el('span', { 'class': 'mx-sub' }, x.sub));
    return td;
  }
  function draw() {
    var pages = Math.max(1, Math.ceil(st.rows.length / MATRIX_PAGE));
    st.page = Math.min(st.page, pages - 1);
    var start = st.page * MATRIX_PAGE, slice = st.rows.slice(start, start + MATRIX_PAGE);
    var frag = document.createDocumentFragment();
    slice.forEach(function (id) {
      var v = byId.get(id);
      frag.appendChild(el('tr', { 'data-id': id, 'class': rootRank.has(id) ? 'root-row' : null },
        el('td', { 'class': 'name' }, varLink(id), v ? el('span', { 'class': 'dim' }, ' ' + v.opr_type) : null),
        spec.cols.map(function (c) { return cellNode(id, c); })));
    });
    body.textContent = '';
    body.appendChild(frag);
    info.textContent = st.rows.length ? 'rows ' + (start + 1) + '\u2013' + (start + slice.length) + ' of ' + st.rows.length +
      (st.rows.length !== spec.ids.length ? ' (filtered from ' + spec.ids.length + ')' : '') : 'no matching variables';
    prev.disabled = st.page === 0;
    next.disabled = st.page >= pages - 1;
  }
  function refilter() {
    var q = st.q.trim().toLowerCase();
    var idq = /^#?\d+$/.test(q) ? Number(q.replace('#', '')) : null;
    st.rows = spec.ids.filter(function (id) {
      if (st.onlyBad && !notOk(id)) return false;
      if (!q) return true;
      var v = byId.get(id);
      return id === idq || name(id).toLowerCase().indexOf(q) >= 0 || (v && v.opr_type.toLowerCase().indexOf(q) >= 0);
    });
    st.page = 0;
    order();
    draw();
  }
  var timer = null;
  filter.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(function () { st.q = filter.value; refilter(); }, 120); });
  only.addEventListener('change', function () { st.onlyBad = only.checked; refilter(); });
  prev.addEventListener('click', function () { st.page--; draw(); });
  next.addEventListener('click', function () { st.page++; draw(); });
  drawHead();
  order();
  draw();
}
function errCell(err, nonfinite) {
  // the sort key of an error: NaN/Inf is the worst, not compared (null) sorts last
  return nonfinite ? { text: 'NaN/Inf', sort: Infinity } : (err === null || err === undefined ? { text: '\u2014', sort: null } : { text: fmt(err), sort: err });
}

// ---------------------------------------------------------------- sweep: options, and option by variable
var OPTION_STATUS = { runs: 'runs', load_failed: 'load failed', crashed: 'crashed (signal)', hung: 'hung (timed out)', stalled: 'stalled (no CPU)', bad_dump: 'dump unreadable', skipped: 'skipped' };
var VERDICT_TEXT = { ok: 'ok', diverges: 'diverges', as_default: 'as default' };
function localSummary(o) {
  // one option's local error: its top local root over its floor ("words": as the terminal says it), "none", or why it was not measured
  // then, for an option whose dump had the default run's bits, that its local error was taken from it
  var loc = o.local;
  if (!loc) return '';
  var taken = loc.same_words ? ' (' + loc.same_words + ')' : '';
  if (!loc.measured) {
    var why = loc.why || '', i = why.indexOf(': ');
    return 'not measured' + (why ? ': ' + (i < 0 ? why : why.slice(i + 2)) : '') + taken;
  }
  var missing = (loc.not_measured || []).length ? ', ' + loc.not_measured.length + ' not measured' : '';
  if (!(loc.roots || []).length) return 'none (' + loc.n_measured + ' measured' + missing + ')' + taken;
  var r = loc.roots[0];
  return [varLink(r.id, r.name), ' (' + r.opr_type + ') ' + r.words +
    (loc.roots.length > 1 ? ' +' + (loc.roots.length - 1) + ' more' : '') + missing + taken];
}
function optionWhy(o) {
  // the cause or reason; for an option as the default run, what it shares with it; then, where
  // its run was made once more, whether its wrong value repeated (nondeterminism.words)
  var shared = o.shared_roots || [], why;
  if (o.verdict !== 'as_default') why = o.cause || o.reason || '';
  else why = shared.length ? 'the default kernels\u2019 own roots: ' + shared.join(', ')
    : 'outputs ' + fmt(o.default_err) + ' from the default run\u2019s: what the default run shows';
  var again = (o.nondeterminism || {}).words || '';
  return why && again ? why + '; ' + again : why || again;
}
function sweepSection() {
  var O = R.options || [];
  if (R.command !== 'sweep' || !O.length) return;
  document.getElementById('sweep-section').hidden = false;
  var t = el('table', { id: 'sweep-options' });
  var heads = [['option'], ['status'], ['paired', 'num', 'reference vars paired with a var of the option\u2019s run'],
    ['output error (tolerance)', null, 'max_err of the final outputs, and their tolerance: max(band, 2 x the level correct kernels reach in the same arithmetic)'],
    ['verdict', null, 'as default: what it shows is the default run\u2019s own (its roots, its output error); diverges: it adds something over the default run'],
    ['root', null, 'where divergence starts under the option'],
    ['local root (margin)', null, 'the operator run under the option on the reference\u2019s inputs: its error over its own noise floor'], ['cause / reason']];
  t.appendChild(el('thead', null, el('tr', null, heads.map(function (h) { return el('th', { 'class': h[1] || null, title: h[2] }, h[0]); }))));
  var tb = el('tbody');
  var rows = (R['default'] ? [Object.assign({}, R['default'], { label: 'default (no option)' })] : []).concat(O);
  rows.forEach(function (o) {
    var ran = o.status === 'runs', loc = o.local || {};
    var root = o.root ? [varLink(o.root.reference_id, o.root.name), el('span', { 'class': 'dim' }, ' ' + o.root.opr_type + (o.root.nonfinite ? ' \u00b7 NaN/Inf' : (o.root.max_err === null || o.root.max_err === undefined ? '' : ' \u00b7 ' + fmt(o.root.max_err))))] : '';
    tb.appendChild(el('tr', { 'class': o.verdict === 'diverges' ? 'root-row' : null, 'data-option': o.label ? 'default' : o.option },
      el('td', { 'class': 'opt', title: (o.flags || []).join(' ') }, o.label || o.option),
      el('td', null, badge(OPTION_STATUS[o.status] || o.status, 'opt-' + o.status)),
      el('td', { 'class': 'num' }, ran ? o.vars_paired + '/' + o.vars_total : ''),
      el('td', { 'class': 'why' }, ran ? (o.output_words || '') : ''),
      el('td', null, o.verdict ? badge(VERDICT_TEXT[o.verdict] || o.verdict, 'verdict-' + o.verdict) : '\u2014'),
      el('td', { 'class': 'wrap' }, root),
      el('td', { 'class': 'local' + ((loc.roots || []).length ? ' local-root' : (loc.measured === false ? ' local-off' : '')) }, localSummary(o)),
      el('td', { 'class': 'why' }, optionWhy(o))));
  });
  t.appendChild(tb);
  document.getElementById('sweep-options-box').appendChild(t);
  var ran = O.filter(function (o) { return o.status === 'runs'; });
  if (!ran.length) { document.getElementById('sweep-matrix').appendChild(el('p', null, 'No option ran: nothing to compare.')); return; }
  var rootsOf = {};  // option -> ids of its roots: the local roots it adds over the default run, or where divergence starts by the dumps
  ran.forEach(function (o) {
    var s = rootsOf[o.option] = new Set();
    if (o.verdict !== 'diverges') return;
    var told = (o.added_roots || []).length || (o.shared_roots || []).length;
    if (o.local && o.local.measured) (o.local.roots || []).forEach(function (r) { if (!told || o.added_roots.indexOf(r.name) >= 0) s.add(r.id); });
    if (o.root && o.root.reference_id !== null && o.root.reference_id !== undefined) s.add(o.root.reference_id);
  });
  var d = R['default'] && R['default'].status === 'runs' ? R['default'] : null;
  var cols = ran.map(function (o) { return { key: o.option, label: o.option, o: o, title: 'max_err under ' + o.option + ' (tolerance ' + fmt(o.tolerance) + ')' }; });
  if (d) cols.unshift({ key: 'default', label: 'default', o: d, plain: true, title: 'max_err of the default run, no option (tolerance ' + fmt(d.tolerance) + ')' });
  matrixView(document.getElementById('sweep-matrix'), {
    id: 'sweep-matrix-table', ids: vars.map(function (v) { return v.id; }),
    cols: cols,
    legend: [['ok', 'within'], ['divergent', 'diverges under the option (beyond the default run)'], ['nonfinite', 'NaN/Inf'], ['na', '\u2014 not compared (no partner in the option\u2019s graph)'], ['root', 'root: where it starts under the option']],
    cell: function (id, c) {
      var v = byId.get(id), o = c.o;
      var err = c.plain ? v['default'] : (v.options || {})[o.option];
      var nonfinite = !c.plain && (v.options_nonfinite || []).indexOf(o.option) >= 0;
      var divergent = c.plain ? !!v.default_divergent : (v.options_divergent ? v.options_divergent.indexOf(o.option) >= 0 : (err !== null && err !== undefined && err > o.tolerance));
      var root = c.plain ? (o.verdict === 'diverges' && o.root && o.root.reference_id === id) : rootsOf[o.option].has(id);
      var x = errCell(err, nonfinite);
      x.status = nonfinite ? 'nonfinite' : (divergent || root ? 'divergent' : (err === null || err === undefined ? 'na' : 'ok'));
      x.root = root ? (o.local && o.local.measured ? 'local root' : 'root') : null;
      var under = c.plain ? 'the default run' : o.option;
      var tip = v.name + ' under ' + under + ': max_err ' + x.text + ' (tolerance ' + fmt(o.tolerance) + ')';
      var hasLocal = !c.plain && v.local && Object.prototype.hasOwnProperty.call(v.local, o.option);
      if (hasLocal) {
        x.sub = 'local ' + fmt(v.local[o.option]);
        tip += '\nlocal error ' + (v.local[o.option] === null ? '\u2014 (NaN/Inf or not measured)' : fmt(v.local[o.option])) + ': the operator alone under the option, on the reference\u2019s inputs';
      }
      if (x.status === 'na') tip += '\nnot compared: no var of that name in the option\u2019s rewritten graph';
      if (root) tip += '\n' + x.root + ' of ' + under;
      else if (divergent) tip += '\ndiverges under ' + under;
      x.title = tip;
      return x;
    }
  });
}

// ---------------------------------------------------------------- shake: runs by operator
// The cause of a var as a short text: the phrase; an inherited one names its root.
function causeText(v) {
  if (!v || !v.cause) return null;
  if (v.cause === 'inherited from root' && v.cause_root !== undefined && v.cause_root !== null) {
    var r = byId.get(v.cause_root);
    return 'inherited from root ' + (r ? r.name : '') + ' (var ' + v.cause_root + ')';
  }
  return v.cause + (v.cause_detail ? ': ' + v.cause_detail : '');
}
function shortAlgo(a) { return String(a).replace(/^CONVOLUTION_DEFAULT_/, ''); }
function shakeSection() {
  if (R.command !== 'shake' || !(R.shake_runs || []).length) return;
  var ids = vars.filter(function (v) { return v.status !== 'ok' || v.algorithm_differs; }).map(function (v) { return v.id; });
  var sec = document.getElementById('shake-section');
  sec.hidden = false;
  var info = document.getElementById('shake-info');
  var ag = (R.local || {}).agreement;
  if (ag) info.appendChild(el('p', { id: 'shake-agreement', 'class': ag.agree ? null : 'warn' }, (ag.agree ? 'Dump roots and local error: ' : '') + ag.why));
  if (!ids.length) { document.getElementById('shake-matrix').appendChild(el('p', null, 'No operator differs between the runs' + (R.algorithm_choice && R.algorithm_choice.known ? ', and no algorithm choice either.' : '.'))); return; }
  var base = R.shake_runs[0].label;
  matrixView(document.getElementById('shake-matrix'), {
    id: 'shake-matrix-table', ids: ids,
    cols: R.shake_runs.map(function (r) { return { key: r.label, label: r.label, r: r, title: r.label + ': ' + (r.setting || '') + ' (' + r.role + ')' }; }),
    legend: [['ok', 'run 1\u2019s result'], ['divergent', 'another result than run 1'], ['na', '\u2014 not dumped in that run'], ['root', 'root']],
    cell: function (id, c) {
      var v = byId.get(id), lbl = c.key;
      var groups = v.results || null, err = null, same = true, found = false;
      if (groups) groups.forEach(function (g, k) { if ((g.runs || []).indexOf(lbl) >= 0) { found = true; err = g.max_err; same = k === 0; } });
      else { found = true; err = 0; }
      var x = found ? errCell(err, false) : { text: '\u2014', sort: null };
      x.status = !found ? 'na' : (same ? 'ok' : 'divergent');
      x.root = rootRank.has(id) ? 'root' : null;
      var algo = (v.algorithms || {})[lbl];
      if (algo) x.sub = shortAlgo(algo);
      var loc = (v.local_by_run || {})[lbl];
      var tip = v.name + ' in ' + lbl + ': ' + (found ? (same ? 'the same result as ' + base : 'max_err ' + x.text + ' against ' + base) : 'not dumped');
      if (algo) tip += '\nalgorithm: ' + algo;
      if (loc !== undefined) tip += '\nlocal error (this run\u2019s operator on ' + base + '\u2019s inputs): ' + fmt(loc);
      var ct = causeText(v);
      if (ct) tip += '\ncause: ' + ct;
      x.title = tip;
      return x;
    }
  });
}

// ---------------------------------------------------------------- devices: targets, and target by variable
function targetsSection() {
  var T = R.targets || [];
  if (!T.length) return;
  document.getElementById('targets-section').hidden = false;
  var box = document.getElementById('targets');
  function statusOf(x, id) {
    var s = (x.not_ok_status || {})[id];
    return s || ((x.not_ok || []).indexOf(Number(id)) >= 0 ? 'divergent' : 'ok');
  }
  var t = el('table', { id: 'targets-table' });
  t.appendChild(el('thead', null, el('tr', null, el('th', null, 'target'), el('th', null, 'verdict'), el('th', { 'class': 'num' }, 'final-output max_err'),
    el('th', null, 'first root'), el('th', null, 'pairing'), el('th', null, 'environment'))));
  var tb = el('tbody');
  T.forEach(function (x) {
    var env = x.environment || {};
    var root = x.root ? [varLink(x.root.id, x.root.name), el('span', { 'class': 'dim' }, ' ' + x.root.opr_type + ' \u00b7 var ' + x.root.id)] : '\u2014';
    var outNan = (x.final_outputs || []).some(function (id) { return statusOf(x, id) === 'nonfinite'; });
    var pd = x.pairing_detail || {};
    tb.appendChild(el('tr', { 'class': x.diverged ? 'root-row' : null, 'data-target': x.target },
      el('td', { 'class': 'opt' }, x.target, x.reference ? el('span', { 'class': 'dim' }, ' (reference)') : null),
      el('td', null, badge(x.diverged ? 'diverges' : 'agrees', x.diverged ? 'verdict-diverges' : 'verdict-ok'), ' ', (x.verdict || '').replace(/^(diverges|agrees): /, '')),
      el('td', { 'class': 'num' }, x.final_output_max_err === null && outNan ? 'NaN/Inf' : fmt(x.final_output_max_err)),
      el('td', { 'class': 'wrap' }, root),
      el('td', { title: pd.how === 'name' ? 'its graph differs from the reference\u2019s: ' + pd.compared + ' of ' + pd.reference_vars + ' reference vars paired by name and compared' : 'the same vars as the reference: paired by var id' },
        pd.how === 'name' ? 'by name (' + pd.compared + '/' + pd.reference_vars + ')' : 'by id'),
      el('td', null, [env.cpu_model, env.android_model, env.load_and_run_version].filter(function (v) { return v; }).join(' \u00b7 '))));
  });
  t.appendChild(tb);
  box.appendChild(t);
  // target by variable: every variable compared on some target, in the shown target's execution order
  var ids = [], seen = new Set();
  vars.forEach(function (v) { if (T.some(function (x) { return (x.max_err_by_var || {})[v.id] !== undefined; })) { seen.add(v.id); ids.push(v.id); } });
  var extra = [];
  T.forEach(function (x) { Object.keys(x.max_err_by_var || {}).forEach(function (k) { if (!seen.has(+k)) { seen.add(+k); extra.push(+k); } }); });
  ids = ids.concat(extra.sort(function (a, b) { return a - b; }));
  var sub = el('div', { id: 'target-var' });
  box.appendChild(el('h3', null, 'Target by variable ', el('small', null, 'max_err of each variable on each target against the reference')));
  box.appendChild(sub);
  matrixView(sub, {
    id: 'target-var-table', ids: ids,
    cols: T.map(function (x) { return { key: x.target, label: x.target, x: x, title: 'max_err on ' + x.target + (x.reference ? ' (the reference target)' : '') }; }),
    legend: [['ok', 'ok'], ['divergent', 'divergent'], ['nonfinite', 'NaN/Inf'], ['shape_mismatch', 'shape or dtype differs'], ['na', '\u2014 not compared on that target'], ['root', 'first root of the target']],
    cell: function (id, c) {
      var x = c.x, by = x.max_err_by_var || {};
      var has = by[id] !== undefined, s = has ? statusOf(x, id) : 'na';
      var r = errCell(has ? by[id] : null, s === 'nonfinite' && by[id] === null);
      r.status = s;
      r.root = x.root && x.root.id === id ? 'root' : null;
      r.title = (byId.has(id) ? byId.get(id).name : 'var ' + id) + ' on ' + x.target + ': ' + (has ? s + ', max_err ' + r.text : 'not compared (not paired with a reference var)') + (r.root ? '\nfirst root of ' + x.target : '');
      return r;
    }
  });
}

// ---------------------------------------------------------------- roots
var ROOT_ROWS = 200, ROOT_CARDS = 10;
function rootsSection() {
  var box = document.getElementById('roots');
  if (!roots.length) {
    document.getElementById('cards-section').hidden = true;
    box.appendChild(el('p', null, vars.some(function (v) { return !agrees(v.status); })
      ? 'No root: every variable that is not ok has an input that is not ok (or was not compared).'
      : 'No root: no variable diverges.'));
    return;
  }
  var t = el('table', { id: 'roots-table' });
  // roots by local error: each with its local error, its own floor and the margin
  var byLocal = roots.some(function (r) { return r.rule === 'local'; });
  var heads = ['#', 'var', 'name', 'operator', 'type', 'status', 'max_err', 'input max_err', 'amplification'];
  if (byLocal) heads = heads.concat(['local', 'floor', 'margin', 'failed']);
  var withCause = roots.some(function (r) { return r.cause; });
  if (withCause) heads = heads.concat(['cause']);
  t.appendChild(el('thead', null, el('tr', null, heads.map(function (h, i) {
    return el('th', { 'class': i === 0 || i === 1 || i >= 6 ? 'num' : null }, h); }))));
  var tb = el('tbody');
  var shown = Math.min(roots.length, ROOT_ROWS);
  roots.slice(0, shown).forEach(function (r, k) {
    var amp = r.amplification !== null && r.amplification !== undefined ? fmt(r.amplification) + '\u00d7'
            : (r.input_max_err === 0 && r.max_err ? 'inputs exact' : '\u2014');
    tb.appendChild(el('tr', { 'class': 'root-row' }, el('td', { 'class': 'num' }, String(k + 1)), el('td', { 'class': 'num' }, varLink(r.id, String(r.id))),
      el('td', { 'class': 'name' }, varLink(r.id, r.name)), el('td', { 'class': 'name mono' }, r.opr), el('td', null, r.opr_type),
      el('td', null, statusBadge(r.status || (byId.has(r.id) ? byId.get(r.id).status : 'divergent'))),
      el('td', { 'class': 'num' }, r.max_err === null && r.status && r.status !== 'divergent' ? r.status.replace('_', ' ') : fmt(r.max_err)),
      el('td', { 'class': 'num' }, fmt(r.input_max_err)), el('td', { 'class': 'num' }, amp),
      byLocal ? [el('td', { 'class': 'num' }, fmt(r.local_err)), el('td', { 'class': 'num' }, fmt(r.floor)),
        el('td', { 'class': 'num' }, r.margin === null || r.margin === undefined ? '\u2014' : fmt(r.margin) + '\u00d7'),
        // which tests it failed (issue 57): one element far off, or every element a little
        el('td', { title: spreadText(byId.get(r.id)) }, (r.tests || []).map(function (x) { return x.replace(/_/g, ' '); }).join(', '))] : null,
      withCause ? el('td', { 'class': 'why' }, r.cause_text || r.cause || '') : null));
  });
  t.appendChild(tb);
  box.appendChild(t);
  if (roots.length > shown) box.appendChild(el('p', null, (roots.length - shown) + ' more roots: filter the variable table by name or id, or read the JSON.'));
  var cards = document.getElementById('cards'), next = 0;
  // Cards are drawn a few at a time: thousands of roots must not stall the page.
  function more() {
    var stop = Math.min(roots.length, next + ROOT_CARDS);
    for (; next < stop; next++) cards.insertBefore(rootCard(roots[next], next + 1), btn);
    btn.hidden = next >= roots.length;
    btn.textContent = 'show ' + Math.min(ROOT_CARDS, roots.length - next) + ' more roots (' + (roots.length - next) + ' left)';
  }
  var btn = el('button', { type: 'button', id: 'more-roots', onclick: more });
  cards.appendChild(btn);
  more();
}
function rootCard(r, rank) {
  var card = el('div', { 'class': 'rootcard', id: 'root-' + rank });
  card.appendChild(el('h3', null, 'Root #' + rank + ': ', varLink(r.id, r.name), ' ', el('span', { 'class': 'mono' }, '(' + r.opr_type + ', var ' + r.id + ')')));
  if (r.note) card.appendChild(el('p', null, r.note));
  if (r.module_how) card.appendChild(el('p', { 'class': 'module' }, r.module ? 'module: ' + r.module + ' (' + r.module_how + ')' : 'module: ' + r.module_how));
  if (r.path && r.path.length) {
    var p = el('div', { 'class': 'path' }, el('b', null, 'path from input: '));
    r.path.forEach(function (id, i) {
      var v = byId.get(id);
      if (i) p.appendChild(el('span', null, '\u2192'));
      p.appendChild(el('span', { 'class': 'chip' + (id === r.id ? ' is-root' : ''), style: 'border-left: 4px solid ' + (v ? STATUS_COLOR[v.status] : '#bbb') },
        varLink(id), ' ', el('span', { 'class': 'mono' }, v ? fmt(v.max_err) : '')));
    });
    card.appendChild(p);
  }
  card.appendChild(el('div', { 'class': 'graphbox' }, neighbourhood(r, rank)));
  return card;
}

// ---------------------------------------------------------------- neighbourhood graph
// a var's statistics as lar-prec node prints them (report/triage.py): status, error, its
// threshold, cosine, quantiles, share within the threshold, local error where measured
function pct(x) { return typeof x === 'number' ? (x >= 1 ? '100%' : (Math.floor(x * 1e4) / 100).toFixed(2) + '%') : '\u2014'; }
function cosShort(x) { return typeof x === 'number' ? x.toFixed(4) : '\u2014'; }
function nodeStats(v) {
  var lines = [v.status + ' \u00b7 max_err ' + fmt(v.max_err) + ' \u00b7 threshold ' + fmt(v.threshold) + ' \u00b7 cosine ' + (typeof v.cosine === 'number' ? v.cosine.toFixed(6) : '\u2014'),
    'error p50 ' + fmt(v.err_p50) + ' \u00b7 p90 ' + fmt(v.err_p90) + ' \u00b7 p99 ' + fmt(v.err_p99) + ' \u00b7 p99.9 ' + fmt(v.err_p999) + ' \u00b7 within ' + pct(v.within_share)];
  if (v.local_err !== undefined) lines.push('local error ' + fmt(v.local_err) + (v.label ? ' (' + v.label + ')' : ''));
  if (v.spread) lines.push(spreadText(v));
  return lines.join('\n');
}
// a sum's distribution over its elements in rounding units, each test beside its limit (issue 57)
function spreadText(v) {
  var s = v && v.spread;
  if (!s) return '';
  return 'rounding units: worst ' + fmt(v.units_max) + ' \u00b7 rms ' + fmt(s.units_rms) + ' (limit ' + fmt(s.rms_limit) + ')'
    + ' \u00b7 above one ' + pct(s.frac_above_one) + ' (limit ' + pct(s.frac_above_one_limit) + ')'
    + ' \u00b7 channel chi2 ' + fmt(s.channel_chi2) + ' (limit ' + fmt(s.channel_chi2_limit) + ', ' + s.channels + ' channels; channel '
    + s.worst_channel + ' mean ' + fmt(s.worst_channel_mean) + ' over ' + s.worst_channel_n + ')'
    + (s.detectable_fault != null ? ' \u00b7 finds a weight fault of ' + fmt(s.detectable_fault) + ' and up' : '')
    + (s.failed && s.failed.length ? ' \u00b7 failed: ' + s.failed.join(', ') : '');
}
var MAX_PER_LAYER = 10;
function neighbourhood(r, rank) {
  // layer: -2 inputs of inputs, -1 inputs, 0 root, +1 consumers (+2 their consumers when listed)
  var layer = new Map([[r.id, 0]]);
  var given = (r.neighbourhood || []).length ? new Set(r.neighbourhood) : null;
  function inputsOf(id) { var v = byId.get(id); return v ? v.inputs || [] : []; }
  function usersOf(id) { return consumers.get(id) || []; }
  var frontier = [r.id];
  for (var d = 1; d <= 2; d++) {
    var next = [];
    frontier.forEach(function (id) { inputsOf(id).forEach(function (u) {
      if (!layer.has(u) && (!given || given.has(u))) { layer.set(u, -d); next.push(u); } }); });
    frontier = next;
  }
  frontier = [r.id];
  for (d = 1; d <= (given ? 2 : 1); d++) {
    next = [];
    frontier.forEach(function (id) { usersOf(id).forEach(function (u) {
      if (!layer.has(u) && (!given || given.has(u))) { layer.set(u, d); next.push(u); } }); });
    frontier = next;
  }
  var cols = new Map();
  layer.forEach(function (l, id) { if (!cols.has(l)) cols.set(l, []); cols.get(l).push(id); });
  var keys = Array.from(cols.keys()).sort(function (a, b) { return a - b; });
  var pos = new Map(), hidden = new Map();
  var W = 210, BW = 180, BH = 47, GAP = 57, PAD = 10;
  var maxRows = 1;
  keys.forEach(function (l, ci) {
    var ids = cols.get(l).sort(function (a, b) { var va = byId.get(a), vb = byId.get(b); return (va ? va._p : 1e12) - (vb ? vb._p : 1e12) || a - b; });
    if (ids.length > MAX_PER_LAYER) { hidden.set(ci, ids.length - MAX_PER_LAYER + 1); ids = ids.slice(0, MAX_PER_LAYER - 1); }
    ids.forEach(function (id, ri) { pos.set(id, { x: PAD + ci * W, y: PAD + ri * GAP }); });
    maxRows = Math.max(maxRows, ids.length + (hidden.has(ci) ? 1 : 0));
  });
  var width = PAD * 2 + (keys.length - 1) * W + BW, height = PAD * 2 + maxRows * GAP;
  var svg = sv('svg', { 'class': 'graph', id: 'graph-' + rank, width: width, height: height, viewBox: '0 0 ' + width + ' ' + height });
  var mid = 'arrow-' + rank;
  svg.appendChild(sv('defs', null, sv('marker', { id: mid, viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    sv('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#999' }))));
  pos.forEach(function (p, id) {
    inputsOf(id).forEach(function (u) {
      var q = pos.get(u);
      if (!q || q.x >= p.x) return;
      var x1 = q.x + BW, y1 = q.y + BH / 2, x2 = p.x, y2 = p.y + BH / 2, mx = (x1 + x2) / 2;
      svg.appendChild(sv('path', { d: 'M' + x1 + ' ' + y1 + ' C' + mx + ' ' + y1 + ' ' + mx + ' ' + y2 + ' ' + x2 + ' ' + y2,
        fill: 'none', stroke: '#999', 'stroke-width': 1.2, 'marker-end': 'url(#' + mid + ')' }));
    });
  });
  pos.forEach(function (p, id) {
    var v = byId.get(id);
    var st = v ? v.status : 'missing';
    var isRoot = id === r.id;
    var g = sv('g', { 'class': 'node', transform: 'translate(' + p.x + ',' + p.y + ')', onclick: function () { select(id, true); } });
    g.appendChild(sv('title', { text: v ? (v.name + '\nvar ' + id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.dtype + shape(v.shape) + '\n' + nodeStats(v)) : ('var ' + id + ' (not compared)') }));
    g.appendChild(sv('rect', { width: BW, height: BH, rx: 5, fill: STATUS_FILL[st] || '#eee', stroke: isRoot ? '#d62d20' : (STATUS_COLOR[st] || '#999'), 'stroke-width': isRoot ? 3 : 1 }));
    var name = v ? v.name : 'var ' + id;
    if (name.length > 25) name = name.slice(0, 24) + '\u2026';
    g.appendChild(sv('text', { x: 6, y: 14, text: name, 'font-weight': isRoot ? 'bold' : null }));
    g.appendChild(sv('text', { x: 6, y: 28, fill: '#555', text: (v ? (v.opr_type.length > 14 ? v.opr_type.slice(0, 13) + '\u2026' : v.opr_type) + ' ' + fmt(v.max_err) : 'not compared') }));
    if (v) g.appendChild(sv('text', { x: 6, y: 41, fill: '#555', 'font-size': '11px', text: 'p99 ' + fmt(v.err_p99) + ' \u00b7 cos ' + cosShort(v.cosine) + (v.local_err !== undefined ? ' \u00b7 loc ' + fmt(v.local_err) : '') }));
    svg.appendChild(g);
  });
  hidden.forEach(function (n, ci) {
    svg.appendChild(sv('text', { x: PAD + ci * W + 6, y: PAD + (MAX_PER_LAYER - 1) * GAP + 20, fill: '#666', text: '+' + n + ' more' }));
  });
  return svg;
}

// ---------------------------------------------------------------- chart
// what the vars' max_err (the chart's and the histogram's values) compares, in each command's terms
function runOf(dir) {
  var r = runs.filter(function (x) { return x.dir && dir && (dir === x.dir || dir.indexOf(x.dir + '/') === 0); })[0];
  return r ? 'run ' + r.label : dir;
}
function chartSubject() {
  var d = R.dirs || {}, n = (R.options || []).filter(function (o) { return o.status === 'runs'; }).length;
  if (R.command === 'sweep') return 'each variable\u2019s largest max_err over the ' + n + ' option(s) that ran, against the naive reference';
  if (R.command === 'devices') return 'max_err on target ' + R.shown_target + ' (the target shown) against the naive run on ' + R.reference;
  if (R.command === 'shake' && (R.shake_runs || []).length) return 'each variable\u2019s largest max_err over the ' + R.shake_runs.length + ' runs against ' + R.shake_runs[0].label;
  if (R.command === 'diff') return 'max_err of side B against side A';
  if (d.a && d.b) return 'max_err of ' + runOf(d.b) + ' against ' + runOf(d.a);
  return 'each variable\u2019s max_err';
}
function chart() {
  document.getElementById('chart-subject').textContent = chartSubject() + '; log scale; click a point for details';
  document.getElementById('chart').setAttribute('aria-label', 'error along execution order: ' + chartSubject());
  var svg = document.getElementById('chart');
  var Wd = 1000, H = 320, L = 62, Rm = 12, T = 26, B = 40;
  var pw = Wd - L - Rm, ph = H - T - B;
  var n = vars.length;
  var th = R.threshold && typeof R.threshold.value === 'number' ? R.threshold.value : null;
  var lo = Infinity, hi = -Infinity;
  vars.forEach(function (v) { if (typeof v.max_err === 'number' && v.max_err > 0) { lo = Math.min(lo, v.max_err); hi = Math.max(hi, v.max_err); } });
  if (th && th > 0) { lo = Math.min(lo, th); hi = Math.max(hi, th); }
  if (!isFinite(lo)) { lo = 1e-8; hi = 1; }
  var l0 = Math.floor(Math.log10(lo)), l1 = Math.ceil(Math.log10(hi));
  if (l1 <= l0) l1 = l0 + 1;
  function X(i) { return L + (n > 1 ? i / (n - 1) : 0.5) * pw; }
  function Y(e) {
    if (e === null || e === undefined) return T - 12;            // no value (missing, shape mismatch): band above
    if (e <= 0) return T + ph + 12;                               // exact: band below the axis
    return T + ph - (Math.log10(e) - l0) / (l1 - l0) * ph;
  }
  svg.appendChild(sv('rect', { x: L, y: T, width: pw, height: ph, fill: '#fcfcfc', stroke: '#ccc' }));
  var step = Math.max(1, Math.ceil((l1 - l0) / 10));
  for (var k = l0; k <= l1; k += step) {
    var y = Y(Math.pow(10, k));
    svg.appendChild(sv('line', { x1: L, x2: L + pw, y1: y, y2: y, stroke: '#eee' }));
    svg.appendChild(sv('text', { x: L - 6, y: y + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: '1e' + k }));
  }
  svg.appendChild(sv('text', { x: L - 6, y: T + ph + 16, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: '0' }));
  svg.appendChild(sv('text', { x: L - 6, y: T - 8, 'text-anchor': 'end', 'font-size': 11, fill: '#555', text: 'n/a' }));
  var xt = Math.max(1, Math.round(n / 10));
  for (var i = 0; i < n; i += xt) {
    svg.appendChild(sv('text', { x: X(i), y: H - 8, 'text-anchor': 'middle', 'font-size': 11, fill: '#555', text: String(i) }));
  }
  svg.appendChild(sv('text', { x: L + pw, y: H - 22, 'text-anchor': 'end', 'font-size': 11, fill: '#888', text: 'execution order \u2192' }));
  if (th && th > 0) {
    var ty = Y(th);
    svg.appendChild(sv('line', { x1: L, x2: L + pw, y1: ty, y2: ty, stroke: '#d62d20', 'stroke-dasharray': '6 4', 'stroke-width': 1 }));
    svg.appendChild(sv('text', { x: L + 4, y: ty - 4, 'font-size': 11, fill: '#d62d20', text: 'threshold ' + fmt(th) }));
  }
  // One column per pixel: keep its largest ok and largest not-ok variable, so 20,000 vars
  // draw as at most ~2 x 930 points while every spike stays visible.
  var cols = Math.max(1, Math.floor(pw));
  var best = new Array(cols * 2);
  vars.forEach(function (v, p) {
    var c = Math.min(cols - 1, Math.floor((n > 1 ? p / (n - 1) : 0.5) * (cols - 1) + 0.5));
    var slot = c * 2 + (agrees(v.status) ? 0 : 1);
    var cur = best[slot];
    var e = v.max_err === null || v.max_err === undefined ? Infinity : v.max_err;
    if (!cur || e > (cur.max_err === null || cur.max_err === undefined ? Infinity : cur.max_err)) best[slot] = v;
  });
  var line = '';
  for (var c = 0; c < cols; c++) {
    var a = best[c * 2], b = best[c * 2 + 1];
    var top = a && b ? ((b.max_err === null ? Infinity : b.max_err) >= (a.max_err === null ? Infinity : a.max_err) ? b : a) : (a || b);
    if (top && typeof top.max_err === 'number') line += (line ? ' L' : 'M') + X(top._p).toFixed(1) + ' ' + Y(top.max_err).toFixed(1);
  }
  if (line) svg.appendChild(sv('path', { d: line, fill: 'none', stroke: '#9bb7e0', 'stroke-width': 1 }));
  var g = sv('g', { id: 'chart-points' });
  best.forEach(function (v) {
    if (!v) return;
    var ok = agrees(v.status);
    g.appendChild(sv('circle', { cx: X(v._p).toFixed(1), cy: Y(v.max_err).toFixed(1), r: ok ? 2 : 3.2, fill: STATUS_COLOR[v.status] || '#999', 'class': 'pt',
      onclick: function () { select(v.id, true); } },
      sv('title', { text: '#' + v._i + ' ' + v.name + '\nvar ' + v.id + ' \u00b7 ' + v.opr_type + ' \u00b7 ' + v.status + ' \u00b7 max_err ' + fmt(v.max_err) +
        (typeof v.threshold === 'number' ? ' \u00b7 its threshold ' + fmt(v.threshold) : '') })));
  });
  svg.appendChild(g);
  roots.slice(0, 30).forEach(function (r, k) {
    var v = byId.get(r.id);
    if (!v) return;
    var x = X(v._p);
    var mg = sv('g', { 'class': 'root-mark', onclick: function () { select(r.id, true); } });
    mg.appendChild(sv('line', { x1: x, x2: x, y1: T, y2: T + ph, stroke: '#d62d20', 'stroke-width': 1, 'stroke-dasharray': '2 3' }));
    mg.appendChild(sv('path', { d: 'M' + (x - 6) + ' ' + (T - 22) + ' L' + (x + 6) + ' ' + (T - 22) + ' L' + x + ' ' + (T - 12) + ' z', fill: '#d62d20' }));
    mg.appendChild(sv('text', { x: x + 8, y: T - 13, 'font-size': 11, fill: '#d62d20', text: '#' + (k + 1) }));
    mg.appendChild(sv('circle', { cx: x, cy: Y(v.max_err), r: 5, fill: 'none', stroke: '#d62d20', 'stroke-width': 2 }));
    mg.appendChild(sv('title', { text: 'root #' + (k + 1) + ': ' + r.name + ' (var ' + r.id + ') max_err ' + fmt(r.max_err) }));
    svg.appendChild(mg);
  });
  var okAbove = th ? vars.filter(function (v) { return v.status === 'ok' && typeof v.max_err === 'number' && v.max_err > th &&
    !(R.threshold.per_dtype && typeof R.threshold.per_dtype[v.dtype] === 'number' && v.max_err <= R.threshold.per_dtype[v.dtype]); }).length : 0;
  var lg = document.getElementById('chart-legend');
  Object.keys(STATUS_COLOR).forEach(function (s) { lg.appendChild(el('span', { 'class': 'sw', style: 'background:' + STATUS_COLOR[s] })); lg.appendChild(document.createTextNode(s)); });
  lg.appendChild(document.createTextNode('  \u00b7  red triangles: roots  \u00b7  dashed line: threshold' +
    (R.threshold && R.threshold.scaled ? ' (each var is held to it scaled by min(1, its largest |value|), so a var below the line can still diverge)' : '') +
    (okAbove ? '  \u00b7  ' + okAbove + ' ok variable(s) above the line carry rounding from their inputs: each is held to its own threshold (hover a point)' : '') +
    (n > cols ? '  \u00b7  ' + n + ' variables, largest error per pixel column shown' : '')));
}

// ---------------------------------------------------------------- one variable's error histogram
// drawn for the first root (else the variable with the largest error) and for each variable selected
function hasQuantiles(v) { return typeof v.err_p50 === 'number' && typeof v.max_err === 'number'; }
function histogram(id) {
  var v = byId.get(id), box = document.getElementById('hist'), sec = document.getElementById('hist-section');
  if (!v) return;
  var fig = LarPlot.histogram(v, { id: 'hist-plot', metric: (R.threshold || {}).metric,
    title: 'Errors of the ' + (v.size || 'all') + ' elements of ' + v.name + ' (var ' + id + ', ' + v.opr_type + '): ' + chartSubject() +
      (v.n_nonfinite ? '; its ' + v.n_nonfinite + ' element(s) NaN/Inf on one side only are not drawn' : '') });
  box.textContent = '';
  if (fig) box.appendChild(fig);
  else box.appendChild(el('p', { id: 'hist-none' }, v.name + ' (var ' + id + ', ' + v.status + '): no error quantiles (not a float comparison, or not compared)'));
  sec.hidden = false;
}
function firstHistogram() {
  var v = roots.length && byId.has(roots[0].id) && hasQuantiles(byId.get(roots[0].id)) ? byId.get(roots[0].id) : null;
  vars.forEach(function (x) { if (!v && hasQuantiles(x) || v && !roots.length && hasQuantiles(x) && x.max_err > v.max_err) v = x; });
  if (v) histogram(v.id);
}

// ---------------------------------------------------------------- table
var COLS = [
  { key: '_i', label: '#', num: true }, { key: 'id', label: 'var', num: true }, { key: 'name', label: 'name' },
  { key: 'opr_type', label: 'type' }, { key: 'opr', label: 'operator' }, { key: 'dtype', label: 'dtype' },
  { key: 'shape', label: 'shape' }, { key: 'status', label: 'status' }, { key: 'max_err', label: 'max_err', num: true },
  { key: 'max_abs_err', label: 'max_abs_err', num: true }, { key: 'cosine', label: 'cosine', num: true }
];
// local ("single") error next to the accumulated max_err, when lar-prec measured it
if (vars.some(function (v) { return v.label !== undefined && v.label !== null; })) {
  vars.forEach(function (v) {
    var came = v.inherited_from || [];
    v._label = v.label ? v.label + (came.length ? ' \u2190 ' + came.join(', ') : '') : null;
  });
  COLS.splice(9, 0, { key: 'local_err', label: 'local', num: true }, { key: 'floor', label: 'floor', num: true },
    { key: '_label', label: 'label' });
  // the difference in rounding units: the worst element, and the rms over the elements of a sum
  if (vars.some(function (v) { return v.units_rms !== undefined; })) {
    COLS.splice(12, 0, { key: 'units_max', label: 'units max', num: true, title: 'worst element, rounding units (root above 1.5)' },
      { key: 'units_rms', label: 'units rms', num: true, title: 'rms over the elements, rounding units (limit from the rounding model)' });
  }
}
if (vars.some(function (v) { return v.cause; })) {
  vars.forEach(function (v) { v._cause = causeText(v); });
  COLS.push({ key: '_cause', label: 'cause' });
}
['max_rel_err', 'mean_abs_err', 'rmse', 'max_ulp', 'n_over', 'runs_differing', 'n_results'].forEach(function (k) {
  if (vars.some(function (v) { return v[k] !== undefined && v[k] !== null; })) COLS.push({ key: k, label: k.replace(/_/g, ' '), num: true });
});
if (vars.some(function (v) { return v.diff; })) COLS.splice(8, 0, { key: 'diff', label: 'diff' }, { key: 'jitter_a', label: 'jitter A', num: true }, { key: 'jitter_b', label: 'jitter B', num: true });
if (vars.some(function (v) { return v.note; })) COLS.push({ key: 'note', label: 'note' });
var state = { sort: '_i', dir: 1, page: 0, size: 100, filter: '', onlyBad: false, rows: vars.slice(), selected: null };

function cmp(key, dir) {
  return function (a, b) {
    var x = a[key], y = b[key];
    if (key === 'shape') { x = (x || []).reduce(function (s, d) { return s * d; }, 1); y = (y || []).reduce(function (s, d) { return s * d; }, 1); }
    var xn = x === null || x === undefined, yn = y === null || y === undefined;
    if (xn || yn) return xn && yn ? a._p - b._p : (xn ? 1 : -1);   // unknown values last either way
    if (x < y) return -dir;
    if (x > y) return dir;
    return a._p - b._p;
  };
}
function refilter() {
  var q = state.filter.trim().toLowerCase();
  var idq = /^#?\d+$/.test(q) ? Number(q.replace('#', '')) : null;
  state.rows = vars.filter(function (v) {
    if (state.onlyBad && agrees(v.status)) return false;
    if (!q) return true;
    if (idq !== null && v.id === idq) return true;
    return v.name.toLowerCase().indexOf(q) >= 0 || v.opr.toLowerCase().indexOf(q) >= 0 ||
           v.opr_type.toLowerCase().indexOf(q) >= 0 || v.status === q || v.dtype.toLowerCase() === q;
  });
  resort();
}
function resort() { state.rows.sort(cmp(state.sort, state.dir)); draw(); }
function head() {
  var tr = document.getElementById('vars-head');
  tr.textContent = '';
  COLS.forEach(function (c) {
    var cls = (c.num ? 'num ' : '') + (state.sort === c.key ? (state.dir > 0 ? 'sorted-asc' : 'sorted-desc') : '');
    tr.appendChild(el('th', { 'class': cls, 'data-key': c.key, title: 'sort by ' + c.label, onclick: function () {
      if (state.sort === c.key) state.dir = -state.dir; else { state.sort = c.key; state.dir = c.num && c.key !== '_i' && c.key !== 'id' ? -1 : 1; }
      state.page = 0; head(); resort(); } }, c.label));
  });
}
function cell(v, c) {
  var x = v[c.key];
  if (c.key === 'name') return el('td', { 'class': 'name' }, varLink(v.id), rootRank.has(v.id) ? el('b', { style: 'color:#d62d20' }, '  root #' + rootRank.get(v.id)) : null);
  if (c.key === 'status') return el('td', null, statusBadge(x));
  if (c.key === 'shape') return el('td', { 'class': 'mono' }, shape(x));
  if (c.key === 'opr') return el('td', { 'class': 'name mono' }, x);
  if (c.key === 'cosine') return el('td', { 'class': 'num' }, x === null || x === undefined ? '\u2014' : x.toFixed(6));
  if (c.num) return el('td', { 'class': 'num' }, c.key === '_i' || c.key === 'id' ? String(x) : fmt(x));
  return el('td', null, x === undefined ? '' : x);
}
function draw() {
  var pages = Math.max(1, Math.ceil(state.rows.length / state.size));
  state.page = Math.min(state.page, pages - 1);
  var start = state.page * state.size, slice = state.rows.slice(start, start + state.size);
  var tb = document.getElementById('vars-body');
  var frag = document.createDocumentFragment();
  slice.forEach(function (v) {
    var tr = el('tr', { 'data-id': v.id, 'class': (rootRank.has(v.id) ? 'root-row' : '') + (state.selected === v.id ? ' selected' : '') });
    COLS.forEach(function (c) { tr.appendChild(cell(v, c)); });
    frag.appendChild(tr);
  });
  tb.textContent = '';
  tb.appendChild(frag);
  document.getElementById('page-info').textContent = state.rows.length
    ? 'rows ' + (start + 1) + '\u2013' + (start + slice.length) + ' of ' + state.rows.length + (state.rows.length !== vars.length ? ' (filtered from ' + vars.length + ')' : '')
    : 'no matching variables';
  document.getElementById('prev').disabled = state.page === 0;
  document.getElementById('next').disabled = state.page >= pages - 1;
}
function table() {
  head();
  var timer = null;
  document.getElementById('filter').addEventListener('input', function (e) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.filter = e.target.value; state.page = 0; refilter(); }, 120);
  });
  document.getElementById('only-bad').addEventListener('change', function (e) { state.onlyBad = e.target.checked; state.page = 0; refilter(); });
  document.getElementById('page-size').addEventListener('change', function (e) { state.size = Number(e.target.value); state.page = 0; draw(); });
  document.getElementById('prev').addEventListener('click', function () { state.page--; draw(); });
  document.getElementById('next').addEventListener('click', function () { state.page++; draw(); });
  draw();
}

// ---------------------------------------------------------------- details of one var
function select(id, scroll) {
  state.selected = id;
  var v = byId.get(id);
  if (!document.getElementById('hist-section').hidden) histogram(id);
  var sec = document.getElementById('details-section');
  var box = document.getElementById('details');
  sec.hidden = false;
  box.textContent = '';
  document.getElementById('details-title').textContent = v ? v.name + ' (var ' + id + ')' : 'var ' + id;
  if (!v) { box.appendChild(el('p', null, 'Var ' + id + ' was not compared (not dumped in both runs).')); }
  else {
    var kv = el('div', { 'class': 'kv' });
    function row(k, val) { kv.appendChild(el('div', null, k)); kv.appendChild(el('div', null, val)); }
    row('execution position', String(v._i));
    row('status', statusBadge(v.status));
    if (rootRank.has(id)) row('root', '#' + rootRank.get(id));
    row('operator', el('span', { 'class': 'mono' }, v.opr));
    row('operator type', v.opr_type);
    row('dtype, shape', v.dtype + ' ' + shape(v.shape));
    Object.keys(v).forEach(function (k) {
      if (['id', 'name', 'opr', 'opr_type', 'dtype', 'shape', 'inputs', 'status', 'exec_index', 'index'].indexOf(k) >= 0 || k[0] === '_') return;
      var x = v[k];
      if (x === '' || x === false) return;
      row(k, Array.isArray(x) ? '[' + x.join(', ') + ']' : (typeof x === 'number' ? (k === 'cosine' ? x.toFixed(8) : fmt(x))
        : (x === null ? '\u2014' : (typeof x === 'object' ? JSON.stringify(x) : String(x)))));
    });
    row('inputs', (v.inputs || []).length ? v.inputs.map(function (u, i) { return [i ? ', ' : '', varLink(u), ' ', el('span', { 'class': 'mono' }, byId.has(u) ? fmt(byId.get(u).max_err) : '(not compared)')]; }) : 'none (model input or constant)');
    var us = consumers.get(id) || [];
    row('consumers', us.length ? us.map(function (u, i) { return [i ? ', ' : '', varLink(u)]; }) : 'none (a model output)');
    box.appendChild(kv);
  }
  var rows = document.querySelectorAll('#vars-body tr');
  for (var i = 0; i < rows.length; i++) rows[i].classList.toggle('selected', Number(rows[i].getAttribute('data-id')) === id);
  if (scroll) {
    sec.scrollIntoView({ block: 'nearest' });
    try { history.replaceState(null, '', '#var=' + id); } catch (e) { /* some viewers forbid it; the link is a convenience */ }
  }
}

// ---------------------------------------------------------------- runs
function runsSection() {
  var box = document.getElementById('runs');
  if (!runs.length) { box.appendChild(el('p', null, 'No runs: the dumps were compared as given.')); return; }
  var t = el('table', { id: 'runs-table' });
  t.appendChild(el('thead', null, el('tr', null, el('th', null, 'label'), el('th', { 'class': 'num' }, 'exit'), el('th', { 'class': 'num' }, 'seconds'), el('th', null, 'folder and command'))));
  var tb = el('tbody');
  runs.forEach(function (r) {
    // a report's run (report/records.py: config a name, env, dir) or a workflow's run record
    // (lar-prec.run/1, mixed and quant: config {name, flags, env}, env_changes, dump_dir)
    var config = r.config && typeof r.config === 'object' ? r.config.name : r.config;
    var envs = r.env || r.env_changes || null;
    var keys = envs ? Object.keys(envs) : [];
    var unset = keys.filter(function (k) { return envs[k] === null; });
    var env = (unset.length ? ['env'].concat(unset.map(function (k) { return '-u ' + shq(k); })) : [])
      .concat(keys.filter(function (k) { return envs[k] !== null; }).map(function (k) { return k + '=' + shq(envs[k]); }));
    var cmd = env.concat((r.argv || []).map(shq)).join(' ');
    var state = r.status && r.status !== 'ok' ? ' \u2014 ' + r.status + (r.signal ? ' (' + r.signal + ')' : '') : '';
    tb.appendChild(el('tr', null, el('td', null, r.label + (config && config !== r.label ? ' (' + config + ')' : ''), state ? el('b', { style: 'color:#d62d20' }, state) : null),
      el('td', { 'class': 'num', style: r.returncode ? 'color:#d62d20;font-weight:600' : null }, String(r.returncode)),
      el('td', { 'class': 'num' }, typeof r.seconds === 'number' ? r.seconds.toFixed(2) : '\u2014'),
      el('td', null, el('div', { 'class': 'mono' }, r.dir || r.dump_dir), el('pre', { 'class': 'cmd' }, cmd),
        r.environment ? el('div', { 'class': 'env' }, [r.environment.host, r.environment.cpu_model, r.environment.android_model, r.environment.load_and_run_version].filter(function (v) { return v; }).join(' \u00b7 ')) : null)));
  });
  t.appendChild(tb);
  box.appendChild(t);
}

// ---------------------------------------------------------------- deep links
// #var=37 selects a var; q=text filters; bad=1 keeps only vars that are not ok; sort=-max_err sorts.
// ---------------------------------------------------------------- mixed and quant (no Report: their own JSON)
// Both views are tables drawn from the command's JSON; the page decides nothing.
function simpleTable(cols, rows, rowClass) {
  var thead = el('tr', null, cols.map(function (c) { return el('th', { 'class': c.num ? 'num' : null, title: c.title }, c.label); }));
  var body = el('tbody');
  rows.forEach(function (r) {
    body.appendChild(el('tr', { 'class': rowClass ? rowClass(r) : null }, cols.map(function (c) {
      var v = c.get(r);
      return el('td', { 'class': c.num ? 'num' : (c.cls || null) }, v);
    })));
  });
  return el('div', { 'class': 'tablewrap' }, el('table', null, el('thead', null, thead), body));
}
function errBar(x, worst, over) {
  if (typeof x !== 'number' || !(worst > 0)) return null;
  var w = Math.max(1, Math.round(120 * Math.log10(1 + 9 * x / worst)));
  return el('span', { 'class': 'bar' + (over ? ' over' : ''), style: 'width:' + w + 'px' });
}
function causeBadge(c) {
  if (!c) return '\u2014';
  var k = /^kernel/.test(c) ? ' st-cause-kernel' : /accumulation/.test(c) ? ' st-cause-accum' : '';
  return el('span', { 'class': 'st st-cause' + k, text: c });
}
function adviceMeta(rows) {
  var meta = document.getElementById('meta');
  rows.forEach(function (kv) { metaRow(meta, kv[0], kv[1]); });
  inputsRow(meta);
}
function errText(x, nonfinite) { return nonfinite ? 'inf (NaN or Inf)' : fmt(x); }
function pctText(x) { return x === null || x === undefined ? '\u2014' : (100 * x).toFixed(1) + '%'; }
function topText(p, key) {
  var a = p.agreement || [];
  return a.length ? a.map(function (g) { return g[key] + '/' + g.samples; }).join(' ') : '\u2014';
}
function mixedView() {
  // the words are the analysis's own (advice: what the terminal prints too); the tables are drawn here
  var vd = document.getElementById('verdict'), tol = R.tolerance, opt = '--enable-' + R.option;
  var advice = R.advice || [], head = R.headline || advice[0] || opt;
  // the headline is where the analysis ends: within, or a verified keep-list (green); no list holds (red)
  vd.textContent = head;
  vd.className = 'verdict ' + (R.verdict === 'within' || R.verdict === 'fixed' ? 'good' : 'bad');
  var f = R.fp16_fraction || {};
  adviceMeta([['command', 'mixed'], ['model', R.model], ['option', opt],
              ['tolerance', (R.output_tolerance ? R.output_tolerance.text : fmt(tol)) + ' (MegEngine error on every output)'],
              ['left in float16', pctText(f.macs_fraction) + ' of MACs, ' + f.oprs_float16 + '/' + f.oprs_total + ' float operators'],
              ['mixed model', R.mixed_model ? R.mixed_model.path : null], ['keep-list', R.keep_file], ['note', R.note]]);
  var box = document.getElementById('advice');
  var told = advice.filter(function (line) { return line !== head; });
  if (told.length) {
    box.appendChild(el('h2', null, 'What to do'));
    box.appendChild(el('ul', { id: 'mixed-advice' }, told.map(function (line) { return el('li', null, line); })));
  }
  box.appendChild(el('h2', null, 'Keep in float32 ', el('small', null, 'why each is listed, and why it errs in float16 by the float64 oracle on the reference\'s inputs')));
  if (R.kept.length) {
    box.appendChild(simpleTable([
      { label: 'operator', get: function (k) { return k.name; }, cls: 'name' },
      { label: 'type', get: function (k) { return k.opr_type; } },
      { label: 'local error', num: true, get: function (k) { return fmt(k.local_err); } },
      { label: 'float16 floor', num: true, get: function (k) { return fmt(k.floor); } },
      { label: 'why it errs', get: function (k) { return [causeBadge(k.cause), k.cause_detail && k.cause_detail.why ? el('div', { 'class': 'dim' }, k.cause_detail.why) : null]; }, cls: 'wrap' },
      { label: 'listed', get: function (k) { return k.listed; }, cls: 'wrap' }], R.kept));
  } else box.appendChild(el('p', null, 'none'));
  box.appendChild(el('h2', null, 'Points ', el('small', null, 'each model run with the default kernels (and correct float16: the naive kernels under the option), its outputs against the naive float32 reference, and the share left in float16')));
  var pts = [Object.assign({}, R.plain, { step: 0, keep: [], failed: R.plain.failed, within: R.verdict === 'within' })];
  if (R.level) pts.push(Object.assign({}, R.level, { step: null, keep: null }));
  pts = pts.concat(R.attempts);
  var kneeLabel = R.knee ? R.knee.label : null;
  box.appendChild(tradeoffPlot(pts, tol, kneeLabel));
  var sp = speedPlot(pts, tol);
  if (sp) box.appendChild(sp);
  box.appendChild(simpleTable([
    { label: 'model', get: function (a) { return a.label; }, cls: 'name' },
    { label: 'kept in float32', num: true, get: function (a) { return a.keep === null ? '\u2014' : String(a.keep.length); } },
    { label: 'output error', num: true, get: function (a) { return a.failed ? 'did not run' : errText(a.output_err, a.nonfinite); } },
    { label: 'tolerance', get: function (a) { return a.step === null ? '' : el('span', { 'class': 'st ' + (a.within ? 'st-ok' : 'st-divergent'), text: a.within ? 'within' : 'out of' }); } },
    { label: 'MACs in float16', num: true, get: function (a) { return pctText(a.macs_fraction); } },
    { label: 'operators in float16', num: true, get: function (a) { return a.oprs_float16 + '/' + a.oprs_total; } },
    { label: 'speed against float32', title: speedHow(), get: function (a) { return speedText(a.speed); }, cls: 'wrap', skip: !R.speed || !!R.speed.off },
    { label: 'top-1', num: true, get: function (a) { return topText(a, 'top1'); } },
    { label: 'top-5', num: true, get: function (a) { return topText(a, 'top5'); } }].filter(function (c) { return !c.skip; }), pts,
    function (a) { return a.label === kneeLabel ? 'knee' : null; }));
  var ops = R.operators || [], worst = 0;
  ops.forEach(function (o) { if (typeof o.local_err === 'number' && o.local_err > worst) worst = o.local_err; });
  box.appendChild(el('h2', null, 'Operators under ' + opt + ' ', el('small', null, 'execution order; local error: the operator alone under the option on the reference\'s inputs, against its float16 floor')));
  box.appendChild(simpleTable([
    { label: 'operator', get: function (o) { return o.name; }, cls: 'name' },
    { label: 'type', get: function (o) { return o.opr_type; } },
    { label: 'runs in', get: function (o) { return el('span', { 'class': 'st ' + (o.float32 ? 'st-f32' : 'st-f16'), text: o.float32 ? 'float32' : 'float16' }); } },
    { label: 'local error', num: true, get: function (o) { return [errText(o.local_err, o.nonfinite), errBar(o.nonfinite ? worst : o.local_err, worst, o.floor !== null && (o.nonfinite || o.local_err > o.floor))]; } },
    { label: 'float16 floor', num: true, get: function (o) { return fmt(o.floor); } }], ops, function (o) { return o.float32 ? 'kept' : null; }));
}
// a point's speed against float32 (mixed.json's speed: the sweep's timing record), in its own words
function speedText(s) {
  if (!s) return '\u2014';
  if (s.status !== 'timed') return s.words;
  var iv = s.speedup_interval;
  if (!(s.measurable && iv && s.speedup)) return s.words;
  var lo = s.speedup >= 1 ? iv[0] : 1 / iv[1], hi = s.speedup >= 1 ? iv[1] : 1 / iv[0];
  return s.words + ' (' + fmt(lo) + 'x\u2013' + fmt(hi) + 'x)';
}
function speedHow() {
  var t = R.speed || {};
  if (t.off) return t.off;
  return t.rounds + ' interleaved rounds of --warmup-iter ' + t.warmup_iter + ' --iter ' + t.iter + ' without dumps, ' +
    t.threads + ' thread(s) on ' + t.device + '; float32 (the plain model): ' + ((t.float32 || {}).words || '\u2014');
}
function speedPlot(pts, tol) {
  // the timed points with a speed-up (float32 itself timed): speed-up over output error; none, no panel
  var q = pts.filter(function (a) { return !a.failed && a.speed && typeof a.speed.speedup === 'number'; }).map(function (a) {
    var kind = a.step === 0 ? 'alone' : 'verification', s = a.speed;
    return { kind: kind, err: a.output_err, nonfinite: a.nonfinite, speedup: s.speedup, low: s.speedup_interval[0], high: s.speedup_interval[1],
             measurable: s.measurable, chosen: !!a.chosen,
             short: (kind === 'alone' ? 'option alone' : 'v' + a.step) + ' ' + (s.measurable ? s.words : '\u2248 float32'),
             tip: a.label + '\n' + speedText(s) + ' than float32; output error ' + errText(a.output_err, a.nonfinite) + ', ' + pctText(a.macs_fraction) + ' of MACs in float16' +
               (a.chosen ? ' (the chosen keep-list)' : '') };
  });
  var t = R.speed || {};
  if (t.off) return null;
  if (!q.length) return el('p', { id: 'mixed-speed-none', 'class': 'dim' }, 'No speed plot: no point has a speed-up against float32 (' +
    (t.float32 && t.float32.status !== 'timed' ? 'float32\u2019s ' + t.float32.words : 'its timing failed') + ').');
  return LarPlot.speedup(q, { id: 'mixed-speed', tolerance: tol,
    title: 'Speed: each timed point\u2019s speed-up against the float32 model over its output error (bars: the interval over ' + t.rounds + ' rounds; hollow: no measurable difference; ringed: the chosen keep-list)' });
}
function tradeoffPlot(pts, tol, kneeLabel) {
  // every model tried as a point; the verifications numbered, the chosen keep-list (the mixed model) ringed
  var q = pts.filter(function (a) { return !a.failed; }).map(function (a) {
    var kind = a.step === 0 ? 'alone' : a.step === null ? 'level' : 'verification';
    return { kind: kind, err: a.output_err, nonfinite: a.nonfinite, macs: a.macs_fraction, chosen: !!a.chosen,
             short: kind === 'alone' ? 'option alone' : kind === 'level' ? 'correct float16' : 'v' + a.step,
             tip: a.label + '\noutput error ' + errText(a.output_err, a.nonfinite) + ', ' + pctText(a.macs_fraction) + ' of MACs in float16' +
               (a.keep ? ', ' + a.keep.length + ' operator(s) in float32' : '') + (a.chosen ? ' (the chosen keep-list)' : '') + (a.label === kneeLabel ? ' (the knee)' : '') +
               (a.speed ? '\nspeed against float32: ' + speedText(a.speed) : '') };
  });
  if (!q.some(function (a) { return typeof a.macs === 'number'; }))
    return el('p', { id: 'mixed-tradeoff-none', 'class': 'dim' }, 'No trade-off plot: no model tried has a known share of MACs (the model has no convolution or matrix product, or none ran).');
  return LarPlot.tradeoff(q, { id: 'mixed-tradeoff', tolerance: tol,
    title: 'Trade-off: output error against the share of MACs left in float16, each model tried a point (v1, v2, \u2026 the verifications; ringed: the chosen keep-list)' });
}
function snrText(m) {
  if (!m) return '\u2014';
  if (typeof m.snr_db === 'number') return fmt(m.snr_db);
  if (m.snr_note === 'exact') return 'exact';
  if (m.snr_note === 'zero signal') return 'no signal';
  return /^non-finite/.test(m.snr_note || '') ? 'NaN/Inf' : '\u2014';
}
function cosText(x) { return typeof x === 'number' ? x.toFixed(5) : '\u2014'; }
function share(x, n) { return typeof x === 'number' ? Math.round(x * n) + '/' + n : '\u2014'; }
function quantView() {
  var vd = document.getElementById('verdict'), keep = R.keep_in_float || [], p = R.pairing || {};
  vd.textContent = R.verdict;
  vd.className = 'verdict ' + (keep.length ? 'bad' : 'good');
  var unpaired = R.unpaired || [], fused = unpaired.filter(function (u) { return u.fused; });
  adviceMeta([['command', 'quant'], ['layers paired', p.layers_paired + ' of the int8 model\'s ' + p.layers_total],
              ['vars compared', String((R.layers || []).length)], ['fused away', fused.length + ' float intermediate value(s)'],
              ['median local SNR', R.snr_median_db === null ? null : fmt(R.snr_median_db) + ' dB of ' + R.int8_layers + ' int8 layers'],
              ['analysis folder', R.analysis_dir]]);
  var box = document.getElementById('advice'), layers = R.layers || [];
  var outCols = [
    { label: 'output', get: function (o) { return o.name; }, cls: 'name' },
    { label: 'SNR dB', num: true, get: function (o) { return snrText(o.metrics); } },
    { label: 'cosine', num: true, get: function (o) { return cosText(o.metrics.cosine); } },
    { label: 'top-1', num: true, get: function (o) { return share(o.top1, o.samples); } },
    { label: 'top-5', num: true, get: function (o) { return share(o.top5, o.samples); } }];
  box.appendChild(el('h2', null, 'Outputs ', el('small', null, 'the int8 model against the float model; top-k: samples whose float best class is the int8 best (top-1) or among its five best (top-5)')));
  box.appendChild(simpleTable(outCols, R.outputs || []));
  box.appendChild(el('h2', null, 'Keep in float ', el('small', null, 'int8 layers whose local SNR falls far below the median int8 layer\'s')));
  if ((R.keep || []).length) {
    box.appendChild(simpleTable([
      { label: 'layer', get: function (k) { return k.name; }, cls: 'name' },
      { label: 'type', get: function (k) { return k.opr_type; } },
      { label: 'local SNR dB', num: true, get: function (k) { return fmt(k.local_snr_db); } },
      { label: 'why', get: function (k) { return k.why; }, cls: 'wrap' }], R.keep));
  } else box.appendChild(el('p', null, 'none'));
  var v = R.verification;
  if (v && (v.outputs || []).length) {
    box.appendChild(el('h2', null, 'Verification ', el('small', null, 'the int8 model with ' + v.kept.length + ' layer(s) computed in float32, run with the default kernels: ' + (v.verified ? 'verified' : 'NOT verified'))));
    box.appendChild(simpleTable(outCols, v.outputs));
  }
  var keepSet = new Set(keep), best = 0;
  layers.forEach(function (l) { var s = l.int8 && l.local && l.local.snr_db; if (typeof s === 'number' && s > best) best = s; });
  box.appendChild(el('h2', null, 'Layers, worst first ', el('small', null, 'local: the int8 operator on the float model\'s inputs (quantized with its input scales); accumulated: against the float model\'s naive run')));
  var layerTable = simpleTable([
    { label: 'layer', get: function (l) { return l.name; }, cls: 'name' },
    { label: 'type', get: function (l) { return l.opr_type; } },
    { label: 'dtype', get: function (l) { return l.dtype + (l.scale ? ' \u00d7' + fmt(l.scale) : ''); } },
    { label: 'local SNR dB', num: true, get: function (l) { var s = l.local && l.local.snr_db; return [snrText(l.local), l.int8 && typeof s === 'number' ? errBar(Math.max(best - s, 0), best, keepSet.has(l.name)) : null]; } },
    { label: 'local cos', num: true, get: function (l) { return cosText(l.local ? l.local.cosine : null); } },
    { label: 'acc SNR dB', num: true, get: function (l) { return snrText(l.accumulated); } },
    { label: 'acc cos', num: true, get: function (l) { return cosText(l.accumulated ? l.accumulated.cosine : null); } },
    { label: 'float reference', get: function (l) { return l.reference + (l.output ? ' (model output)' : '') + (l.local_note ? ' \u00b7 ' + l.local_note : ''); }, cls: 'wrap' }], layers,
    function (l) { return keepSet.has(l.name) ? 'kept' : null; });
  layerTable.id = 'quant-layers';
  box.appendChild(layerTable);
  var lost = unpaired.filter(function (u) { return !u.fused; });
  var uCols = [{ label: 'side', get: function (u) { return u.side; } }, { label: 'var', get: function (u) { return u.name; }, cls: 'name' },
               { label: 'why', get: function (u) { return u.why; }, cls: 'wrap' }];
  if (lost.length) {
    box.appendChild(el('h2', null, 'Not paired'));
    box.appendChild(simpleTable(uCols, lost));
  }
  if ((R.not_measured || []).length) {
    box.appendChild(el('h2', null, 'Paired, not measured'));
    box.appendChild(simpleTable([{ label: 'var', get: function (m) { return m.name; }, cls: 'name' },
                                 { label: 'why', get: function (m) { return m.why; }, cls: 'wrap' }], R.not_measured));
  }
  if (fused.length) {
    box.appendChild(el('h2', null, 'Fused away ', el('small', null, fused.length + ' float intermediate value(s) that an int8 operator computes inside itself')));
    box.appendChild(simpleTable(uCols, fused));
  }
}
// the trend page (lar-prec history --html, schema lar-prec.history/1): per series, its output error
// over runs and each operator's max_err over runs (oldest first, worst moved first), each a plot
// with axes and its values on hover; a click on an operator's name lists its values
function trendTip(when, build, what) { return when + ' \u00b7 ' + build + '\n' + what; }
function opTrend(op, id) {
  var pts = (op.points || []).map(function (p) {
    return { v: typeof p.max_err === 'number' ? p.max_err : null,
             tip: trendTip(p.created, p.build, 'max_err ' + (p.max_err === null ? 'NaN/Inf or not compared' : fmt(p.max_err)) +
               (typeof p.local_err === 'number' ? ', local ' + fmt(p.local_err) : '') + ' \u00b7 ' + p.status) };
  });
  return LarPlot.trend(pts, { id: id, title: 'max_err of ' + op.name + ' in each of ' + pts.length + ' run(s)', yLabel: 'max_err', w: 330, h: 130 });
}
function historyView() {
  var box = document.getElementById('advice'), series = R.series || [];
  var vd = document.getElementById('verdict');
  vd.textContent = series.length ? series.length + ' series, ' + series.reduce(function (n, s) { return n + s.runs.length; }, 0) + ' run(s) of this model in the store'
    : 'the store holds no run of this model';
  vd.className = 'verdict neutral';
  adviceMeta([['command', 'history'], ['store', R.store], ['model', R.model]]);
  document.getElementById('runs-section').hidden = true;  // the store's runs are listed per series
  box.appendChild(el('h2', null, 'History of ' + (R.model || 'no model'), el('small', null, ' ' + R.store)));
  series.forEach(function (s, k) {
    box.appendChild(el('h2', null, s.model_name + ' · ' + s.command + ' ' + s.config + ' ' + s.options.join(' ') + ' · ' + s.device_kind,
      el('small', null, ' ' + s.runs.length + ' run(s)')));
    box.appendChild(LarPlot.trend(s.runs.map(function (r) {
      return { v: typeof r.output_err === 'number' ? r.output_err : null,
               tip: trendTip(r.created, r.build, 'output error ' + fmt(r.output_err) + ' \u00b7 run ' + r.run.slice(0, 12) + '\n' + r.verdict) };
    }), { id: 'trend-output-' + k, title: 'Output error of each of the ' + s.runs.length + ' run(s) of this series', yLabel: 'output error', w: 640, h: 170 }));
    box.appendChild(simpleTable([
      { label: 'time', get: function (r) { return r.created; } }, { label: 'run', get: function (r) { return r.run.slice(0, 12); } },
      { label: 'build', get: function (r) { return r.build; }, cls: 'wrap' },
      { label: 'output err', num: true, get: function (r) { return fmt(r.output_err); } },
      { label: 'verdict', get: function (r) { return r.verdict; }, cls: 'wrap' }], s.runs.slice(-20)));
    var detail = el('div', { 'class': 'trend-detail', id: 'trend-detail-' + k });
    box.appendChild(simpleTable([
      { label: 'operator', get: function (o) { return el('a', { href: '#', 'class': 'trend-op', 'data-key': o.op_key }, o.name); }, cls: 'name' },
      { label: 'type', get: function (o) { return o.opr_type; } },
      { label: 'max_err over runs (hover a point)', get: function (o) { return opTrend(o, 'trend-' + k + '-' + o.op_key); } },
      { label: 'moved', num: true, get: function (o) { return fmt(o.moved); } },
      { label: 'first out of its band', get: function (o) { return o.first_out_of_band ? o.first_out_of_band.run.slice(0, 12) + ' ' + o.first_out_of_band.created : '—'; } }],
      s.ops, function (o) { return o.first_out_of_band ? 'kept' : null; }));
    box.appendChild(detail);
    box.querySelectorAll('a.trend-op').forEach(function (a) {
      a.addEventListener('click', function (ev) {
        ev.preventDefault();
        var op = s.ops.filter(function (o) { return o.op_key === a.getAttribute('data-key'); })[0];
        if (!op) return;
        detail.textContent = '';
        detail.appendChild(el('h2', null, op.name + ' ', el('small', null, op.op_key)));
        detail.appendChild(simpleTable([
          { label: 'time', get: function (p) { return p.created; } }, { label: 'build', get: function (p) { return p.build; }, cls: 'wrap' },
          { label: 'max_err', num: true, get: function (p) { return fmt(p.max_err); } },
          { label: 'local err', num: true, get: function (p) { return fmt(p.local_err); } },
          { label: 'status', get: function (p) { return p.status; } },
          { label: 'algorithm', get: function (p) { return p.algorithm || '—'; }, cls: 'wrap' }], op.points));
      });
    });
  });
  if (R.diff) {
    box.appendChild(el('h2', null, 'Changed between ' + R.diff.a.slice(0, 12) + ' and ' + R.diff.b.slice(0, 12)));
    box.appendChild(simpleTable([
      { label: 'operator', get: function (c) { return c.name; }, cls: 'name' },
      { label: 'A', num: true, get: function (c) { return c.a ? fmt(c.a.max_err) + ' ' + c.a.status : '—'; } },
      { label: 'B', num: true, get: function (c) { return c.b ? fmt(c.b.max_err) + ' ' + c.b.status : '—'; } }], R.diff.ops));
  }
}
// ---------------------------------------------------------------- diff (two environments) and bisect (builds)
// diff: the sides, the variables per verdict, how they paired, the first root's local error and
// the float64 oracle; the variables table carries each var's verdict and both sides' jitter.
var DIFF_WORDS = { equal: 'equal', within_jitter: 'within jitter', within_rounding: 'within rounding', outside_jitter: 'outside', nonfinite: 'nonfinite' };
function diffSection() {
  if (R.command !== 'diff') return;
  var box = el('section', { id: 'diff-section' }, el('h2', null, 'Two environments ', el('small', null, 'each side repeated: a difference no larger than both sides vary by themselves (j_A + j_B) is within jitter; larger, with each side within every operator\u2019s bound of the naive reference, within rounding')));
  document.body.insertBefore(box, document.getElementById('roots-section'));
  var S = R.sides || {};
  box.appendChild(simpleTable([
    { label: 'side', get: function (k) { return k.toUpperCase(); } },
    { label: 'build', get: function (k) { return S[k].build || S[k].from || '\u2014'; }, cls: 'name' },
    { label: 'where', get: function (k) { return S[k].remote || 'this machine'; } },
    { label: 'flags', get: function (k) { return (S[k].flags || []).join(' ') || 'none'; }, cls: 'wrap' },
    { label: 'env', get: function (k) { var e = S[k].env || {}; return Object.keys(e).map(function (n) { return n + '=' + e[n]; }).join(' ') || 'unchanged'; }, cls: 'wrap' },
    { label: 'runs', num: true, get: function (k) { return String(S[k].runs); } },
    { label: 'largest jitter', num: true, get: function (k) { return S[k].jitter_measured ? fmt(S[k].largest_jitter) : 'not measured'; } }],
    ['a', 'b'].filter(function (k) { return S[k]; })));
  var c = R.diff_counts || {};
  box.appendChild(el('p', { id: 'diff-counts' }, Object.keys(DIFF_WORDS).map(function (k) { return [badge(DIFF_WORDS[k], 'diff-' + k), ' ' + (c[k] || 0) + '  ']; })));
  var rd = R.rounding || {};
  box.appendChild(el('p', { id: 'diff-rounding' }, rd.measured ? 'Against the naive reference: ' + ['a', 'b'].map(function (k) {
    var roots = ((rd[k] || {}).roots || []).map(function (x) { return x.name; });
    return k.toUpperCase() + ' ' + (roots.length ? 'out of its bound at ' + roots.join(', ') : 'every operator within its bound');
  }).join('; ') : (rd.why || 'rounding not judged: nothing outside jitter')));
  var rr = R.run_to_run;
  if (rr) box.appendChild(el('p', { id: 'diff-run-to-run', 'class': rr.nondeterministic ? 'bad' : '' }, 'Side B, its runs compared: ' + rr.words));
  var p = R.diff_pairing || {};
  if (p.how === 'key') {
    box.appendChild(el('p', null, 'The two sides ran different graphs: ' + p.compared + ' of A\u2019s ' + p.reference_vars + ' variables paired by operator key.'));
    var lost = (p.unpaired_a || []).map(function (u) { return { side: 'A', u: u }; }).concat((p.unpaired_b || []).map(function (u) { return { side: 'B', u: u }; }));
    if (lost.length) box.appendChild(simpleTable([{ label: 'side', get: function (x) { return x.side; } }, { label: 'var', get: function (x) { return x.u.name; }, cls: 'name' },
      { label: 'without a partner because', get: function (x) { return x.u.reason; }, cls: 'wrap' }], lost));
  }
  var r = roots[0];
  if (r) {
    var o = r.oracle || {};
    box.appendChild(el('h3', null, 'First outside: ', varLink(r.id, r.name), el('small', null, ' ' + r.opr_type + ' \u00b7 var ' + r.id)));
    var kv = el('div', { 'class': 'kv', id: 'diff-root' });
    [['max_err (B against A)', fmt(r.max_err)], ['local error on A\u2019s inputs', r.local_err === undefined ? 'not measured' : fmt(r.local_err) + ' (floor ' + fmt(r.floor) + ', ' + r.label + ')'],
     ['float64 oracle', o.a_err === undefined ? (o.why || 'not run') : 'A ' + fmt(o.a_err) + ' from it, B ' + fmt(o.b_err)],
     ['nearer float64', r.nearer ? r.nearer.toUpperCase() : '\u2014'],
     ['against the naive reference', !r.rounding ? 'not measured' : ['a', 'b'].map(function (k) { var x = r.rounding[k]; return k.toUpperCase() + ' ' + (x ? x.label + ' ' + fmt(x.local_err) + ' (floor ' + fmt(x.floor) + ')' : 'not measured'); }).join('; ')]].forEach(function (x) { kv.appendChild(el('div', null, x[0])); kv.appendChild(el('div', null, x[1])); });
    box.appendChild(kv);
  }
}
var BUILD_WORDS = { good: 'good', bad: 'bad', skip: 'skipped', untested: 'not tested' };
function bisectView() {
  var vd = document.getElementById('verdict');
  vd.textContent = R.verdict;
  vd.className = 'verdict ' + (R.exit_code ? 'bad' : 'good');
  var f = R.first_bad;
  adviceMeta([['command', 'bisect'], ['model', R.model], ['builds', R.builds.length + ' (good end #' + R.good + ', bad end #' + R.bad + ')'],
              ['bad means', R.operator ? 'variable ' + R.operator.name + ' leaves the good end\u2019s band' : 'a model output leaves the good end\u2019s band'],
              ['analyses', R.analyses + ' (' + R.runs + ' load_and_run runs; at most ' + R.bound + ' without skips)' + (R.reused ? ', ' + R.reused + ' reused from the store' : '')],
              ['first bad build', f ? '#' + f.index + ' ' + f.build : null], ['its root', f && f.root ? f.root.name + ' (' + f.root.opr_type + ', var ' + f.root.id + ')' : null],
              ['its diff report', f ? f.report : null]]);
  var notes = document.getElementById('notes');
  (R.notes || []).forEach(function (n) { notes.appendChild(el('li', null, n)); });
  var box = document.getElementById('advice');
  box.appendChild(el('h2', null, 'Builds ', el('small', null, 'oldest first; each tested build\u2019s run against the good end\u2019s band')));
  var t = simpleTable([
    { label: '#', num: true, get: function (b) { return String(b.index); } },
    { label: 'build', get: function (b) { return b.build; }, cls: 'name' },
    { label: 'verdict', get: function (b) { return badge(BUILD_WORDS[b.verdict] || b.verdict, 'build-' + b.verdict); } },
    { label: 'from', get: function (b) { return b.source || '\u2014'; } },
    { label: 'output max_err', num: true, get: function (b) { return fmt(b.output_max_err); } },
    { label: 'root', get: function (b) { return b.root ? b.root.name + ' (' + b.root.opr_type + ')' : '\u2014'; }, cls: 'name' },
    { label: 'why', get: function (b) { return b.why || ''; }, cls: 'wrap' }], R.builds,
    function (b) { return f && b.index === f.index ? 'kept' : null; });
  t.id = 'bisect-builds';
  box.appendChild(t);
  document.getElementById('runs-section').hidden = true;  // each build's runs are in its own folder
}
// the zoo's page (lar-prec zoo, schema lar-prec.zoo/1): per build and device, a matrix of models x
// analyses (a sweep has a column per option) coloured by verdict; each cell its output error, first
// root, regressions against the store's history and a link to its analysis page
// a cell's own regressions (those of its option); a zoo.json written before cells carried them: the task's
function zooCellRegressed(e, c) { return c.regressed || e.regressed || []; }
function zooCellClass(e, c) {
  if (e.state === 'failed') return 'zc zc-failed';
  return 'zc ' + (zooCellRegressed(e, c).length || (c.speed_regressed || []).length ? 'zc-regressed' : c.bad ? 'zc-divergent' : 'zc-ok');
}
// a cell's speed: its option's time per iteration and its verdict against the store's history
function zooCellSpeed(c) {
  var v = c.speed;
  if (!v) return null;
  var text = v.median_ms == null ? 'speed: ' + v.verdict.replace('_', ' ') : fmt(v.median_ms) + ' ms/iter, ' + v.verdict.replace('_', ' ');
  return el('div', { 'class': v.verdict === 'regressed' ? 'zc-reg' : 'dim', title: v.why }, text);
}
function zooCell(e, c) {
  var td = el('td', { 'class': zooCellClass(e, c), title: (e.state === 'failed' ? e.why : c.why || e.verdict || '') + (e.run ? ' \u00b7 run ' + e.run : '') });
  if (e.state === 'failed') td.appendChild(el('div', null, 'failed'));
  else {
    td.appendChild(el('div', { 'class': 'zc-err' }, 'err ' + fmt(c.output_err)));
    if (c.root) td.appendChild(el('div', { 'class': 'zc-root' }, 'root ' + c.root));
    var reg = zooCellRegressed(e, c);
    if (reg.length) td.appendChild(el('div', { 'class': 'zc-reg' }, 'regressed: ' + reg.slice(0, 3).join(', ') + (reg.length > 3 ? ' \u2026' : '')));
    var nd = (c.nondeterministic || []).slice();
    var rr = c.run_to_run;
    if (rr && rr.nondeterministic && rr.operators && rr.operators.length && nd.indexOf(rr.operators[0].name) < 0) nd.push(rr.operators[0].name);
    if (nd.length) td.appendChild(el('div', { 'class': 'zc-reg', title: rr && rr.words ? rr.words : 'its own repeated runs differ' }, 'nondeterministic: ' + nd.slice(0, 2).join(', ')));
    else if (rr && rr.same_bits) td.appendChild(el('div', { 'class': 'dim', title: rr.words }, 'run again: same bits'));
    var sp = zooCellSpeed(c);
    if (sp) td.appendChild(sp);
  }
  var foot = [];
  if (e.page) foot.push(el('a', { href: e.page, 'class': 'zc-link' }, 'analysis'));
  if (e.state === 'stored') foot.push(el('span', { 'class': 'dim' }, ' stored'));
  if (foot.length) td.appendChild(el('div', null, foot));
  return td;
}
function zooView() {
  var n = R.counts, vd = document.getElementById('verdict');
  vd.textContent = n.tasks + ' task(s): ' + n.failed + ' failed, ' + n.divergent + ' with a divergence, ' + n.regressed + ' regressed' + (n.speed_regressed ? ', ' + n.speed_regressed + ' slower' : '') + (n.not_run ? ', ' + n.not_run + ' not run (interrupted)' : '');
  vd.className = 'verdict ' + (n.failed || n.divergent || n.regressed || n.speed_regressed || n.not_run ? 'bad' : 'good');
  adviceMeta([['command', 'zoo'], ['manifest', R.manifest], ['store', R.store], ['scheduler', R.scheduler], ['folder', R.out],
              ['tasks', n.ran + ' ran, ' + n.stored + ' already in the store'], ['seconds', fmt(R.seconds)], ['written', R.created]]);
  document.getElementById('runs-section').hidden = true;
  var box = document.getElementById('advice'), tasks = R.tasks || [];
  var groups = [];
  tasks.forEach(function (e) {
    var g = e.build + ' @ ' + e.device;
    if (groups.indexOf(g) < 0) groups.push(g);
  });
  groups.forEach(function (g) {
    var mine = tasks.filter(function (e) { return e.build + ' @ ' + e.device === g; });
    var cols = [], cells = new Map();
    mine.forEach(function (e) {
      var list = (e.cells && e.cells.length) ? e.cells : [{ column: e.column }];
      list.forEach(function (c) {
        if (cols.indexOf(c.column) < 0) cols.push(c.column);
        cells.set(e.model + '\u0000' + c.column, [e, c]);
      });
    });
    var models = (R.models || []).filter(function (m) { return mine.some(function (e) { return e.model === m; }); });
    box.appendChild(el('h2', null, g, el('small', null, ' ' + mine.length + ' task(s)')));
    var head = el('tr', null, el('th', null, 'model'), cols.map(function (c) { return el('th', null, c); }));
    var body = el('tbody', null, models.map(function (m) {
      return el('tr', null, el('td', { 'class': 'name' }, m), cols.map(function (c) {
        var ec = cells.get(m + '\u0000' + c);
        return ec ? zooCell(ec[0], ec[1]) : el('td', { 'class': 'zc zc-none' }, '\u2014');
      }));
    }));
    box.appendChild(el('div', { 'class': 'tablewrap' }, el('table', { 'class': 'zoo' }, el('thead', null, head), body)));
  });
  var failed = tasks.filter(function (e) { return e.state === 'failed'; });
  if (failed.length) {
    box.appendChild(el('h2', null, 'Failed tasks ', el('small', null, 'retried as the manifest says; the row in the store says why')));
    box.appendChild(simpleTable([
      { label: 'task', get: function (e) { return e.model + ' \u00b7 ' + e.column + ' \u00b7 ' + e.build + ' @ ' + e.device; }, cls: 'wrap' },
      { label: 'why', get: function (e) { return e.why || e.verdict; }, cls: 'wrap' },
      { label: 'analysis folder', get: function (e) { return e.analysis_dir || '\u2014'; }, cls: 'name' }], failed));
  }
}
function adviceSection() {
  var views = { 'lar-prec.mixed/1': mixedView, 'lar-prec.quant/1': quantView, 'lar-prec.history/1': historyView,
                'lar-prec.bisect/1': bisectView, 'lar-prec.zoo/1': zooView };
  var view = views[R.schema];
  if (!view) return false;
  ['roots-section', 'chart-section', 'cards-section', 'table-section'].forEach(function (id) { document.getElementById(id).hidden = true; });
  document.getElementById('advice-section').hidden = false;
  view();
  return true;
}
function applyHash() {
  var h = (location.hash || '').replace(/^#/, '');
  if (!h) return;
  var sel = null;
  h.split('&').forEach(function (kv) {
    var i = kv.indexOf('='), k = i < 0 ? kv : kv.slice(0, i), val = '';
    try { val = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1)); } catch (e) { return; }
    if (k === 'q') { state.filter = val; document.getElementById('filter').value = val; }
    else if (k === 'bad') { state.onlyBad = val !== '0'; document.getElementById('only-bad').checked = state.onlyBad; }
    else if (k === 'sort') {
      var key = val.replace(/^[-+]/, '');
      if (COLS.some(function (c) { return c.key === key; })) { state.sort = key; state.dir = val.charAt(0) === '-' ? -1 : 1; }
    }
    else if (k === 'var' && /^\d+$/.test(val)) sel = Number(val);
  });
  head();
  refilter();
  if (sel !== null) select(sel, false);
}

if (adviceSection()) {
  runsSection();
  document.body.setAttribute('data-rendered', String((R.operators || R.layers || R.builds || R.tasks || R.series || []).length));
  return;
}
header();
shakeSection();
sweepSection();
targetsSection();
diffSection();
rootsSection();
chart();
firstHistogram();
table();
runsSection();
applyHash();
document.body.setAttribute('data-rendered', String(vars.length));
if (t0 || t0 === 0) document.body.setAttribute('data-render-ms', String(Math.round(performance.now() - t0)));
})();
