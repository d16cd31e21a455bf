// A task's Camunda Form, drawn by the form-js viewer from the schema the page carries.
// Complete runs the viewer's own validation first; the values go to the server as
// JSON in one hidden field, where they are checked again against the same schema
// (tasks/console/forms.py) before they complete the task.
(function () {
  "use strict";
  var box = document.getElementById("task-form");
  var post = document.getElementById("complete-form");
  var out = document.getElementById("form-values");
  var errors = document.getElementById("form-errors");
  var schema = JSON.parse(document.getElementById("form-schema").textContent);
  var data = JSON.parse(document.getElementById("form-data").textContent);
  var form = null;
  FormViewer.createForm({ container: box, schema: schema, data: data }).then(function (f) {
    form = f;
    box.setAttribute("data-ready", "1");
  }).catch(function (err) {
    errors.textContent = "The form cannot be drawn: " + (err && err.message || err);
  });
  post.addEventListener("submit", function (event) {
    if (!form) { event.preventDefault(); return; }
    var result = form.submit();
    var bad = Object.keys(result.errors || {});
    if (bad.length) {
      event.preventDefault();
      errors.textContent = "Fix the marked field" + (bad.length === 1 ? "" : "s (" + bad.length + ")") + " first.";
      return;
    }
    out.value = JSON.stringify(result.data);
  });
})();
