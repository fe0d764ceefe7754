// Formatting shared by the dashboard pages; mirrors templatetags/perfweb_format.py.
"use strict";
window.PerfwebFormat = (function () {
  function pad2(n) { return String(n).padStart(2, "0"); }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || seconds === "") return "—";
    let total = Math.max(0, Math.floor(Number(seconds)));
    const days = Math.floor(total / 86400); total -= days * 86400;
    const hours = Math.floor(total / 3600); total -= hours * 3600;
    const minutes = Math.floor(total / 60); const secs = total - minutes * 60;
    if (days) return days + "d " + pad2(hours) + "h";
    if (hours) return hours + "h " + pad2(minutes) + "m";
    if (minutes) return minutes + "m " + pad2(secs) + "s";
    return secs + "s";
  }

  function counted(value, unit) {  // counted(8062, "request") -> "8,062 requests"
    if (value === null || value === undefined || value === "" || Number(value) === 0) return "—";
    const number = Math.floor(Number(value));
    return number.toLocaleString("en-US") + " " + (unit || "step") + (number === 1 ? "" : "s");
  }

  function percent(value) {
    if (value === null || value === undefined || value === "") return "—";
    return Math.round(Number(value)) + "%";
  }

  function localTime(unixSeconds) {
    if (unixSeconds === null || unixSeconds === undefined) return "—";
    const d = new Date(unixSeconds * 1000);
    return d.getFullYear() + "-" + pad2(d.getMonth() + 1) + "-" + pad2(d.getDate()) + " " +
      pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds());
  }

  function shortLocalTime(unixSeconds) {
    return unixSeconds === null || unixSeconds === undefined ? "—" : localTime(unixSeconds).slice(0, 16);
  }

  // Like Python's shlex.join, which renders the same command on the server.
  function shellQuote(part) {
    const text = String(part);
    if (text === "") return "''";
    return /[^\w@%+=:,./-]/.test(text) ? "'" + text.replace(/'/g, "'\"'\"'") + "'" : text;
  }

  function commandLine(command) {
    if (!command) return "";
    return Array.isArray(command) ? command.map(shellQuote).join(" ") : String(command);
  }

  function escapeHtml(text) {
    return String(text === null || text === undefined ? "" : text)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Rewrite server-rendered <time data-local datetime=ISO> elements into the viewer's local time.
  function localiseTimes(root) {
    (root || document).querySelectorAll("time[data-local][datetime]").forEach(function (el) {
      const iso = el.getAttribute("datetime");
      if (!iso) return;
      const seconds = Date.parse(iso) / 1000;
      if (!Number.isNaN(seconds)) {
        el.textContent = el.hasAttribute("data-seconds") ? localTime(seconds) : shortLocalTime(seconds);
        el.title = iso;
      }
    });
  }

  return { duration, counted, percent, localTime, shortLocalTime, commandLine, escapeHtml, localiseTimes };
})();
