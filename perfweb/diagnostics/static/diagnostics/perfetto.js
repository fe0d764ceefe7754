/* "Open in Perfetto": fetch the stored trace with this page's session, gunzip it in the
 * browser, open ui.perfetto.dev in a new window and hand it the bytes with postMessage once
 * the UI answers PING with PONG (Perfetto's documented way of opening a trace from another
 * page). The trace goes from this browser to that window only; nothing is uploaded. */
(function () {
  "use strict";
  var ORIGIN = "https://ui.perfetto.dev";
  var PING_MS = 250, GIVE_UP_MS = 30000;

  async function gunzipped(response) {
    var body = response.body.pipeThrough(new DecompressionStream("gzip"));
    return await new Response(body).arrayBuffer();
  }

  function handOver(win, buffer, title, fileName, status) {
    var started = Date.now();
    var timer = setInterval(function () {
      if (win.closed || Date.now() - started > GIVE_UP_MS) {
        clearInterval(timer);
        window.removeEventListener("message", onMessage);
        status.textContent = win.closed ? "the Perfetto window was closed" : "Perfetto did not answer";
        return;
      }
      win.postMessage("PING", ORIGIN);
    }, PING_MS);
    function onMessage(event) {
      if (event.source !== win || event.origin !== ORIGIN || event.data !== "PONG") return;
      clearInterval(timer);
      window.removeEventListener("message", onMessage);
      win.postMessage({perfetto: {buffer: buffer, title: title, fileName: fileName}}, ORIGIN);
      status.textContent = "opened in Perfetto";
    }
    window.addEventListener("message", onMessage);
  }

  async function open(button) {
    var status = button.parentElement.querySelector("[data-perfetto-status]");
    var win = window.open(ORIGIN + "/#!/", "_blank");  // opened in the click, or it is blocked
    if (!win) { status.textContent = "allow pop-ups for this page to open Perfetto"; return; }
    status.textContent = "loading the trace…";
    try {
      var response = await fetch(button.dataset.url, {credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      var buffer = await gunzipped(response);
      status.textContent = "waiting for Perfetto…";
      handOver(win, buffer, button.dataset.title, button.dataset.filename.replace(/\.gz$/, ""), status);
    } catch (error) {
      status.textContent = "could not load the trace (" + error.message + ")";
      win.close();
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action=perfetto]");
    if (button) { event.preventDefault(); open(button); }
  });
  window.PerfwebPerfetto = {gunzipped: gunzipped};
})();
