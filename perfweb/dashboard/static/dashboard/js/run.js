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

  // The page is laid out for the run's kind: a run not labelled yet looks like training (a
  // step-time row). Once the agent labels it, the header says so; an inference run is laid
  // out again, once (its requests panel instead of the step-time row). True: reload.
  async function labelledSince(config, run) {
    if (config.kind || !run.steps) return false;
    const workload = await API.getJson(config.api + "/workload");
    if (!workload.kind) return false;
    config.kind = workload.kind;
    setField("workload", workload.kind);
    return workload.kind === "inference";
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
