// The job page: poll the job's JSON, move the progress bar, draw the rounds as they arrive.
(function () {
  "use strict";
  const root = document.getElementById("job");
  const field = (name) => root.querySelector(`[data-field="${name}"]`);
  const page = (name) => document.querySelector(`[data-field="${name}"]`);

  function draw(state) {
    const arms = { baseline: { x: [], y: [] }, candidate: { x: [], y: [] } };
    for (const arm of state.arms) {
      arms[arm.arm].x.push(arm.round);
      arms[arm.arm].y.push(arm.mean_s ?? arm.median_s);
    }
    const traces = Object.entries(arms).map(([name, points]) => ({
      name, x: points.x, y: points.y, type: "scatter", mode: "lines+markers",
    }));
    Plotly.react("rounds-chart", traces, {
      margin: { t: 10, r: 10, b: 40, l: 60 },
      xaxis: { title: { text: "round" }, dtick: 1 },
      yaxis: { title: { text: "time per step (s), mean of the round" }, rangemode: "tozero" },
    }, { displayModeBar: false, responsive: true });
  }

  // The before/after table (perfweb_agent.ab.stats.before_after_rows), rebuilt from the poll.
  function table(state) {
    const rows = state.before_after || [];
    const body = page("before-after");
    body.replaceChildren(...rows.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.key = row.key;
      for (const [text, cls] of [[row.metric, ""], [row.before, "num"], [row.after, "num"],
        [row.change, row.better === true ? "num better" : row.better === false ? "num worse" : "num"]]) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.appendChild(td);
      }
      return tr;
    }));
    body.closest("table").hidden = rows.length === 0;
    page("before-after-empty").hidden = rows.length > 0;
    const check = page("results-check");
    check.textContent = state.results_check || "";
    check.classList.toggle("worse", state.verdict === "faster but changes results");
  }

  function render(state) {
    const status = field("status");
    status.textContent = state.state;
    status.className = "status status-job-" + state.state;
    const verdict = field("verdict");
    verdict.hidden = !state.verdict;
    verdict.querySelector("strong").textContent = state.verdict_label || state.verdict || "";
    verdict.querySelector("strong").dataset.verdict = state.verdict || "";
    // Past the minimum rounds the end is not known: an indeterminate bar, not a full one.
    if (state.progress.fraction === null) field("progress").removeAttribute("value");
    else field("progress").value = state.progress.fraction;
    field("progress-text").textContent = state.progress.text || "";
    if (state.duration && state.duration.took_s !== null && state.duration.took_s !== undefined) {
      field("duration").textContent = "Took " + Math.round(state.duration.took_s) + " s. " + (state.duration.sentence || "");
    }
    field("error").textContent = state.error || "";
    if (state.speedup) {
      field("summary").textContent =
        `${state.speedup.toFixed(2)}× (95% CI ${state.ci_low.toFixed(2)}–${state.ci_high.toFixed(2)})`;
    }
    field("stop").textContent = state.stop_reason || "";
    if (state.terminal && field("cancel")) field("cancel").remove();
    table(state);
    draw(state);
  }

  async function poll() {
    try {
      const reply = await fetch(root.dataset.pollUrl, { headers: { Accept: "application/json" } });
      if (reply.ok) {
        const state = await reply.json();
        render(state);
        if (state.terminal) return;
      }
    } catch (error) { /* the next poll retries */ }
    setTimeout(poll, 2000);
  }

  const initial = JSON.parse(document.getElementById("job-state").textContent);
  render(initial);
  if (!initial.terminal) setTimeout(poll, 2000);
})();
