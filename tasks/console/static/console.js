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
      .then(function (html) { if (html !== null && html !== live.innerHTML) live.innerHTML = html; })
      .catch(function () {});
  }
  // The processes page counts every instance by status: it refreshes less often.
  setInterval(refresh, Number(live.getAttribute("data-interval")) || 3000);
})();
