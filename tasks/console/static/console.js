// Lists refresh in place: every few seconds the page's own URL is fetched with
// ?partial=1 and the live fragment swapped, unless the pointer is over a form.
(function () {
  "use strict";
  var live = document.querySelector("#live[data-live]");
  if (!live) return;
  var url = live.getAttribute("data-live");
  url += (url.indexOf("?") >= 0 ? "&" : "?") + "partial=1";
  function refresh() {
    if (document.hidden || live.querySelector("form:hover")) return;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || html === live.innerHTML) return;
        live.innerHTML = html;
        // A page that draws from the fragment (the process page's counts on its
        // diagram, process.js) redraws on this event.
        live.dispatchEvent(new Event("dormant:refreshed"));
      })
      .catch(function () {});
  }
  // The processes page counts every instance by status, a process page reads its
  // recent instances' facts: they refresh less often (data-interval).
  setInterval(refresh, Number(live.getAttribute("data-interval")) || 3000);
})();
