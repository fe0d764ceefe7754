/* "Open in Perfetto": fetch the stored trace with this page's session, gunzip it in the
 * browser, open ui.perfetto.dev in a new window and hand it the bytes with postMessage once
 * the UI answers PING with PONG (Perfetto's documented way of opening a trace from another
 * page). The trace goes from this browser to that window only; nothing is uploaded.
 * Offline (no internet, ui.perfetto.dev blocked) the window never answers: after GIVE_UP_MS
 * the page says so and points to the trace's download instead of waiting. */
(function () {
  "use strict";
  var ORIGIN = "https://ui.perfetto.dev";
  var PING_MS = 250, GIVE_UP_MS = 10000;

  // "Perfetto did not answer …: download the trace" with a link to the stored file.
  function pointToDownload(status, button, why) {
    var link = document.createElement("a");
    link.href = button.dataset.url;
    link.setAttribute("download", button.dataset.filename || "");
    link.textContent = "download the trace";
    link.dataset.action = "download-instead";
    status.textContent = why + ": ";
    status.appendChild(link);
    status.appendChild(document.createTextNode(
      " and open it in a Perfetto UI you can reach, chrome://tracing or TensorBoard"));
  }

  async function gunzipped(response) {
    var body = response.body.pipeThrough(new DecompressionStream("gzip"));
    return await new Response(body).arrayBuffer();
  }

  function handOver(win, buffer, button, status) {
    var title = button.dataset.title, fileName = button.dataset.filename.replace(/\.gz$/, "");
    var giveUpMs = Number(button.dataset.giveUpMs) || GIVE_UP_MS;
    var started = Date.now();
    var timer = setInterval(function () {
      var closed = true;
      try { closed = win.closed; } catch (error) { /* severed: treat as gone */ }
      if (closed || Date.now() - started > giveUpMs) {
        clearInterval(timer);
        window.removeEventListener("message", onMessage);
        pointToDownload(status, button, closed ? "the Perfetto window was closed"
          : "Perfetto did not answer in " + Math.round(giveUpMs / 1000) + " s (no internet, or ui.perfetto.dev is blocked here)");
        return;
      }
      try { win.postMessage("PING", ORIGIN); } catch (error) { /* the next tick or the bound ends it */ }
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
      status.textContent = "waiting for Perfetto (at most " + Math.round((Number(button.dataset.giveUpMs) || GIVE_UP_MS) / 1000) + " s)…";
      handOver(win, buffer, button, status);
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
