// The requests panel of an inference run: latency p50/p95/p99 and throughput over sliding
// windows, from GET <api> (/api/v1/runs/<id>/workload; computed by the server from the raw
// requests). Polled while the run is live.
"use strict";
(function () {
  const INTERVAL_MS = 5000;
  const panel = document.getElementById("requests-panel");
  if (!panel || !window.PerfwebApi || !window.Plotly) return;
  const LATENCY = [
    { key: "p50_s", name: "p50", color: "#2f6fde" },
    { key: "p95_s", name: "p95", color: "#e8743b" },
    { key: "p99_s", name: "p99", color: "#d64545" },
  ];
  const toAxis = window.PerfwebTimeline ? window.PerfwebTimeline.toAxis : function (t) { return t * 1000; };
  const CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };

  function layout(title, unit, extra) {
    return Object.assign({
      title: { text: "<b>" + title + "</b>", x: 0, xanchor: "left", font: { size: 13 } },
      height: 280, margin: { l: 60, r: 60, t: 40, b: 40 }, hovermode: "x unified",
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff",
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif", size: 12, color: "#1c2430" },
      xaxis: { type: "date", gridcolor: "#eef1f5" },
      yaxis: { title: { text: unit, font: { size: 11 } }, rangemode: "tozero", gridcolor: "#eef1f5" },
      legend: { orientation: "h", y: -0.18 },
    }, extra || {});
  }

  // Windows without a request are left out by the server: between two windows more than a
  // stride apart the latency lines break (null) and the throughput drops to 0.
  function withGaps(windows) {
    const stride = windows.window_s / 2;
    const keys = ["t", "p50_s", "p95_s", "p99_s", "rps", "sps"];
    const out = { window_s: windows.window_s };
    keys.forEach(function (k) { out[k] = []; });
    windows.t.forEach(function (t, i) {
      if (i > 0 && t - windows.t[i - 1] > 1.5 * stride) {
        const silent = { t: (t + windows.t[i - 1]) / 2, rps: 0, sps: windows.sps[i] === null ? null : 0 };
        keys.forEach(function (k) { out[k].push(k in silent ? silent[k] : null); });
      }
      keys.forEach(function (k) { out[k].push(windows[k][i]); });
    });
    return out;
  }

  function draw(requests) {
    const w = withGaps(requests.windows);
    const x = w.t.map(toAxis);
    const latency = LATENCY.map(function (p) {
      return {
        type: "scatter", mode: "lines+markers", name: "latency " + p.name, x: x,
        y: w[p.key].map(function (s) { return s === null ? null : s * 1000; }), line: { color: p.color, width: 1.8 },
        marker: { size: 4 }, hovertemplate: "%{y:.3~f} ms<extra>" + p.name + "</extra>",
      };
    });
    const latencyEl = document.getElementById("latency-chart");
    latencyEl.innerHTML = "";
    Plotly.react(latencyEl, latency, layout("Request latency (sliding " + w.window_s.toFixed(1) + " s windows)", "ms"), CONFIG);
    latencyEl.dataset.traces = latency.map(function (t) { return t.name; }).join(",");
    latencyEl.dataset.points = String(requests.windows.t.length);

    const throughput = [{
      type: "scatter", mode: "lines", name: "requests/s", x: x, y: w.rps, line: { color: "#19a979", width: 1.8, shape: "hv" },
      hovertemplate: "%{y:.4~g} requests/s<extra></extra>",
    }];
    const hasSamples = w.sps.some(function (v) { return v !== null; });
    if (hasSamples) {
      throughput.push({
        type: "scatter", mode: "lines", name: "samples/s", x: x, y: w.sps, yaxis: "y2",
        line: { color: "#945ecf", width: 1.5, dash: "dot", shape: "hv" }, hovertemplate: "%{y:.4~g} samples/s<extra></extra>",
      });
    }
    const throughputEl = document.getElementById("throughput-chart");
    throughputEl.innerHTML = "";
    Plotly.react(throughputEl, throughput, layout("Throughput", "requests/s", hasSamples ? {
      // A constant batch size makes both lines one shape: a taller samples/s axis keeps them apart.
      yaxis2: { title: { text: "samples/s", font: { size: 11 } }, overlaying: "y", side: "right", showgrid: false,
                range: [0, 1.3 * Math.max.apply(null, w.sps.filter(function (v) { return v !== null; }))] },
    } : {}), CONFIG);
    throughputEl.dataset.traces = throughput.map(function (t) { return t.name; }).join(",");
    throughputEl.dataset.points = String(requests.windows.t.length);
  }

  async function refresh() {
    const body = await window.PerfwebApi.getJson(panel.dataset.api);
    if (body.requests && document.getElementById("latency-chart")) draw(body.requests);
    return panel.dataset.live === "true" && body.kind === "inference";
  }

  refresh().then(function (again) {
    if (again) window.PerfwebApi.poll(refresh, INTERVAL_MS);
  }).catch(function (err) { console.warn(err); });
})();
