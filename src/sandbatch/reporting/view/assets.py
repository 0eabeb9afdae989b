"""The viewer's stylesheet and the index page's script (inlined into every page: no server, no fetch)."""

CSS = """
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222;max-width:1200px}
a{color:#0645ad} h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
th{background:#f3f3f3} th.sort{cursor:pointer;user-select:none} th.sort:hover{background:#e6e6e6}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:.3em 0}
.turn{border-left:4px solid #ccc;padding:.2em .8em;margin:.6em 0}
.user{border-color:#6a8} .system{border-color:#6a8;background:#f6fbf8} .feedback{border-color:#bf8700;background:#fffbea}
.assistant{border-color:#58c} .reasoning{border-color:#bbb;color:#555}
.tool-call{border-color:#c84} .tool-output{border-color:#999}
.role{font-size:.8em;font-weight:bold;text-transform:uppercase;color:#666}
.fname{font-family:monospace;font-weight:bold;text-transform:none;font-size:1.2em;color:#222}
.role .muted{text-transform:none;font-weight:normal}
.diff .add{color:#1a7f37;background:#e6ffec} .diff .del{color:#cf222e;background:#ffebe9}
.diff .hunk{color:#8250df} .diff .file{font-weight:bold}
.diff span{display:block}
.PASSED,.res-yes{color:#1a7f37} .res-no{color:#cf222e} .res-yes,.res-no{font-weight:bold}
.res-none{color:#777} .status-infra_error,.status-agent_error,.status-timeout,.FAILED,.ERROR{color:#cf222e}
.muted{color:#777;font-size:.9em} .filters{margin:.5em 0} .filters label{margin-right:1em}
.kv td:first-child{font-weight:bold}
.exit{font-family:monospace;text-transform:none;padding:0 .4em;border-radius:3px;margin-left:.4em}
.exit.ok{background:#e6ffec;color:#1a7f37} .exit.fail{background:#ffebe9;color:#cf222e}
.fold summary{cursor:pointer;color:#0645ad;font-size:.9em} .fold:has(>details[open])>pre.head{display:none}
#flags{border:2px solid #cf222e;padding:.2em .8em;margin:.6em 0;background:#fff8f7}
#waterfall{width:100%;table-layout:fixed;font-size:.85em} #waterfall td{padding:.05em .4em;border-color:#eee}
#waterfall .sname{width:40%;white-space:nowrap;overflow:hidden;text-overflow:ellipsis} #waterfall .dur{width:5em}
#waterfall td.track{position:relative} .bar{position:absolute;top:.2em;bottom:.2em;min-width:1px}
.bar-key{display:inline-block;width:1em;height:.8em;margin:0 .2em 0 .6em}
.k-model{background:#8250df} .k-sandbox{background:#2da44e} .k-tests{background:#bf8700} .k-orchestration{background:#8c959f}
.bar.failed{outline:2px solid #cf222e}
"""

