// The instance page: the deployed XML drawn by bpmn-js as in the modeler, with the
// overlays (waits, open incidents, completed nodes, nodes whose token was withdrawn). /api/instances/<id> is polled;
// when the revision moves, the overlays are redrawn and the tables fetched again.
(function () {
  "use strict";
  var box = document.getElementById("diagram");
  var live = document.getElementById("live");
  var note = document.getElementById("diagram-note");
  var xml = JSON.parse(document.getElementById("diagram-xml").textContent);
  var state = JSON.parse(document.getElementById("diagram-overlays").textContent);
  var taken = JSON.parse(document.getElementById("diagram-taken").textContent);
  var flows = [];
  var viewer = new BpmnJS({ container: box });
  var drawn = [];
  var ready = false;

  function badge(kind, text) {
    var el = document.createElement("div");
    el.className = "dm-badge " + kind;
    el.textContent = text;
    el.title = text;
    return el;
  }

  // The sequence flows the instance took, as Operate highlights them.
  function drawTaken(ids) {
    if (!ready) return;
    var canvas = viewer.get("canvas"), reg = viewer.get("elementRegistry");
    flows.forEach(function (f) { canvas.removeMarker(f, "dm-taken"); });
    flows = (ids || []).filter(function (f) { return reg.get(f); });
    flows.forEach(function (f) { canvas.addMarker(f, "dm-taken"); });
  }

  function draw(overlays) {
    if (!ready) return;
    var canvas = viewer.get("canvas"), ov = viewer.get("overlays"), reg = viewer.get("elementRegistry");
    drawn.forEach(function (d) { canvas.removeMarker(d, "dm-waiting"); canvas.removeMarker(d, "dm-incident"); canvas.removeMarker(d, "dm-completed"); canvas.removeMarker(d, "dm-withdrawn"); });
    ov.remove({ type: "dormant" });
    drawn = [];
    var missing = [];
    Object.keys(overlays).forEach(function (node) {
      var o = overlays[node];
      if (!reg.get(node)) { missing.push(node); return; }
      drawn.push(node);
      var stack = document.createElement("div");
      stack.className = "dm-stack";
      stack.setAttribute("data-node", node);
      if (o.incidents.length) {
        canvas.addMarker(node, "dm-incident");
        o.incidents.forEach(function (t) { stack.appendChild(badge("incident", "incident: " + t)); });
      }
      if (o.waiting.length) {
        if (!o.incidents.length) canvas.addMarker(node, "dm-waiting");
        o.waiting.forEach(function (t) { stack.appendChild(badge("waiting", t)); });
      }
      if (o.completed && !o.incidents.length && !o.waiting.length) {
        canvas.addMarker(node, "dm-completed");
        var done = document.createElement("div");
        done.className = "dm-stack";
        done.setAttribute("data-node", node);
        done.appendChild(badge("completed", "\u2713"));
        ov.add(node, "dormant", { position: { top: -10, right: 6 }, html: done });
      }
      if (o.withdrawn && !o.incidents.length && !o.waiting.length) {
        canvas.addMarker(node, "dm-withdrawn");
        var gone = document.createElement("div");
        gone.className = "dm-stack";
        gone.setAttribute("data-node", node);
        gone.appendChild(badge("withdrawn", "withdrawn"));
        ov.add(node, "dormant", { position: { top: -10, right: 6 }, html: gone });
      }
      if (stack.childNodes.length) ov.add(node, "dormant", { position: { top: -26, left: 0 }, html: stack });
    });
    if (missing.length) { note.hidden = false; note.textContent = "Not in the diagram: " + missing.join(", "); }
  }

  if (!xml) {
    box.hidden = true; note.hidden = false;
    note.textContent = "The deployed model could not be found; the tables below show the instance.";
  } else {
    viewer.importXML(xml).then(function () {
      ready = true;
      viewer.get("canvas").zoom("fit-viewport");
      draw(state);
      drawTaken(taken);
      box.setAttribute("data-ready", "1");
    }).catch(function (err) {
      box.hidden = true; note.hidden = false;
      note.textContent = "This model has no diagram to draw (" + (err && err.message || err) +
        "): it was written without a modeler's layout. The tables below show the instance.";
      box.setAttribute("data-ready", "1");
    });
  }

  var revision = live.getAttribute("data-revision");
  function poll() {
    if (document.hidden) return;
    fetch(box.getAttribute("data-api"), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (s) {
        if (!s || String(s.revision) === revision) return;
        revision = String(s.revision);
        document.getElementById("instance-revision").textContent = s.revision;
        var st = document.getElementById("instance-status");
        st.textContent = s.status.replace(/_/g, " ");
        st.className = "status st-" + s.status;
        var cancel = document.getElementById("cancel-instance");
        if (cancel && ["completed", "terminated", "failed"].indexOf(s.status) >= 0) cancel.hidden = true;
        draw(s.overlays);
        drawTaken(s.taken);
        return fetch(location.pathname + "?partial=1", { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html !== null) { live.innerHTML = html; live.setAttribute("data-revision", revision); } });
      })
      .catch(function () {});
  }
  setInterval(poll, 2000);
})();
