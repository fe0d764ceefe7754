// The fleet page's chart: each run's GPU-hours stacked by where they went (top 20 runs).
(function () {
  "use strict";
  // The project filter applies on choice (a script file: the page's CSP runs no inline handler).
  document.querySelectorAll("select[data-submit-on-change]").forEach((select) =>
    select.addEventListener("change", () => select.form.submit()));
  const node = document.getElementById("waste-chart");
  const data = document.getElementById("waste-runs-data");
  if (!node || !data || !window.Plotly) return;
  const rows = JSON.parse(data.textContent).filter((r) => r.gpus > 0).slice(0, 20);
  if (!rows.length) { node.closest(".panel").hidden = true; return; }
  const names = rows.map((r) => r.name || r.run_id.slice(0, 8));
  const parts = [
    ["busy", "busy", "#2e7d32"],
    ["low_utilization", "low utilisation", "#f9a825"],
    ["idle_holding_memory", "idle holding memory", "#c62828"],
    ["unattributed", "unattributed", "#9e9e9e"],
  ];
  const traces = parts.map(([key, label, color]) => ({
    type: "bar", orientation: "h", name: label, y: names, marker: { color },
    x: rows.map((r) => r.gpu_hours[key]),
    hovertemplate: "%{y}: %{x:.2f} GPU-h " + label + "<extra></extra>",
  }));
  window.Plotly.newPlot(node, traces, {
    barmode: "stack", margin: { l: 140, r: 20, t: 10, b: 40 },
    xaxis: { title: "GPU-hours" }, yaxis: { autorange: "reversed" },
    legend: { orientation: "h" },
  }, { displayModeBar: false, responsive: true });
})();