# The index: rows are inline (one short array per rollout); the table renders
# CHUNK rows and appends more as the end comes into view, so a 2,000-rollout run paints at once.
INDEX_JS = r"""
(function () {
  var COLS = ROLLOUT_COLUMNS, ROWS = ROLLOUT_ROWS, CHUNK = 100;
  var col = {}; COLS.forEach(function (c, i) { col[c] = i; });
  var tbody = document.getElementById('rows'), count = document.getElementById('count');
  var fStatus = document.getElementById('f-status'), fRepo = document.getElementById('f-repo');
  var fText = document.getElementById('f-text'), sentinel = document.getElementById('more');
  var fOutcome = document.getElementById('f-outcome');
  var sortKey = null, sortDir = 1, view = ROWS, shown = 0;
  function options(sel, key) {
    var seen = {}; ROWS.forEach(function (r) { seen[r[col[key]]] = 1; });
    Object.keys(seen).sort().forEach(function (v) {
      var o = document.createElement('option'); o.value = v; o.textContent = v; sel.appendChild(o);
    });
  }
  options(fStatus, 'status'); options(fRepo, 'repo');
  function cell(tr, text, cls) {
    var td = document.createElement('td'); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td);
    return td;
  }
  function renderMore() {
    var end = Math.min(shown + CHUNK, view.length), frag = document.createDocumentFragment();
    for (var i = shown; i < end; i++) {
      var r = view[i], tr = document.createElement('tr'), td = document.createElement('td');
      var a = document.createElement('a'); a.href = r[col.href]; a.textContent = r[col.task];
      td.appendChild(a); tr.appendChild(td);
      cell(tr, r[col.repeat]); cell(tr, r[col.repo]);
      // an infrastructure error earned nothing either way: no yes/no for it
      if (r[col.outcome] === 'infra_error') cell(tr, '\u2014', 'res-none');
      else cell(tr, r[col.resolved] ? 'yes' : 'no', r[col.resolved] ? 'res-yes' : 'res-no');
      cell(tr, r[col.status], 'status-' + r[col.status]);
      cell(tr, r[col.failure_class] || ''); cell(tr, r[col.reward] === null ? '' : r[col.reward]); cell(tr, r[col.tokens]);
      cell(tr, r[col.duration] === null ? '' : r[col.duration].toFixed(1));
      frag.appendChild(tr);
    }
    tbody.appendChild(frag); shown = end;
    sentinel.style.display = shown < view.length ? '' : 'none';
  }
  function refresh() {
    var s = fStatus.value, p = fRepo.value, t = fText.value.toLowerCase(), o = fOutcome.value;
    view = ROWS.filter(function (r) {
      return (!o || (o === 'flagged' ? r[col.flagged] : r[col.outcome] === o)) &&
        (!s || r[col.status] === s) && (!p || r[col.repo] === p) && (!t || r[col.task].toLowerCase().indexOf(t) >= 0);
    });
    if (sortKey !== null) {
      var k = col[sortKey];
      view.sort(function (a, b) {
        var x = a[k], y = b[k]; if (x === y) return 0; if (x === null) return 1; if (y === null) return -1;
        return (x < y ? -1 : 1) * sortDir;
      });
    }
    tbody.textContent = ''; shown = 0; renderMore();
    count.textContent = view.length + ' of ' + ROWS.length + ' rollouts';
  }
  // the filters and the sort live in the address (#status=timeout&sort=tokens&desc=1): links keep a view
  function save() {
    var h = [['show', fOutcome.value], ['status', fStatus.value], ['repo', fRepo.value], ['task', fText.value], ['sort', sortKey || ''],
             ['desc', sortDir < 0 ? '1' : '']].filter(function (p) { return p[1]; });
    history.replaceState(null, '', '#' + h.map(function (p) { return p[0] + '=' + encodeURIComponent(p[1]); }).join('&'));
  }
  location.hash.slice(1).split('&').forEach(function (p) {
    var kv = p.split('='), v = decodeURIComponent(kv[1] || '');
    if (kv[0] === 'show') fOutcome.value = v; else if (kv[0] === 'status') fStatus.value = v; else if (kv[0] === 'repo') fRepo.value = v;
    else if (kv[0] === 'task') fText.value = v; else if (kv[0] === 'sort' && v in col) sortKey = v;
    else if (kv[0] === 'desc' && v) sortDir = -1;
  });
  function update() { refresh(); save(); }
  [fOutcome, fStatus, fRepo].forEach(function (el) { el.addEventListener('change', update); });
  fText.addEventListener('input', update);
  Array.prototype.forEach.call(document.querySelectorAll('th.sort'), function (th) {
    th.addEventListener('click', function () {
      var k = th.getAttribute('data-key'); sortDir = sortKey === k ? -sortDir : 1; sortKey = k; update();
    });
  });
  new IntersectionObserver(function (es) {
    if (es.some(function (e) { return e.isIntersecting; }) && shown < view.length) renderMore();
  }).observe(sentinel);
  refresh();
})();
"""
