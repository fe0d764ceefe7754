// Starts a page's script with the page's config, with no inline script (the CSP allows none):
// <script src=".../start.js" data-start="PerfwebRun"></script> after the json_script
// "page-config" block calls window.PerfwebRun.start(config).
(function () {
  "use strict";
  const name = document.currentScript.dataset.start;
  const config = JSON.parse(document.getElementById("page-config").textContent);
  window[name].start(config);
})();
