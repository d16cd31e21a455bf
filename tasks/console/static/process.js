// The process page: the deployed XML drawn by bpmn-js, each element with its counts
// (instances waiting there, open incidents there, instances that passed it) as
// overlays, as Operate's process view draws them (docs/console.md). The counts come
// with the page's live fragment, which console.js swaps every few seconds: each swap
// redraws the overlays from the fragment's counts, the diagram itself is kept.
(function () {
  "use strict";
  var box = document.getElementById("diagram");
  var note = document.getElementById("diagram-note");
  var xml = JSON.parse(document.getElementById("diagram-xml").textContent);
  var live = document.getElementById("live");
  var marked = [];
  var viewer = new BpmnJS({ container: box });

  function badge(kind, n, what) {
    var el = document.createElement("div");
    el.className = "dm-badge dm-count " + kind;
    el.setAttribute("data-count", kind);
    el.textContent = String(n);
    el.title = n + " " + what;
    return el;
  }

  function draw() {
    var canvas = viewer.get("canvas"), ov = viewer.get("overlays"), reg = viewer.get("elementRegistry");
    var counts = JSON.parse(document.getElementById("diagram-counts").textContent);
    var missing = [];
    ov.remove({ type: "dormant" });
    marked.forEach(function (m) { canvas.removeMarker(m[0], m[1]); });
    marked = [];
    function mark(node, cls) { canvas.addMarker(node, cls); marked.push([node, cls]); }
    Object.keys(counts).forEach(function (node) {
      var c = counts[node];
      if (!reg.get(node)) { missing.push(node); return; }
      var row = document.createElement("div");
      row.className = "dm-stack dm-counts";
      row.setAttribute("data-node", node);
      if (c.waiting) { row.appendChild(badge("waiting", c.waiting, "waiting here now")); mark(node, "dm-waiting"); }
      if (c.incidents) { row.appendChild(badge("incident", c.incidents, "open incidents here")); mark(node, "dm-incident"); }
      if (c.passed) row.appendChild(badge("passed", c.passed, "passed (of the recent instances counted)"));
      if (row.childNodes.length) ov.add(node, "dormant", { position: { bottom: 4, left: -8 }, html: row });
    });
    note.hidden = !missing.length;
    note.textContent = missing.length ? "Not in the diagram: " + missing.join(", ") : "";
  }

  if (!xml) {
    box.hidden = true; note.hidden = false;
    note.textContent = "The deployed model could not be found; the table below shows the counts.";
    return;
  }
  viewer.importXML(xml).then(function () {
    viewer.get("canvas").zoom("fit-viewport");
    draw();
    live.addEventListener("dormant:refreshed", draw);
    box.setAttribute("data-ready", "1");
  }).catch(function (err) {
    box.hidden = true; note.hidden = false;
    note.textContent = "This model has no diagram to draw (" + (err && err.message || err) +
      "): it was written without a modeler's layout. The table below shows the counts.";
    box.setAttribute("data-ready", "1");
  });
})();
