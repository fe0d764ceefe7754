// Tiny JSON client for the read API (docs/protocol.md); the session cookie authenticates.
"use strict";
window.PerfwebApi = (function () {
  async function getJson(url, params) {
    const query = new URLSearchParams();
    Object.entries(params || {}).forEach(function ([key, value]) {
      if (value === null || value === undefined) return;
      (Array.isArray(value) ? value : [value]).forEach(function (v) { query.append(key, v); });
    });
    const full = query.toString() ? url + (url.includes("?") ? "&" : "?") + query : url;
    const response = await fetch(full, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    });
    if (!response.ok) {
      const error = new Error("GET " + url + " answered " + response.status);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  // Calls fn every `intervalMs` (awaiting it, so calls never overlap) until fn returns false.
  // Pauses while the tab is hidden.
  function poll(fn, intervalMs) {
    let stopped = false;
    async function tick() {
      if (stopped) return;
      let again = true;
      if (!document.hidden) {
        try { again = (await fn()) !== false; } catch (err) { console.warn(err); }
      }
      if (again && !stopped) setTimeout(tick, typeof intervalMs === "function" ? intervalMs() : intervalMs);
    }
    setTimeout(tick, typeof intervalMs === "function" ? intervalMs() : intervalMs);
    return function stop() { stopped = true; };
  }

  return { getJson, poll };
})();
