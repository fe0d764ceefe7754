// Keeps the ranked fixes panel current while its run is live: polls the findings API and,
// when a newer diagnosis has landed, swaps in the server-rendered panel (one HTML source).
"use strict";
(function () {
  const INTERVAL_MS = 15000;
  const first = document.getElementById("findings-panel");
  if (!first || first.dataset.live !== "true" || !window.PerfwebApi) return;
  let seen = first.dataset.diagnosedAt || "";

  async function refresh() {
    const current = document.getElementById("findings-panel");
    const body = await window.PerfwebApi.getJson(current.dataset.api);
    const diagnosed = body.diagnosed_at === null ? "" : String(body.diagnosed_at);
    if (diagnosed === seen) return true;
    const page = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
    if (!page.ok) return true;
    const html = new DOMParser().parseFromString(await page.text(), "text/html");
    const fresh = html.getElementById("findings-panel");
    if (!fresh) return true;
    seen = diagnosed;
    const adopted = document.adoptNode(fresh);
    current.replaceWith(adopted);
    if (window.PerfwebFormat) window.PerfwebFormat.localiseTimes(adopted);
    return adopted.dataset.live === "true";
  }

  window.PerfwebApi.poll(refresh, INTERVAL_MS);
})();
