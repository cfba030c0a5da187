// The dashboard's live rows (no page reload, no inline script: CSP script-src 'self').
// Asks the portal's own /api/sessions (same origin, the login cookie) every data-poll-idle-ms (15 s), or while a
// session starts as a long poll (?wait=data-poll-wait-s: answered when it changes), and updates each row in place:
// state, reason, time left, the "ends soon" warning and the Connect / Extend / Stop / Dismiss buttons. A session
// that appears or goes away reloads the page once (its row is rendered by the portal). Changes are announced politely
// (#sessions-live, aria-live). A starting session's start log (/history/<job>/log?lines=15) is shown under its
// row until the app is ready. Stop opens a <dialog> asking for confirmation; without JavaScript the Stop link leads
// to the confirmation page, and the "Refresh" link reloads the page.
(function () {
  "use strict";
  var table = document.querySelector("table.sessions[data-poll]");
  setUpStopDialog();
  if (!table) { return; }
  var url = table.getAttribute("data-poll");
  var fast = parseInt(table.getAttribute("data-poll-fast-ms"), 10) || 500;
  var idle = parseInt(table.getAttribute("data-poll-idle-ms"), 10) || 15000;
  var every = parseInt(table.getAttribute("data-poll-ms"), 10) || idle;
  var waitS = parseFloat(table.getAttribute("data-poll-wait-s")) || 0;
  var live = document.getElementById("sessions-live");

  function rowOf(id) { return table.querySelector("tr[data-job='" + id + "']"); }
  function part(row, selector) { return row.querySelector(selector); }
  function show(el, on) { if (el) { el.hidden = !on; } }
  function setText(el, text) { if (el && el.textContent !== text) { el.textContent = text; } }

  function announce(text) { if (live && text) { live.textContent = text; } }

  function sameSet(sessions) {
    var rows = table.querySelectorAll("tbody tr[data-job]");
    if (rows.length !== sessions.length) { return false; }
    for (var i = 0; i < sessions.length; i++) {
      if (!rowOf(String(sessions[i].job_id))) { return false; }
    }
    return true;
  }

  function update(row, s) {
    var before = row.getAttribute("data-state") + "|" + row.hasAttribute("data-ready") + "|" + s.failed;
    var ready = !!s.ready;
    row.setAttribute("data-state", s.state);
    if (ready) { row.setAttribute("data-ready", ""); } else { row.removeAttribute("data-ready"); }
    if (s.watch) { row.setAttribute("data-watch", ""); } else { row.removeAttribute("data-watch"); }
    setText(part(row, ".state-text"), s.state_text);
    var reason = part(row, ".reason");
    setText(reason, s.reason ? "(" + s.reason + ")" : "");
    show(reason, !!s.reason && s.reason !== "None");
    show(part(row, ".starting"), s.state === "RUNNING" && !ready && !s.failed);
    setText(part(row, ".time-left"), s.time_left_text);
    show(part(row, ".ends-soon"), !!s.nearing_end);
    connectLink(row, s, ready);
    show(part(row, "form.extend-form"), !!s.can_extend);
    show(part(row, "form.dismiss-form"), !!s.failed);
    show(part(row, "a.stop"), !s.failed);
    var after = s.state + "|" + ready + "|" + s.failed;
    if (before !== after) {
      announce("Session " + s.job_id + ": " + s.state_text + (ready ? ", ready: Connect" : "") +
               (s.reason ? " (" + s.reason + ")" : ""));
    }
    startLog(s);
  }

  function connectLink(row, s, ready) {
    var link = part(row, "a.connect");
    if (!link && ready && s.connect_url) {  // made here as the portal renders it: the session just became ready
      link = document.createElement("a");
      link.className = "button connect";
      link.href = s.connect_url;
      link.target = "_blank";
      link.rel = "noopener";
      link.textContent = "Connect";
      var actions = part(row, "td.actions");
      actions.insertBefore(link, actions.firstChild);
    }
    show(link, ready);
  }

  function startLog(s) {
    var logRow = table.querySelector("tr.start-log[data-log-for='" + s.job_id + "']");
    if (!logRow) { return; }
    var starting = !!s.starting && !s.ready;
    show(logRow, starting);
    if (!starting) { return; }
    fetch(logRow.getAttribute("data-log-url"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) { if (text !== null) { setText(logRow.querySelector("pre.log"), text); } })
      .catch(function () { /* no log yet: the row keeps its placeholder */ });
  }

  // While a session starts, a long poll: the portal answers when a watched session changes (or after waitS); an
  // answer that did not wait (the portal's waiting slots were taken) or a failed one is asked again after the fast
  // interval while a session is watched (the idle one otherwise, and after three failures in a row).
  var failures = 0;
  function failed() { failures += 1; window.setTimeout(poll, failures > 3 ? idle : every); }
  function poll() {
    var watching = every !== idle;
    var ask = watching && waitS > 0 ? url + "?wait=" + waitS : url;
    fetch(ask, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) { failed(); return; }
        failures = 0;
        var sessions = body.sessions || [];
        if (!sameSet(sessions)) { window.location.reload(); return; }
        var starting = false;
        for (var i = 0; i < sessions.length; i++) {
          update(rowOf(String(sessions[i].job_id)), sessions[i]);
          starting = starting || !!sessions[i].watch;
        }
        every = starting ? fast : idle;
        window.setTimeout(poll, starting && body.waited ? 0 : every);
      })
      .catch(failed);
  }
  window.setTimeout(poll, every);

  function setUpStopDialog() {
    var dialog = document.getElementById("stop-dialog");
    if (!dialog || typeof dialog.showModal !== "function") { return; }  // the link's confirmation page instead
    var form = dialog.querySelector("form");
    dialog.querySelector("button.cancel").addEventListener("click", function () { dialog.close(); });
    document.addEventListener("click", function (ev) {
      var link = ev.target.closest ? ev.target.closest("a.stop[data-stop-url]") : null;
      if (!link) { return; }
      ev.preventDefault();
      form.setAttribute("action", link.getAttribute("data-stop-url"));
      setText(dialog.querySelector(".stop-job"), link.closest("tr").getAttribute("data-job"));
      dialog.showModal();
      dialog.querySelector("button.cancel").focus();
    });
  }
}());
