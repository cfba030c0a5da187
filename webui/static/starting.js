// While a session on the dashboard starts, ask the portal (its own /api/sessions, same origin, the login cookie)
// every data-poll-ms and reload the page as soon as a watched session (pending, or running and not yet ready) changes:
// running, ready (Connect appears), ended, failed. Loaded only while a session starts; the page's 15 s refresh stays the fallback without JavaScript.
(function () {
  "use strict";
  var table = document.querySelector("table.sessions[data-poll]");
  if (!table) { return; }
  var url = table.getAttribute("data-poll");
  var every = parseInt(table.getAttribute("data-poll-ms"), 10) || 500;
  var watched = {};
  var rows = table.querySelectorAll("tr[data-watch]");
  for (var i = 0; i < rows.length; i++) {
    watched[rows[i].getAttribute("data-job")] = rows[i].getAttribute("data-state");
  }
  var deadline = Date.now() + 600000;  // a session that has not started in 10 minutes is left to the page refresh

  function changed(sessions) {
    var seen = {};
    for (var j = 0; j < sessions.length; j++) {
      var s = sessions[j];
      var id = String(s.job_id);
      seen[id] = true;
      if (id in watched && (s.ready || s.state !== watched[id] || !s.watch)) { return true; }
    }
    for (var w in watched) { if (!(w in seen)) { return true; } }
    return false;
  }

  function poll() {
    if (Date.now() > deadline) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (body && changed(body.sessions || [])) { window.location.reload(); return; }
        window.setTimeout(poll, every);
      })
      .catch(function () { window.setTimeout(poll, every * 4); });
  }
  window.setTimeout(poll, every);
}());
