// One aligned timeline per run: Plotly rows stacked on a single shared time axis.
//
// Data: GET <api>/timeline (every series, downsampled by the server). While the run is going
// the page polls it; `uirevision` keeps the user's zoom across updates. Zooming fetches the
// zoomed range again at screen resolution and splices it into the overview, since the
// overview is downsampled.
"use strict";
window.PerfwebTimeline = (function () {
  const API = window.PerfwebApi;
  const ROW_PX = 150;
  const GAP_PX = 44;
  const MARGIN = { l: 64, r: 190, t: 30, b: 40 };
  const GPU_COLORS = ["#2f6fde", "#e8743b", "#19a979", "#d64545", "#945ecf", "#13a4b4", "#c88a12", "#6c7a89"];
  const PROCESS_COLORS = { process: "#2f6fde", workers: "#e8743b" };
  const STEP_COLOR = "#7a4fd6";
  const WAIT_COLOR = "#e8743b";
  const SCALAR_COLOR = "#13795b";
  // Shading of the script's phases (series run.phase) across every row; train lightest.
  const PHASE_STYLE = {
    train: { color: "#2f6fde", opacity: 0.06 }, eval: { color: "#e8743b", opacity: 0.16 },
    test: { color: "#19a979", opacity: 0.16 }, predict: { color: "#945ecf", opacity: 0.16 },
  };
  // Plotly shows date axes in UTC; shifting by the viewer's offset shows local wall-clock time.
  const TZ_SHIFT_MS = new Date().getTimezoneOffset() * 60000;

  function toAxis(unixSeconds) { return unixSeconds * 1000 - TZ_SHIFT_MS; }
  function fromAxis(value) {
    const ms = typeof value === "number" ? value : Date.parse(String(value).replace(" ", "T") + "Z");
    return (ms + TZ_SHIFT_MS) / 1000;
  }

  // Device keys follow perfweb_agent.protocol.DeviceNaming: `process`/`workers` carry the rank in a
  // job of several ranks, GPUs carry the node in a job of several hosts.
  function deviceLabel(device) {
    if (device === "process") return "main process";
    if (device === "workers") return "DataLoader workers";
    let match = /^(process|workers):(\d+)$/.exec(device);
    if (match) return "rank " + match[2] + (match[1] === "process" ? " process" : " workers");
    match = /^gpu:(\d+):n(\d+)$/.exec(device);
    if (match) return "GPU " + match[1] + " (node " + match[2] + ")";
    match = /^(gpu|rank):(\d+)$/.exec(device);
    if (match) return (match[1] === "gpu" ? "GPU " : "rank ") + match[2];
    return device;
  }

  function colorFor(device, index) {
    if (PROCESS_COLORS[device]) return PROCESS_COLORS[device];
    const match = /:(\d+)$/.exec(device);
    return GPU_COLORS[(match ? Number(match[1]) : index) % GPU_COLORS.length];
  }

  // Bytes are drawn in MiB or GiB, whichever keeps the numbers readable.
  function scaleFor(unit, series) {
    if (unit !== "bytes") return { factor: 1, unit: unit };
    let max = 0;
    series.forEach(function (s) { s.v.forEach(function (v) { if (v > max) max = v; }); });
    return max >= 2 * 1024 ** 3 ? { factor: 1 / 1024 ** 3, unit: "GiB" } : { factor: 1 / 1024 ** 2, unit: "MiB" };
  }

  function seriesKey(s) { return s.device + "|" + s.name; }

  // The overview outside [start, end] plus the full-resolution detail inside it.
  function splice(overview, detail) {
    if (!detail) return overview;
    const byKey = new Map(detail.series.map(function (s) { return [seriesKey(s), s]; }));
    return overview.map(function (s) {
      const inside = byKey.get(seriesKey(s));
      if (!inside) return s;
      const t = [], v = [];
      s.t.forEach(function (x, i) { if (x < detail.start) { t.push(x); v.push(s.v[i]); } });
      inside.t.forEach(function (x, i) { t.push(x); v.push(inside.v[i]); });
      s.t.forEach(function (x, i) { if (x > detail.end) { t.push(x); v.push(s.v[i]); } });
      return Object.assign({}, s, { t: t, v: v });
    });
  }

  // Step time (and request latency) as a rolling median with its p10–p90 band from the
  // server's raw steps (GET <api>/steps/bands): a long run reads at a glance. The steps
  // themselves are drawn, and listed in the legend, once zoomed in.
  function bandTraces(bandRows, device, ctx) {
    const band = (ctx.bands || []).find(function (b) { return b.device === device && b.t.length; });
    if (!band) return [];
    const scale = bandRows.factor;
    const y = function (values) { return values.map(function (v) { return v * scale; }); };
    const x = band.t.map(toAxis);
    const label = ctx.manyRanks ? " (" + deviceLabel(device) + ")" : "";
    const common = { type: "scatter", mode: "lines", xaxis: "x", yaxis: bandRows.axis, legend: bandRows.legend };
    const meta = function (metric) { return { device: device, metric: metric, raw_count: band.raw_count, window_steps: band.window_steps }; };
    return [
      Object.assign({ x: x, y: y(band.p10), line: { width: 0, color: STEP_COLOR }, hoverinfo: "skip", showlegend: false,
        name: "p10" + label, meta: meta("step.duration.p10") }, common),
      Object.assign({ x: x, y: y(band.p90), line: { width: 0, color: STEP_COLOR }, fill: "tonexty", fillcolor: STEP_COLOR + "2e",
        name: "p10–p90" + label, meta: meta("step.duration.p90"),
        hovertemplate: "p90 %{y:.4~g} " + bandRows.unit + "<extra></extra>" }, common),
      Object.assign({ x: x, y: y(band.median), line: { width: 2.2, color: STEP_COLOR },
        name: "step time, rolling median of " + band.window_steps + " steps" + label, meta: meta("step.duration.median"),
        hovertemplate: "median %{y:.4~g} " + bandRows.unit + " (window of " + band.window_steps + " steps)<extra></extra>" }, common),
    ];
  }

  // The step anatomy (series step.phase.<phase>): each phase's rolling median stacked, from
  // GET <api>/steps/bands `phases`, of the lowest rank; zoomed in, the raw steps stacked.
  const ANATOMY_COLORS = {
    data: "#e8743b", copy: "#c88a12", forward: "#2f6fde", backward: "#19a979",
    optimizer: "#d64545", collective: "#945ecf", output_copy: "#13a4b4", other: "#8a96a8",
  };
  const ANATOMY_ORDER = ["data", "copy", "forward", "backward", "optimizer", "collective", "output_copy", "other"];

  function anatomyTraces(row, series, axis, legend, ctx) {
    const prefix = "step.phase.";
    const devices = series.filter(function (s) { return s.name.startsWith(prefix) && s.t.length; })
      .map(function (s) { return s.device; })
      .concat((ctx.phaseBands || []).map(function (b) { return b.device; }))
      .sort(function (a, b) { return a.localeCompare(b, undefined, { numeric: true }); });
    if (!devices.length) return [];
    const device = devices[0];
    const raw = !!ctx.zoomed;
    const traces = [];
    ANATOMY_ORDER.forEach(function (phase) {
      let x, y;
      if (raw) {
        const s = series.find(function (s) { return s.device === device && s.name === prefix + phase && s.t.length; });
        if (!s) return;
        x = s.t; y = s.v;
      } else {
        const b = (ctx.phaseBands || []).find(function (b) { return b.device === device && b.phase === phase && b.t.length; });
        if (!b) return;
        x = b.t; y = b.median;
      }
      if (!y.some(function (v) { return v > 0; })) return;
      const name = phase.replace("_", " ");
      traces.push({
        type: "scatter", mode: "lines", stackgroup: "anatomy", name: name, legend: legend, xaxis: "x", yaxis: axis,
        x: x.map(toAxis), y: y, line: { width: 0.5, color: ANATOMY_COLORS[phase], shape: raw ? "vh" : "linear" },
        fillcolor: ANATOMY_COLORS[phase] + "b3",
        hovertemplate: "%{y:.4~g} s<extra>" + name + (raw ? "" : " (rolling median)") + "</extra>",
        meta: { device: device, metric: prefix + phase, raw: raw },
      });
    });
    return traces;
  }

  function rowTraces(row, series, rowIndex, ctx) {
    ctx = ctx || {};
    const axis = rowIndex === 0 ? "y" : "y" + (rowIndex + 1);
    const legend = rowIndex === 0 ? "legend" : "legend" + (rowIndex + 1);
    if (row.key === "anatomy") return { traces: anatomyTraces(row, series, axis, legend, ctx), unit: "s" };
    const mine = series.filter(function (s) { return row.metrics.includes(s.name) && s.t.length; });
    mine.sort(function (a, b) {
      return a.device.localeCompare(b.device, undefined, { numeric: true }) ||
        row.metrics.indexOf(a.name) - row.metrics.indexOf(b.name);
    });
    const scale = scaleFor(row.unit, mine);
    const ranks = new Set(mine.map(function (s) { return s.device; }));
    const banded = [];
    const traces = mine.map(function (s, i) {
      const isWait = s.name === "step.data_wait";
      const isStep = s.name === "step.duration";
      let name = deviceLabel(s.device);
      if (isStep || isWait) name = (isStep ? "step time" : "data wait") + (ranks.size > 1 ? " (" + name + ")" : "");
      if (row.scalar && ranks.size === 1) name = row.title;
      const manyRanks = (isStep || isWait) && ranks.size > 1;
      let color = isStep ? STEP_COLOR : isWait ? WAIT_COLOR : colorFor(s.device, i);
      if (manyRanks) color = colorFor(s.device, i); // one colour per rank; data wait dotted
      if (row.scalar && ranks.size === 1) color = SCALAR_COLOR;
      return {
        // A scalar is logged now and then (every N steps, each evaluation): dots show where.
        type: "scatter", mode: row.scalar ? "lines+markers" : "lines", marker: { size: 4 },
        name: name, legend: legend, xaxis: "x", yaxis: axis,
        x: s.t.map(toAxis), y: scale.factor === 1 ? s.v : s.v.map(function (v) { return v * scale.factor; }),
        // A step's value holds from the previous step's end to its own end time ("vh").
        line: { width: 1.5, color: color, shape: isStep || isWait ? "vh" : "linear", dash: manyRanks && isWait ? "dot" : "solid" },
        fill: isWait && !manyRanks ? "tozeroy" : "none", fillcolor: isWait && !manyRanks ? WAIT_COLOR + "40" : undefined,
        hovertemplate: "%{y:.4~g} " + scale.unit + "<extra>" + name + "</extra>",
        meta: { device: s.device, metric: s.name, raw_count: s.raw_count, downsampled: s.downsampled },
      };
    });
    mine.forEach(function (s, i) {
      if (s.name !== "step.duration") return;
      const band = bandTraces({ factor: scale.factor, axis: axis, legend: legend, unit: scale.unit }, s.device,
        { bands: ctx.bands, manyRanks: ranks.size > 1 });
      if (!band.length) return;
      banded.push.apply(banded, band);
      const raw = traces[i];
      raw.name = raw.name.replace("step time", "each step");
      raw.line = Object.assign({}, raw.line, { width: 1, color: raw.line.color + "99" });
      // Drawn (and listed in the legend) once zoomed in: a legend names only what is visible.
      if (!ctx.zoomed) { raw.visible = false; raw.showlegend = false; }
    });
    return { traces: banded.concat(traces), unit: scale.unit };
  }

  // The script's scalars (perfweb_agent.log, the framework callbacks), one row each, the first
  // `scalarRowsMax` by name; `hidden` names the others.
  function scalarRows(series, extras) {
    if (!extras) return { rows: [], hidden: [] };
    const names = Array.from(new Set(series.filter(function (s) {
      return s.name.startsWith(extras.scalarPrefix) && s.t.length;
    }).map(function (s) { return s.name; }))).sort();
    const rows = names.slice(0, extras.scalarRowsMax).map(function (name) {
      return { key: "scalar:" + name, title: name.slice(extras.scalarPrefix.length), unit: "", metrics: [name],
        group: "scalars", empty: "", scalar: true };
    });
    return { rows: rows, hidden: names.slice(extras.scalarRowsMax).map(function (n) { return n.slice(extras.scalarPrefix.length); }) };
  }

  // Each phase from its change to the next one (the last to the end of the data): a band
  // from the lowest rank that marks phases.
  function phaseBands(series, extras) {
    if (!extras) return [];
    const marked = series.filter(function (s) { return s.name === extras.phaseSeries && s.t.length; });
    if (!marked.length) return [];
    marked.sort(function (a, b) { return a.device.localeCompare(b.device, undefined, { numeric: true }); });
    const phase = marked[0];
    let dataEnd = -Infinity;
    series.forEach(function (s) { if (s.t.length) dataEnd = Math.max(dataEnd, s.t[s.t.length - 1]); });
    const order = phase.t.map(function (_, i) { return i; }).sort(function (a, b) { return phase.t[a] - phase.t[b]; });
    const bands = [];
    order.forEach(function (index, k) {
      const name = extras.phases[String(Math.round(phase.v[index]))];
      const start = phase.t[index];
      const end = k + 1 < order.length ? phase.t[order[k + 1]] : dataEnd;
      if (!name || name === "none" || !(end > start)) return;
      const last = bands[bands.length - 1];
      if (last && last.phase === name && last.end === start) { last.end = end; return; } // one band
      bands.push({ phase: name, start: start, end: end });
    });
    return bands;
  }

  function phaseShapes(bands) {
    return bands.map(function (band) {
      const style = PHASE_STYLE[band.phase] || PHASE_STYLE.eval;
      return { type: "rect", xref: "x", yref: "paper", x0: toAxis(band.start), x1: toAxis(band.end), y0: 0, y1: 1,
        fillcolor: style.color, opacity: style.opacity, line: { width: 0 }, layer: "below" };
    });
  }

  // One line under the title: which shade is which phase, and the time spent in each.
  function phaseLegend(bands) {
    if (!bands.length) return null;
    const totals = new Map();
    bands.forEach(function (b) {
      const t = totals.get(b.phase) || { seconds: 0, count: 0 };
      t.seconds += b.end - b.start; t.count += 1; totals.set(b.phase, t);
    });
    const p = document.createElement("p");
    p.className = "phase-legend";
    p.dataset.testid = "phase-legend";
    p.appendChild(document.createTextNode("Phases: "));
    totals.forEach(function (t, phase) {
      const style = PHASE_STYLE[phase] || PHASE_STYLE.eval;
      const swatch = document.createElement("span");
      swatch.className = "phase-swatch";
      swatch.style.background = style.color;
      swatch.style.opacity = String(Math.min(1, style.opacity * 4));
      p.appendChild(swatch);
      const seconds = t.seconds >= 10 ? t.seconds.toFixed(0) : t.seconds.toPrecision(2);
      p.appendChild(document.createTextNode(phase + " (" + t.count + "×, " + seconds + " s)  "));
    });
    return p;
  }

  function layoutFor(drawn, runId) {
    const n = drawn.length;
    const height = MARGIN.t + MARGIN.b + n * ROW_PX + (n - 1) * GAP_PX;
    const plotHeight = height - MARGIN.t - MARGIN.b;
    const layout = {
      height: height, margin: MARGIN, uirevision: runId, hovermode: "x",
      paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff",
      font: { family: "system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif", size: 12, color: "#1c2430" },
      xaxis: {
        type: "date", anchor: "y" + (n > 1 ? n : ""), showgrid: true, gridcolor: "#eef1f5",
        showspikes: true, spikemode: "across", spikesnap: "cursor", spikethickness: 1, spikecolor: "#8a96a8", spikedash: "dot",
      },
      annotations: [], showlegend: true,
    };
    drawn.forEach(function (item, i) {
      const top = 1 - (i * (ROW_PX + GAP_PX)) / plotHeight;
      const bottom = top - ROW_PX / plotHeight;
      const key = i === 0 ? "yaxis" : "yaxis" + (i + 1);
      layout[key] = {
        domain: [Math.max(0, bottom), Math.min(1, top)], anchor: "x", rangemode: "tozero",
        gridcolor: "#eef1f5", zeroline: false, ticksuffix: item.unit === "%" ? "%" : "",
        title: { text: item.unit === "%" ? "" : item.unit, font: { size: 11, color: "#5d6b7e" }, standoff: 6 },
      };
      if (item.row.max_value) layout[key].range = [0, item.row.max_value * 1.05];
      layout[i === 0 ? "legend" : "legend" + (i + 1)] = {
        x: 1.01, xanchor: "left", y: top, yanchor: "top", font: { size: 11 }, bgcolor: "rgba(255,255,255,0)",
      };
      layout.annotations.push({
        text: "<b>" + item.row.title + "</b>", xref: "paper", yref: "paper", x: 0, y: top,
        xanchor: "left", yanchor: "bottom", showarrow: false, font: { size: 13 }, yshift: 4,
      });
    });
    return layout;
  }

  // One line per run of consecutive empty rows of the same group. A GPU row of a run that
  // has GPUs is only waiting for samples; one without GPUs says why it stays empty.
  function emptyLines(rows, present, gpus) {
    const lines = [];
    rows.forEach(function (row) {
      if (present.has(row.key)) return;
      const last = lines[lines.length - 1];
      if (last && last.group === row.group && last.lastIndex === rows.indexOf(row) - 1) {
        last.titles.push(row.title); last.lastIndex += 1;
      } else {
        const text = row.group === "gpu" && gpus > 0 ? row.pending : row.empty;
        lines.push({ group: row.group, titles: [row.title], text: text, lastIndex: rows.indexOf(row) });
      }
    });
    return lines.map(function (line) {
      const names = line.titles.length > 1
        ? line.titles.slice(0, -1).join(", ") + " and " + line.titles[line.titles.length - 1]
        : line.titles[0];
      return { group: line.group, text: names + ": " + line.text };
    });
  }

  function create(config) {
    const el = document.getElementById(config.elementId || "timeline");
    const notesEl = document.getElementById(config.notesId || "no-data-rows");
    const state = { overview: [], detail: null, shape: "", plotted: false, bands: [], phaseBands: [] };

    function pointsFor(factor) {
      const width = el.clientWidth || 1200;
      return Math.min(10000, Math.max(500, Math.round(width * factor)));
    }

    async function draw() {
      const series = splice(state.overview, state.detail);
      const drawn = [];
      const scalars = scalarRows(series, config.extras);
      config.rows.concat(scalars.rows).forEach(function (row) {
        const built = rowTraces(row, series, drawn.length,
          { bands: state.bands, phaseBands: state.phaseBands, zoomed: !!state.detail });
        if (built.traces.length) drawn.push({ row: row, traces: built.traces, unit: built.unit });
      });
      const present = new Set(drawn.map(function (d) { return d.row.key; }));
      notesEl.innerHTML = "";
      emptyLines(config.rows, present, config.gpus || 0).forEach(function (line) {
        const p = document.createElement("p");
        p.className = "no-data";
        p.dataset.group = line.group;
        p.textContent = line.text;
        notesEl.appendChild(p);
      });
      if (scalars.hidden.length) {
        const p = document.createElement("p");
        p.className = "no-data";
        p.dataset.group = "scalars";
        p.textContent = scalars.hidden.length + " more scalar" + (scalars.hidden.length > 1 ? "s" : "") +
          " not drawn (" + scalars.hidden.join(", ") + "): the timeline draws the first " +
          config.extras.scalarRowsMax + " by name; the read API has them all (GET " + config.api +
          "/series?name=" + config.extras.scalarPrefix + scalars.hidden[0] + ").";
        notesEl.appendChild(p);
      }
      const bands = phaseBands(series, config.extras);
      const legend = phaseLegend(bands);
      if (legend) notesEl.appendChild(legend);
      const loading = document.getElementById("timeline-loading");
      if (loading) loading.remove();
      if (!drawn.length) {
        if (state.plotted) { Plotly.purge(el); state.plotted = false; }
        return;
      }
      const traces = [].concat.apply([], drawn.map(function (d) { return d.traces; }));
      const layout = layoutFor(drawn, config.runId);
      layout.shapes = phaseShapes(bands);
      await Plotly.react(el, traces, layout, {
        responsive: true, displaylogo: false, scrollZoom: false,
        modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
      });
      if (!state.plotted) { el.on("plotly_relayout", onRelayout); state.plotted = true; }
      el.dataset.points = traces.reduce(function (n, t) { return n + t.x.length; }, 0);
      el.dataset.rows = drawn.map(function (d) { return d.row.key; }).join(",");
      el.dataset.phases = bands.map(function (b) { return b.phase; }).join(",");
    }

    async function loadOverview() {
      const [data, bands] = await Promise.all([
        API.getJson(config.api + "/timeline", { points: pointsFor(1) }),
        API.getJson(config.api + "/steps/bands").catch(function () { return { bands: [] }; }),
      ]);
      state.overview = data.series || [];
      state.bands = bands.bands || [];
      state.phaseBands = bands.phases || [];
    }

    async function loadDetail(start, end) {
      const data = await API.getJson(config.api + "/timeline", { start: start, end: end, points: pointsFor(2) });
      state.detail = { start: start, end: end, series: data.series || [] };
    }

    let relayoutSeq = 0;
    async function onRelayout(event) {
      if (!event) return;
      let range = null;
      if (event["xaxis.range[0]"] !== undefined) range = [event["xaxis.range[0]"], event["xaxis.range[1]"]];
      else if (Array.isArray(event["xaxis.range"])) range = event["xaxis.range"];
      const seq = ++relayoutSeq;
      if (range) {
        const start = fromAxis(range[0]), end = fromAxis(range[1]);
        try { await loadDetail(start, end); } catch (err) { console.warn(err); return; }
      } else if (event["xaxis.autorange"]) {
        if (!state.detail) return;
        state.detail = null;
      } else {
        return;
      }
      if (seq === relayoutSeq) await draw();
    }

    async function refresh() {
      await loadOverview();
      await draw();
    }

    return { refresh: refresh, state: state };
  }

  return {
    create: create, splice: splice, emptyLines: emptyLines, fromAxis: fromAxis, toAxis: toAxis,
    deviceLabel: deviceLabel, scalarRows: scalarRows, phaseBands: phaseBands, anatomyTraces: anatomyTraces,
    rowTraces: rowTraces,
  };
})();
