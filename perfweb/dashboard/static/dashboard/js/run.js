// The run page: live header numbers from GET <api> and the aligned timeline, polled while running.
"use strict";
window.PerfwebRun = (function () {
  const F = window.PerfwebFormat;
  const API = window.PerfwebApi;

  function setField(name, text) {
    document.querySelectorAll('[data-field="' + name + '"]').forEach(function (el) { el.textContent = text; });
  }

  function updateHeader(run) {
    const status = document.querySelector('[data-field="status"]');
    if (status) { status.className = "status status-" + run.status; status.textContent = run.status; }
    setField("duration", F.duration(run.duration_s));
    setField("steps", run.steps);
    setField("gpus", run.gpus);
    setField("gpu-util", F.percent(run.mean_gpu_utilization));
    setField("ended", run.ended_at ? F.localTime(run.ended_at) : "—");
    setField("exit-code", run.exit_code === null || run.exit_code === undefined ? "—" : run.exit_code);
    document.getElementById("live-note").textContent = run.status === "running" ? "Updating live" : "";
  }

  // The page is laid out for the run's kind (a step-time row, or the requests panel of an
  // inference run). A run opened before the agent labelled it is laid out again, once.
  async function labelledSince(config, run) {
    if (config.kind || !run.steps) return false;
    const workload = await API.getJson(config.api + "/workload");
    return Boolean(workload.kind);
  }

  function start(config) {
    F.localiseTimes(document);
    const timeline = window.PerfwebTimeline.create(config);
    let status = config.status;
    timeline.refresh().catch(function (err) {
      console.warn(err);
      const loading = document.getElementById("timeline-loading");
      if (loading) { loading.textContent = "Could not load the timeline: " + err.message; loading.classList.add("error"); }
    });
    if (status !== "running") return;
    document.getElementById("live-note").textContent = "Updating live";
    API.poll(async function () {
      const run = await API.getJson(config.api);
      status = run.status;
      config.gpus = run.gpus;
      if (await labelledSince(config, run)) { window.location.reload(); return false; }
      updateHeader(run);
      await timeline.refresh();
      return status === "running"; // one last refresh after the run ends, then stop
    }, config.pollMs || 3000);
  }

  return { start: start };
})();
