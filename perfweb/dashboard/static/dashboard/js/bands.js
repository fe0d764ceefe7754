// Step time and request latency as people read them: a rolling median with a p10–p90 band
// (a long run reads at a glance instead of as a barcode of outliers), with the raw points
// added once the view is zoomed in far enough to show them one by one.
"use strict";
window.PerfwebBands = (function () {
  const BAND_POINTS = 400;  // windows per series: the band's resolution
  const RAW_LIMIT = 1500;   // raw points drawn when at most this many are in view

  function quantile(sorted, q) {
    if (!sorted.length) return NaN;
    const pos = (sorted.length - 1) * q, lo = Math.floor(pos), hi = Math.ceil(pos);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
  }

  // t, v in time order -> {t, median, p10, p90}: one value per window of `size` points
  // centred on every `stride`-th point (size ~ 2 % of the run, at least 25 steps but at most
  // a quarter of a short run, as the server's perfweb/diagnostics/step_bands.py: fewer let a
  // two-speed loop flip the median).
  function rolling(t, v, size) {
    const n = v.length;
    const out = { t: [], median: [], p10: [], p90: [] };
    if (!n) return out;
    const floor = Math.max(5, Math.min(25, Math.floor(n / 4)));
    const width = Math.min(n, Math.max(floor, size || Math.round(n / 50)));
    const stride = Math.max(1, Math.floor(n / BAND_POINTS));
    for (let i = 0; i < n; i += stride) {
      const lo = Math.max(0, Math.min(i - Math.floor(width / 2), n - width)), hi = lo + width;
      const win = v.slice(lo, hi).filter(Number.isFinite).sort(function (a, b) { return a - b; });
      if (!win.length) continue;
      out.t.push(t[i]);
      out.median.push(quantile(win, 0.5));
      out.p10.push(quantile(win, 0.1));
      out.p90.push(quantile(win, 0.9));
    }
    return out;
  }

  // Plotly traces for one series: band (p10 then p90 filled to it), median line, raw points
  // (hidden until zoomed in). `opts`: {name, color, x: fn(t) -> axis value, scale, xaxis, yaxis,
  // legendgroup, showlegend}.
  function traces(t, v, opts) {
    const x = opts.x || function (s) { return s; };
    const scale = opts.scale || 1;
    const band = rolling(t, v);
    const color = opts.color || "#2f6fde";
    const common = { xaxis: opts.xaxis || "x", yaxis: opts.yaxis || "y", legendgroup: opts.legendgroup || opts.name };
    const y = function (values) { return values.map(function (value) { return value * scale; }); };
    return [
      Object.assign({ x: band.t.map(x), y: y(band.p10), type: "scatter", mode: "lines", line: { width: 0, color: color },
        hoverinfo: "skip", showlegend: false, name: opts.name + " p10" }, common),
      Object.assign({ x: band.t.map(x), y: y(band.p90), type: "scatter", mode: "lines", line: { width: 0, color: color },
        fill: "tonexty", fillcolor: hexAlpha(color, 0.18), hoverinfo: "skip", showlegend: false,
        name: opts.name + " p10–p90" }, common),
      Object.assign({ x: band.t.map(x), y: y(band.median), type: "scatter", mode: "lines", line: { width: 2, color: color },
        name: opts.name + " (rolling median)", showlegend: opts.showlegend !== false, meta: "median" }, common),
      Object.assign({ x: t.map(x), y: y(v), type: "scattergl", mode: "markers", marker: { size: 3, color: color, opacity: 0.5 },
        name: opts.name + " (steps)", visible: false, showlegend: false, meta: "raw" }, common),
    ];
  }

  function hexAlpha(hex, alpha) {
    const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
    if (!m) return hex;
    return "rgba(" + parseInt(m[1], 16) + "," + parseInt(m[2], 16) + "," + parseInt(m[3], 16) + "," + alpha + ")";
  }

  // Shows the raw-point traces of `el` when the x range in view holds few enough of them.
  function rawOnZoom(el) {
    el.on("plotly_relayout", function (event) {
      const data = el.data || [];
      const raws = [];
      data.forEach(function (trace, index) { if (trace.meta === "raw") raws.push(index); });
      if (!raws.length) return;
      const lo = event["xaxis.range[0]"], hi = event["xaxis.range[1]"];
      let show = false;
      if (lo !== undefined && hi !== undefined) {
        const a = toNumber(lo), b = toNumber(hi);
        const inView = raws.reduce(function (count, index) {
          return count + data[index].x.filter(function (x) { const n = toNumber(x); return n >= a && n <= b; }).length;
        }, 0);
        show = inView <= RAW_LIMIT;
      }
      const current = raws.some(function (index) { return data[index].visible === true; });
      if (show !== current) Plotly.restyle(el, { visible: show }, raws);
    });
  }

  function toNumber(x) { return typeof x === "number" ? x : new Date(x).getTime(); }

  return { rolling: rolling, traces: traces, rawOnZoom: rawOnZoom, quantile: quantile };
})();
