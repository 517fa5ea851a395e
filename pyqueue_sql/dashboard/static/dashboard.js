// pyqueue-sql dashboard: refreshes the live parts of a page without reloading it, and asks before
// destructive actions. No build step, no dependencies.
(function () {
  "use strict";
  // Elements with data-refresh="URL" get their inner HTML from URL every data-every ms. The
  // server renders (and escapes) the fragment; a failed fetch keeps the last content and says so.
  function refresher(el) {
    var url = el.getAttribute("data-refresh");
    var every = parseInt(el.getAttribute("data-every") || "2000", 10);
    var busy = false;
    function tick() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.classList.remove("stale");
          el.removeAttribute("title");
        })
        .catch(function (e) {
          el.classList.add("stale");
          el.setAttribute("title", "could not refresh: " + e.message);
        })
        .finally(function () { busy = false; });
    }
    setInterval(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(refresher);
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      var question = form.getAttribute("data-confirm");
      if (question && !window.confirm(question)) ev.preventDefault();
    });
  });
})();
