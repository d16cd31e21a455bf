// The process page: the deployed XML drawn by bpmn-js, each element with its counts
// (instances waiting there, open incidents there, instances that passed it) as
// overlays, as Operate's process view draws them (docs/console.md).
(function () {
  "use strict";
  var box = document.getElementById("diagram");
  var note = document.getElementById("diagram-note");
  var xml = JSON.parse(document.getElementById("diagram-xml").textContent);
  var counts = JSON.parse(document.getElementById("diagram-counts").textContent);
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
    var missing = [];
    Object.keys(counts).forEach(function (node) {
      var c = counts[node];
      if (!reg.get(node)) { missing.push(node); return; }
      var row = document.createElement("div");
      row.className = "dm-stack dm-counts";
      row.setAttribute("data-node", node);
      if (c.waiting) { row.appendChild(badge("waiting", c.waiting, "waiting here now")); canvas.addMarker(node, "dm-waiting"); }
      if (c.incidents) { row.appendChild(badge("incident", c.incidents, "open incidents here")); canvas.addMarker(node, "dm-incident"); }
      if (c.passed) row.appendChild(badge("passed", c.passed, "passed (of the recent instances counted)"));
      if (row.childNodes.length) ov.add(node, "dormant", { position: { bottom: 4, left: -8 }, html: row });
    });
    if (missing.length) { note.hidden = false; note.textContent = "Not in the diagram: " + missing.join(", "); }
  }

  if (!xml) {
    box.hidden = true; note.hidden = false;
    note.textContent = "The deployed model could not be found; the table below shows the counts.";
    return;
  }
  viewer.importXML(xml).then(function () {
    viewer.get("canvas").zoom("fit-viewport");
    draw();
    box.setAttribute("data-ready", "1");
  }).catch(function (err) {
    box.hidden = true; note.hidden = false;
    note.textContent = "This model has no diagram to draw (" + (err && err.message || err) +
      "): it was written without a modeler's layout. The table below shows the counts.";
    box.setAttribute("data-ready", "1");
  });
})();
