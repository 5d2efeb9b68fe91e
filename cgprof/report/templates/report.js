/* cgprof report: draws the figures, keeps the run timelines aligned step by step, and writes
   a self-check (figures rendered, errors seen) into the pre element "cgprof-selfcheck".
   URL hash "#selftest-zoom" (browser test only): zoom one timeline, check the other followed. */
(function () {
  "use strict";
  var check = window.__cgprof || {errors: []};
  var scriptStart = performance.now();  // plotly.js is parsed by now
  var data = JSON.parse(document.getElementById("cgprof-data").textContent);
  var timelines = data.timelines;  // [{id, steps: [{i, step, x0, x1}]}], x in us
  var busy = false;

  function plot(id) {
    var f = data.figures[id];
    var layout = f.layout;
    var t = performance.now();
    layout.template = data.template;
    return Plotly.newPlot(id, f.data, layout, data.config).then(function (gd) {
      check.timings = check.timings || {};
      check.timings[id] = Math.round(performance.now() - t);
      return gd;
    });
  }

  /* The step of `from` whose start is the last one at or before x (0 if none). */
  function stepAt(from, x) {
    var s = from.steps, k = 0;
    for (var j = 0; j < s.length; j++) {
      if (s[j].x0 <= x) { k = j; } else { break; }
    }
    return k;
  }

  /* Same step, same offset into it, same width: what "aligned by step" means. The step is
     the one under the middle of the visible range. */
  function mapRange(from, to, r0, r1) {
    var k = Math.min(stepAt(from, (r0 + r1) / 2), to.steps.length - 1);
    var d = to.steps[k].x0 - from.steps[k].x0;
    return [r0 + d, r1 + d];
  }

  function currentRange(id) {
    var gd = document.getElementById(id);
    return gd._fullLayout.xaxis.range.slice();
  }

  function close(a, b) {
    var tol = 1e-6 * Math.max(1, Math.abs(a[1] - a[0]));
    return Math.abs(a[0] - b[0]) <= tol && Math.abs(a[1] - b[1]) <= tol;
  }

  /* Move every other timeline to follow timeline n's range r (or autorange). */
  function follow(n, r) {
    var jobs = [];
    for (var m = 0; m < timelines.length; m++) {
      if (m === n) { continue; }
      var upd;
      if (r === null) {
        upd = {"xaxis.autorange": true};
      } else {
        var want = mapRange(timelines[n], timelines[m], r[0], r[1]);
        if (close(currentRange(timelines[m].id), want)) { continue; }
        upd = {"xaxis.range": want};
      }
      jobs.push(Plotly.relayout(timelines[m].id, upd));
    }
    if (!jobs.length) { return Promise.resolve(); }
    busy = true;
    return Promise.all(jobs).then(function () { busy = false; },
                                  function (e) { busy = false; throw e; });
  }

  function onRelayout(n) {
    return function (ev) {
      if (busy || !ev) { return; }
      if (ev["xaxis.autorange"]) { follow(n, null); return; }
      var r = null;
      if (ev["xaxis.range[0]"] !== undefined) {
        r = [+ev["xaxis.range[0]"], +ev["xaxis.range[1]"]];
      } else if (ev["xaxis.range"]) {
        r = [+ev["xaxis.range"][0], +ev["xaxis.range"][1]];
      }
      if (r) { follow(n, r); }
    };
  }

  /* Show window position k in every timeline, wide enough for the longer run's step. */
  function showStep(k) {
    var width = 0;
    timelines.forEach(function (t) {
      var s = t.steps[Math.min(k, t.steps.length - 1)];
      width = Math.max(width, s.x1 - s.x0);
    });
    width = Math.max(width * 1.06, 1);
    busy = true;
    return Promise.all(timelines.map(function (t) {
      var x0 = t.steps[Math.min(k, t.steps.length - 1)].x0;
      return Plotly.relayout(t.id, {"xaxis.range": [x0 - 0.02 * width, x0 + width]});
    })).then(function () { busy = false; }, function (e) { busy = false; throw e; });
  }

  function setup() {
    timelines.forEach(function (t, n) {
      document.getElementById(t.id).on("plotly_relayout", onRelayout(n));
    });
    var sel = document.getElementById("cgprof-step");
    if (sel) {
      sel.addEventListener("change", function () {
        if (sel.value !== "") { showStep(+sel.value); }
      });
    }
    var reset = document.getElementById("cgprof-reset");
    if (reset) {
      reset.addEventListener("click", function () {
        if (sel) { sel.value = ""; }
        busy = true;
        Promise.all(timelines.map(function (t) {
          return Plotly.relayout(t.id, {"xaxis.range": t.full_range.slice()});
        })).then(function () { busy = false; }, function () { busy = false; });
      });
    }
  }

  function later(ms) {
    return new Promise(function (resolve) { setTimeout(resolve, ms); });
  }

  function selftest() {
    if (location.hash.indexOf("selftest-zoom") < 0 || timelines.length < 2) { return null; }
    var a = timelines[0], b = timelines[1];
    var k = Math.min(2, a.steps.length - 1, b.steps.length - 1);
    var s = a.steps[k];
    var r = [s.x0 + 0.25 * (s.x1 - s.x0), s.x0 + 0.75 * (s.x1 - s.x0)];
    var want = mapRange(a, b, r[0], r[1]);
    /* As a user's drag-zoom does: relayout timeline 0 only; the handler must move 1. */
    var t = performance.now(), zoomMs = null;
    return Plotly.relayout(a.id, {"xaxis.range": r}).then(function () {
      zoomMs = Math.round(performance.now() - t);
      return later(300);
    }).then(function () {
        var got = currentRange(b.id), own = currentRange(a.id);
        check.zoom = {requested: r, expected: want, other: got, own: own, zoom_ms: zoomMs,
                      followed: close(got, want) && close(own, r)};
        var sel = document.getElementById("cgprof-step");
        var j = Math.min(1, a.steps.length - 1, b.steps.length - 1);
        sel.value = String(j);
        sel.dispatchEvent(new Event("change"));
        return later(300).then(function () {
          var ra = currentRange(a.id), rb = currentRange(b.id);
          check.step = {
            step: j, range0: ra, range1: rb,
            aligned: ra[0] <= a.steps[j].x0 && a.steps[j].x0 < ra[1] &&
                     rb[0] <= b.steps[j].x0 && b.steps[j].x0 < rb[1] &&
                     Math.abs((ra[1] - ra[0]) - (rb[1] - rb[0])) < 1e-6 * (ra[1] - ra[0])
          };
        });
      });
  }

  function finish() {
    var rendered = data.order.filter(function (id) {
      var el = document.getElementById(id);
      return !!(el && el._fullLayout && el.querySelector(".main-svg"));
    });
    var verdict = document.getElementById("cgprof-verdict");
    var out = {
      figures_expected: data.order.length,
      figures_rendered: rendered.length,
      errors: check.errors,
      verdict: verdict ? verdict.textContent : null,
      ready_ms: Math.round(performance.now()),
      plotly_loaded_ms: Math.round(scriptStart),
      timings_ms: check.timings || {},
      zoom: check.zoom || null,
      step: check.step || null
    };
    document.getElementById("cgprof-selfcheck").textContent = JSON.stringify(out);
    document.documentElement.setAttribute("data-cgprof-done", "1");
  }

  Promise.all(data.order.map(plot))
    .then(setup)
    .then(selftest)
    .catch(function (e) { check.errors.push("render: " + (e && e.stack ? e.stack : e)); })
    .then(finish);
})();
