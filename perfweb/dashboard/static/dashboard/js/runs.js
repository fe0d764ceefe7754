// The runs list: live status and numbers from GET /api/v1/runs, and a sparkline per run.
"use strict";
window.PerfwebRuns = (function () {
  const F = window.PerfwebFormat;
  const API = window.PerfwebApi;
  const SPARK_POINTS = 60;
  const SPARK_REFRESH_MS = 15000; // a running run's sparkline is redrawn at most this often
  const drawnFinal = new Set(); // runs whose sparkline is drawn and will not change any more
  const drawnAt = new Map(); // run id -> when its sparkline was last drawn

  function runUrl(config, runId) { return config.runUrl.replace("RUN_ID", encodeURIComponent(runId)); }

  function rowHtml(config, run) {
    const command = F.commandLine(run.command);
    return (
      '<td class="pick"><input type="checkbox" name="run" value="' + F.escapeHtml(run.id) + '" form="compare-form" aria-label="Compare"></td>' +
      '<td><span class="status status-' + F.escapeHtml(run.status) + '" data-field="status">' + F.escapeHtml(run.status) + "</span></td>" +
      '<td class="run-name"><a href="' + runUrl(config, run.id) + '">' + F.escapeHtml(run.name || run.id) + "</a>" +
      '<small title="' + F.escapeHtml(command) + '">' +
      (config.showProject ? '<span class="project">' + F.escapeHtml(run.project) + "</span> · " : "") +
      F.escapeHtml(command) + "</small></td>" +
      '<td data-field="host">' + F.escapeHtml(run.host || "—") + "</td>" +
      "<td><time>" + F.shortLocalTime(run.started_at) + "</time></td>" +
      '<td class="num" data-field="duration"></td><td class="num" data-field="steps"></td>' +
      '<td data-field="coverage"></td>' +
      '<td class="num" data-field="gpus"></td><td class="num" data-field="gpu-util"></td>' +
      '<td><div class="sparkline" data-sparkline="' + F.escapeHtml(run.id) + '"></div>' +
      '<small class="spark-label muted" data-spark-label="' + F.escapeHtml(run.id) + '"></small></td>'
    );
  }

  function coverageHtml(coverage) {  // the run page's verdict (perfweb_recommender.coverage)
    if (!coverage) return "";
    return '<span class="pill pill-' + F.escapeHtml(coverage.verdict) + '"' +
      (coverage.headline ? ' title="' + F.escapeHtml(coverage.headline) + '"' : "") + ">" +
      F.escapeHtml(coverage.label) + "</span>";
  }

  function updateRow(row, run) {
    const status = row.querySelector('[data-field="status"]');
    status.className = "status status-" + run.status;
    status.textContent = run.status;
    row.querySelector('[data-field="duration"]').textContent = F.duration(run.duration_s);
    const unit = run.coverage ? run.coverage.unit : "step";
    row.querySelector('[data-field="steps"]').textContent = F.counted(run.steps, unit);
    const coverage = row.querySelector('[data-field="coverage"]');
    const html = coverageHtml(run.coverage);
    if (coverage.innerHTML !== html) coverage.innerHTML = html;
    row.querySelector('[data-field="gpus"]').textContent = run.gpus;
    row.querySelector('[data-field="gpu-util"]').textContent = F.percent(run.mean_gpu_utilization);
    row.dataset.status = run.status;
  }

  function render(config, runs) {
    const body = document.getElementById("runs-body");
    const existing = new Map();
    body.querySelectorAll("tr[data-run-id]").forEach(function (row) { existing.set(row.dataset.runId, row); });
    let previous = null;
    runs.forEach(function (run) {
      let row = existing.get(run.id);
      if (!row) {
        row = document.createElement("tr");
        row.dataset.runId = run.id;
        row.innerHTML = rowHtml(config, run);
      }
      existing.delete(run.id);
      updateRow(row, run);
      // Keep the API's order (newest first) without touching rows already in place.
      const wanted = previous ? previous.nextSibling : body.firstChild;
      if (wanted !== row) body.insertBefore(row, wanted);
      previous = row;
    });
    existing.forEach(function (row) { row.remove(); });
    document.getElementById("runs-panel").hidden = runs.length === 0;
    document.getElementById("runs-empty").hidden = runs.length !== 0;
  }

  function pickSparkSeries(series, kind) {
    const withData = series.filter(function (s) { return s.t && s.t.length > 1; });
    const gpu = withData.filter(function (s) { return s.name === "gpu.utilization"; });
    if (gpu.length) return { s: gpu[0], label: (gpu.length > 1 ? gpu[0].device + " " : "") + "GPU util %", color: "#2f6fde" };
    const steps = withData.filter(function (s) { return s.name === "step.duration"; });
    if (steps.length) return { s: steps[0], label: kind === "inference" ? "request latency" : "step time", color: "#7a4fd6" };
    return null;
  }

  async function drawSparkline(config, el, run) {
    const data = await API.getJson(config.api + "/" + encodeURIComponent(run.id) + "/series",
      { name: ["gpu.utilization", "step.duration"], points: SPARK_POINTS });
    const picked = pickSparkSeries(data.series || [], run.coverage ? run.coverage.kind : null);
    const caption = document.querySelector('[data-spark-label="' + CSS.escape(run.id) + '"]');
    if (!picked) { el.innerHTML = '<span class="muted small">no data yet</span>'; return; }
    el.title = picked.label + " over the run";
    if (caption) caption.textContent = picked.label;
    el.dataset.points = picked.s.t.length;
    const trace = {
      x: picked.s.t.map(function (t) { return t * 1000; }), y: picked.s.v, type: "scatter", mode: "lines",
      line: { width: 1.5, color: picked.color }, fill: "tozeroy", fillcolor: picked.color + "22", hoverinfo: "skip",
    };
    const layout = {
      margin: { l: 0, r: 0, t: 2, b: 2 }, height: 34, width: 140,
      xaxis: { visible: false, fixedrange: true }, yaxis: { visible: false, fixedrange: true, rangemode: "tozero" },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", showlegend: false,
    };
    el.textContent = "";
    await Plotly.react(el, [trace], layout, { staticPlot: true, displayModeBar: false });
  }

  async function refreshSparklines(config, runs) {
    for (const run of runs.slice(0, config.sparklineLimit || 50)) {
      if (drawnFinal.has(run.id)) continue;
      const el = document.querySelector('[data-sparkline="' + CSS.escape(run.id) + '"]');
      if (!el) continue;
      const fresh = Date.now() - (drawnAt.get(run.id) || 0) < SPARK_REFRESH_MS && el.dataset.points;
      if (run.status === "running" && fresh) continue;
      try {
        await drawSparkline(config, el, run);
        drawnAt.set(run.id, Date.now());
        if (run.status !== "running") drawnFinal.add(run.id);
      } catch (err) { console.warn(err); }
    }
  }

  function start(config) {
    F.localiseTimes(document);
    let anyRunning = true;
    let runs = [];
    async function refresh() {
      const data = await API.getJson(config.api, { limit: config.limit || 100, status: config.status });
      runs = data.runs || [];
      render(config, runs);
      anyRunning = runs.some(function (run) { return run.status === "running"; });
      document.getElementById("live-note").textContent = anyRunning ? "Updating live" : "";
      await refreshSparklines(config, runs);
    }
    refresh().catch(function (err) { console.warn(err); });
    // Fast while something is running or nothing exists yet; slow otherwise, to catch new runs.
    API.poll(refresh, function () { return anyRunning || runs.length === 0 ? config.pollMs || 3000 : config.idlePollMs || 15000; });
  }

  return { start };
})();
