// The comparison page: step-time distributions overlaid, rolling-median bands on time since
// each run started, and the runs' timeline metrics overlaid on that relative axis.
"use strict";
window.PerfwebCompare = (function () {
  const COLORS = ["#2f6fde", "#d9480f", "#1f9d55", "#7a4cc2"];
  const METRICS = [
    { name: "gpu.utilization", title: "GPU utilisation", unit: "%", scale: 1 },
    { name: "gpu.memory_used", title: "GPU memory used", unit: "GiB", scale: 1 / 1073741824 },
    { name: "process.cpu_percent", title: "Process CPU", unit: "%", scale: 1 },
    { name: "process.rss", title: "Process memory (RSS)", unit: "GiB", scale: 1 / 1073741824 },
  ];
  const BASE_LAYOUT = { margin: { l: 56, r: 12, t: 32, b: 64 }, height: 320, legend: { orientation: "h", y: -0.38 },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" };

  function layout(title, xTitle, yTitle, extra) {
    return Object.assign({}, BASE_LAYOUT, { title: { text: title, font: { size: 14 } },
      xaxis: { title: { text: xTitle } }, yaxis: { title: { text: yTitle }, rangemode: "tozero" } }, extra || {});
  }

  async function drawSteps(config) {
    const runs = config.runs.filter(function (r) { return r.steps.length; });
    const hist = runs.map(function (r, i) {
      return { x: r.steps.map(function (s) { return s * 1000; }), type: "histogram", histnorm: "probability",
        opacity: 0.55, name: r.letter + " · " + r.name, marker: { color: COLORS[i % COLORS.length] }, nbinsx: 60 };
    });
    const distribution = document.getElementById("step-distribution");
    await Plotly.newPlot(distribution, hist, layout("Step time distribution", "ms", "share of steps", { barmode: "overlay" }),
      { displaylogo: false, responsive: true });
    const bands = [];
    runs.forEach(function (r, i) {
      bands.push.apply(bands, PerfwebBands.traces(r.t, r.steps, { name: r.letter, color: COLORS[i % COLORS.length], scale: 1000 }));
    });
    const el = document.getElementById("step-bands");
    await Plotly.newPlot(el, bands, layout("Step time over the run", "seconds since start", "ms"),
      { displaylogo: false, responsive: true });
    PerfwebBands.rawOnZoom(el);
    distribution.dataset.runs = String(hist.length);
    el.dataset.runs = String(runs.length);
  }

  async function drawMetrics(config) {
    const box = document.getElementById("metric-overlays");
    const timelines = await Promise.all(config.runs.map(function (r) {
      return PerfwebApi.getJson(config.timelineApi.replace("RUN_ID", encodeURIComponent(r.id)), { points: 600 })
        .catch(function () { return { series: [] }; });
    }));
    box.innerHTML = "";
    const charts = [];
    for (const metric of METRICS) {
      const traces = [];
      timelines.forEach(function (timeline, i) {
        const run = config.runs[i];
        const series = timeline.series.filter(function (s) { return s.name === metric.name && s.t.length; });
        series.forEach(function (s, k) {
          traces.push({ x: s.t.map(function (t) { return t - run.start; }), y: s.v.map(function (v) { return v * metric.scale; }),
            type: "scatter", mode: "lines", name: run.letter + (series.length > 1 ? " " + s.device : ""),
            line: { color: COLORS[i % COLORS.length], width: 1.5, dash: k ? "dot" : "solid" } });
        });
      });
      if (!traces.length) continue;
      const el = document.createElement("div");
      el.className = "chart";
      el.dataset.metric = metric.name;
      box.appendChild(el);
      charts.push({ el: el, traces: traces, metric: metric });
    }
    // Every chart's box is in the grid before the first is drawn, so each takes its own cell's width.
    for (const chart of charts) {
      await Plotly.newPlot(chart.el, chart.traces, layout(chart.metric.title, "seconds since start", chart.metric.unit,
        { height: 270 }), { displaylogo: false, responsive: true });
    }
    const drawn = charts.length;
    if (!drawn) box.innerHTML = '<p class="muted">No timeline metrics in these runs.</p>';
    box.dataset.charts = String(drawn);
  }

  function start(config) {
    drawSteps(config).catch(function (err) { console.warn(err); });
    drawMetrics(config).catch(function (err) { console.warn(err); });
  }

  return { start: start };
})();
