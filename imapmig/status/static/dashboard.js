// The imapmig dashboard: polls /status.json every 2 s and renders it in
// place (no reload, no framework). Every value from the server is set as
// text (never as HTML). The DOM ids and data attributes are a contract
// with the browser test (see docs/dashboard-and-api.md).
"use strict";

(function () {
  var POLL_MS = 2000;
  var BACKOFF_MS = 10000;
  var TOKEN_KEY = "imapmig.token";
  var SORT_KEY = "imapmig.sort";   // the table's order, a setting of this browser
  var FAILURES_LIMIT = 50;
  var STATES = ["queued", "waiting", "connecting", "running", "backing_off", "paused", "paused_by_server",
    "deferred", "stopping", "stopped", "done", "done_with_failures", "failed", "cancelled"];
  // What each wait is, in words: the badge and the line that says why and until when.
  var WAIT_WORDS = { backing_off: "retrying", paused: "paused by the admin", paused_by_server: "paused by the server",
    deferred: "deferred", waiting: "waiting for a grant" };
  var BADGE_WORDS = { paused: "paused by admin", paused_by_server: "paused by server",
    deferred: "deferred (budget)", waiting: "waiting for a grant" };

  var state = {
    polls: 0,
    offset: 0,
    matched: 0,
    // A fleet's filtered /status.json pages by position: where the next
    // page starts (page.next) and where the pages before it started.
    nextOffset: null,
    backOffsets: [],
    lostSince: null,
    timer: null,
    inflight: null,
    generation: 0,
    rows: new Map(),
    // In a fleet, the table's page of /fleet/jobs.json: where it starts
    // (`after`), the pages before it, and the index of its first row.
    fleet: { on: false, after: null, back: [], position: 0, next: null },
    detail: null,   // {name, offset, q, opener}
    lastSamples: null,
    now: null       // the last snapshot's time
  };
  window.imapmigDashboard = { polls: 0 };

  function $(id) { return document.getElementById(id); }

  // ---- formatting (binary units, en-US separators) ----
  var numberFormat = new Intl.NumberFormat("en-US");
  function count(n) { return typeof n === "number" ? numberFormat.format(n) : "–"; }
  // "1 job", "2 jobs": the noun agrees with the number (imapmig.units.plural).
  function counted(n, one, many) { return count(n) + " " + (n === 1 ? one : many); }
  function bytes(n) {
    if (typeof n !== "number") return "–";
    if (n < 1024) return n + " B";
    var units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    var value = n, i = -1;
    do { value /= 1024; i += 1; } while (value >= 1024 && i < units.length - 1);
    return value.toFixed(value < 10 ? 2 : 1) + " " + units[i];
  }
  function msgRate(r) {
    if (typeof r !== "number") return "–";
    return (r >= 100 ? r.toFixed(0) : r.toFixed(1)) + " msg/s";
  }
  function mibRate(r) {
    if (typeof r !== "number") return "–";
    return bytes(r) + "/s";
  }
  function percent(p) { return typeof p === "number" ? p.toFixed(1) + " %" : "–"; }
  function duration(seconds) {
    if (typeof seconds !== "number" || !isFinite(seconds)) return "–";
    var s = Math.max(0, Math.round(seconds));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600);
    var m = Math.floor(s % 3600 / 60), sec = s % 60;
    if (d) return d + " d " + h + " h";
    if (h) return h + " h " + m + " min";
    if (m) return m + " min " + sec + " s";
    return sec + " s";
  }
  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function clock(epoch, withSeconds) {
    var t = new Date(epoch * 1000);
    return pad(t.getHours()) + ":" + pad(t.getMinutes()) + (withSeconds ? ":" + pad(t.getSeconds()) : "");
  }
  function dateTime(epoch, now) {
    var t = new Date(epoch * 1000);
    var sameDay = now && new Date(now * 1000).toDateString() === t.toDateString();
    var day = t.getFullYear() + "-" + pad(t.getMonth() + 1) + "-" + pad(t.getDate());
    return (sameDay ? "" : day + " ") + clock(epoch, true);
  }
  function stateWords(s) { return String(s || "unknown").replace(/_/g, " "); }
  // A resume time: the clock (with the day unless it is today's, or before
  // the first poll), "UTC" where the browser's zone is.
  // Short: the clock alone within the next 24 hours (the jobs table's Time left).
  function untilText(epoch, short) {
    var utc = new Date(epoch * 1000).getTimezoneOffset() === 0;
    var soon = short && state.now && epoch - state.now < 86400;
    return (soon ? clock(epoch) : dateTime(epoch, state.now).replace(/:\d\d$/, "")) + (utc ? " UTC" : "");
  }
  // The state a job shows: the daemon's, and "done" with failed messages is
  // not green (done_with_failures) even from a daemon that says "done".
  function shownState(job) {
    return job.state === "done" && job.messages_failed > 0 ? "done_with_failures" : job.state;
  }
  function badgeWords(job) {
    var shown = shownState(job);
    if (shown === "done_with_failures") return "done, " + count(job.messages_failed) + " failed";
    return BADGE_WORDS[shown] || stateWords(shown);
  }
  // The job's wait: its `wait`, or one read from the older keys (waiting_for, retry_at).
  function jobWait(job) {
    if (job.wait) return job.wait;
    if (!WAIT_WORDS[job.state]) return null;
    return { kind: job.state, reason: job.waiting_for || "", until: job.retry_at || null, by: null };
  }
  // A job backing off: "retrying: REASON (attempt 3 of 10, next at 18:02)".
  function retryingText(job) {
    var detail = [];
    if (typeof job.retry_attempt === "number") detail.push("attempt " + job.retry_attempt + " of " + job.retry_attempts);
    if (job.retry_at) detail.push("next at " + clock(job.retry_at));
    return "retrying: " + job.waiting_for + (detail.length ? " (" + detail.join(", ") + ")" : "");
  }
  // "paused by the server: over quota (until 14:05)"; a backoff as retryingText says it.
  function waitText(job, wait) {
    if (wait.kind === "backing_off" && job.waiting_for) return retryingText(job);
    var detail = [];
    if (wait.until) detail.push("until " + untilText(wait.until));
    else if (wait.kind === "paused") detail.push("until resumed");
    if (wait.by) detail.push("by " + wait.by);
    var reason = wait.reason && wait.reason !== WAIT_WORDS[wait.kind] ? ": " + wait.reason : "";
    return WAIT_WORDS[wait.kind] + reason + (detail.length ? " (" + detail.join(", ") + ")" : "");
  }
  // Why nothing can move (totals.held): "paused", "waiting for daily budgets".
  var HELD_WORDS = { paused: "paused", paused_by_server: "paused by the server", deferred: "waiting for daily budgets" };
  function heldText(held) {
    var kinds = Object.keys(HELD_WORDS).filter(function (k) { return held.jobs && held.jobs[k]; });
    if (kinds.length === 1) return HELD_WORDS[kinds[0]];
    return kinds.map(function (k) { return count(held.jobs[k]) + " " + HELD_WORDS[k]; }).join(", ") || "nothing can move";
  }
  function dataValue(v) { return v === null || v === undefined ? "" : String(v); }

  // Set text and data-value only when they change (cheap polls, no layout churn).
  function put(el, text, value) {
    if (!el) return;
    if (el.textContent !== text) el.textContent = text;
    if (value !== undefined) {
      var v = dataValue(value);
      if (el.getAttribute("data-value") !== v) el.setAttribute("data-value", v);
    }
  }
  function putTime(el, epoch, text) {
    while (el.firstChild) el.removeChild(el.firstChild);
    var t = document.createElement("time");
    t.dateTime = new Date(epoch * 1000).toISOString();
    t.textContent = text;
    el.appendChild(t);
  }
  function setBar(bar, value) {
    if (typeof value === "number") {
      var v = Math.max(0, Math.min(100, value));
      if (bar.getAttribute("value") !== String(v)) bar.value = v;
    } else if (bar.hasAttribute("value")) {
      bar.removeAttribute("value");  // indeterminate: not yet counted
    }
  }
  // Text with a line-break opportunity after each separator (@ . / _ - space),
  // so that long names wrap at natural points and nowhere else.
  function putBreakable(e, text) {
    if (e.getAttribute("data-text") === text) return;
    e.setAttribute("data-text", text);
    while (e.firstChild) e.removeChild(e.firstChild);
    text.replace(/([@.\/_\- ])/g, "$1\u0000").split("\u0000").forEach(function (part, n) {
      if (n) e.appendChild(document.createElement("wbr"));
      e.appendChild(document.createTextNode(part));
    });
  }
  // A path that wraps at its separators only: each part up to a "/" one
  // unbroken box (wrapped inside only if wider than the line).
  function pathText(label, path) {
    var e = el("span", "muted small path", label);
    path.replace(/\//g, "/\u0000").split("\u0000").forEach(function (part, n) {
      if (n) e.appendChild(document.createElement("wbr"));
      e.appendChild(el("span", "part", part));
    });
    return e;
  }
  function el(tag, className, text) {
    var e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- the query of /status.json, from the filter controls ----
  function jobsQuery() {
    var params = new URLSearchParams();
    params.set("offset", String(state.offset));
    params.set("limit", $("jobs-limit").value);
    var filter = $("jobs-filter-state").value;
    if (filter) params.set("state", filter);
    var q = $("jobs-filter-q").value.trim();
    if (q) params.set("q", q);
    if ($("jobs-filter-errors").checked) params.set("errors", "1");
    var sort = $("jobs-sort").value;
    if (sort && sort !== "order") params.set("sort", sort);
    return "status.json?" + params.toString();
  }

  function getJSON(url, signal) {
    return fetch(url, { cache: "no-store", credentials: "same-origin", signal: signal,
      headers: { Accept: "application/json" } }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        if (!response.ok) {
          var error = new Error(body.error || ("HTTP " + response.status));
          error.status = response.status;
          throw error;
        }
        return body;
      });
    });
  }

  // ---- polling ----
  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(poll, ms);
  }
  function poll() {
    clearTimeout(state.timer);
    if (state.inflight) state.inflight.abort();
    var controller = new AbortController();
    state.inflight = controller;
    var generation = ++state.generation;
    var detailRequest = state.detail ? refreshDetail() : Promise.resolve();
    getJSON(jobsQuery(), controller.signal).then(function (snapshot) {
      if (generation !== state.generation) return null;
      state.fleet.on = fleetListed(snapshot);
      if (!state.fleet.on) return [snapshot, null];
      // The fleet's page; unreadable (503), the table lists this daemon's.
      return getJSON(fleetQuery(), controller.signal).then(function (page) { return [snapshot, page]; },
        function (error) { if (error.name === "AbortError") throw error; return [snapshot, null]; });
    }).then(function (answer) {
      if (!answer || generation !== state.generation) return;
      var snapshot = answer[0];
      state.inflight = null;
      var began = performance.now();
      try {
        render(snapshot, answer[1]);
      } catch (error) {
        error.answered = true;
        throw error;
      }
      window.imapmigDashboard.renderMs = Math.round(performance.now() - began);
      state.polls += 1;
      window.imapmigDashboard.polls = state.polls;
      connected(snapshot);
      return detailRequest;
    }).catch(function (error) {
      if (error.name === "AbortError" || generation !== state.generation) return;
      state.inflight = null;
      // A 4xx is an answer (e.g. a query the daemon refuses), not a lost connection.
      if (error.status >= 400 && error.status < 500) error.answered = true;
      lost(error);
    }).then(function () {
      if (generation === state.generation) schedule(state.lostSince === null ? POLL_MS : BACKOFF_MS);
    });
  }
  function connected(snapshot) {
    var line = $("connection");
    state.lostSince = null;
    line.setAttribute("data-state", "live");
    var text = snapshot.run && snapshot.run.finished_at ? "Run finished" : "Live";
    if (snapshot.schema !== 2) text += " (unexpected schema " + snapshot.schema + ")";
    put(line, text);
    document.body.classList.remove("offline");
  }
  function lost(error) {
    var line = $("connection");
    if (error.answered) {
      // The server answered, but not as this page expects (another version?).
      state.lostSince = null;
      line.setAttribute("data-state", "lost");
      put(line, "Cannot show the server's answer (" + error.message + "); see status.json");
      return;
    }
    if (state.lostSince === null) state.lostSince = Date.now() / 1000;
    line.setAttribute("data-state", "lost");
    put(line, "Connection lost since " + clock(state.lostSince) + " (" + (error.message || "error") +
      "); retrying every 10 s");
    document.title = "⚠ connection lost · imapmig";
    document.body.classList.add("offline");
  }

  // ---- the overview ----
  function render(s, fleetPage) {
    var totals = s.totals || {}, run = s.run || {};
    if (typeof s.time !== "number") throw new Error("no time in the snapshot");
    state.now = s.time;
    $("updated").setAttribute("data-time", dataValue(s.time));
    $("updated").dateTime = new Date(s.time * 1000).toISOString();
    put($("updated"), clock(s.time, true));
    put($("version"), s.version ? "v" + s.version : "");
    put($("footer-version"), s.version ? "v" + s.version : "");
    var allCounted = totals.jobs_counted === totals.jobs_total;
    var uncounted = (totals.jobs_total || 0) - (totals.jobs_counted || 0);
    put($("overall-done"), count(totals.messages_done), totals.messages_done);
    put($("overall-total"), allCounted ? count(totals.messages_total) : "not yet counted",
      allCounted ? totals.messages_total : "");
    put($("overall-failed"), count(totals.messages_failed), totals.messages_failed);
    $("overall-failed").classList.toggle("has-failed", totals.messages_failed > 0);
    put($("overall-percent"), percent(totals.percent_messages), totals.percent_messages);
    setBar($("overall-bar"), totals.percent_messages);
    var note = $("overall-uncounted");
    note.hidden = allCounted;
    put(note, run.finished_at ?
      "Never counted: " + count(uncounted) + (uncounted === 1 ? " job" : " jobs") +
        " (could not list the source; see the error in the jobs table)." :
      "Not yet counted: " + count(uncounted) + (uncounted === 1 ? " job" : " jobs") +
        " (totals, percentages and time left cover counted jobs only).");
    put($("overall-bytes-done"), bytes(totals.bytes_done), totals.bytes_done);
    put($("overall-bytes-total"), allCounted ? bytes(totals.bytes_total) : "not yet counted",
      allCounted ? totals.bytes_total : "");
    // The percentage counts failed messages' octets as settled: say so.
    var bytesFailed = typeof totals.bytes_failed === "number" ? totals.bytes_failed : 0;
    put($("overall-bytes-failed"), bytes(bytesFailed), bytesFailed);
    $("overall-bytes-failed-part").hidden = bytesFailed <= 0;
    put($("overall-bytes-percent"), percent(totals.percent_bytes), totals.percent_bytes);
    setBar($("overall-bytes-bar"), totals.percent_bytes);
    renderRate(totals, run);
    var eta = totals.eta_seconds, held = totals.held;
    put($("overall-eta"), typeof eta === "number" ? duration(eta) : run.finished_at ? "finished" :
      held ? heldText(held) : (allCounted ? "– (no rate yet)" : "– (not all counted)"), eta);
    $("overall-eta").classList.toggle("is-held", !run.finished_at && !!held);
    var etaClock = $("overall-eta-clock");
    if (typeof eta === "number" && !run.finished_at) {
      putTime(etaClock, s.time + eta, "done ≈ " + dateTime(s.time + eta, s.time));
    } else if (held && !run.finished_at && held.until) {
      putTime(etaClock, held.until, "until " + untilText(held.until));
    } else {
      put(etaClock, held && !run.finished_at && held.jobs && held.jobs.paused ? "until resumed" : "");
    }
    document.title = (typeof totals.percent_messages === "number" ? percent(totals.percent_messages) + " · " : "") +
      (run.finished_at ? "finished · " : "") + "imapmig";
    renderRun(s, run);
    renderControls(s.controls);
    renderStateCounts(totals.jobs || {});
    renderChart(s.throughput || {}, s.time, run);
    renderDaemons(s.daemons, s.daemons_error);
    renderListDiffers(s.fleet_list_differs);
    if (fleetPage) renderFleetJobs(fleetPage, s.jobs || []);
    else renderJobs(s.jobs || [], s.page || {});
  }

  // ---- the fleet: every daemon, and the one holding each job ----
  // A daemon is named by its host and the start of its id (several may
  // run on one host); its full id is the title.
  function daemonName(d) { return d.host + " · " + String(d.id).slice(0, 8); }
  function putDaemon(cell, holder) {
    var text = holder ? daemonName(holder) + (holder.live === false ? " (lease ended)" : "") : "–";
    put(cell, text, holder ? holder.id : "");
    cell.title = holder ? holder.id : "";
    cell.classList.toggle("is-dead", !!holder && holder.live === false);
  }
  // This daemon's configuration file is not the fleet's job list's.
  function renderListDiffers(why) {
    var note = $("daemons-list-differs");
    note.hidden = !why;
    put(note, why ? "This daemon's job list differs from the fleet's: " + why +
      " (it claims nothing until its file is the fleet's, or a reload here replaces the fleet's list)." : "");
  }

  function renderDaemons(daemons, error) {
    var body = $("daemons-body"), problem = $("daemons-error");
    problem.hidden = !error;
    put(problem, error ? "The fleet could not be read: " + error : "");
    if (!daemons) return;  // unreadable: the last rows stay, under the error
    var live = daemons.filter(function (d) { return d.live; }).length;
    put($("daemons-live"), counted(live, "live", "live") + (daemons.length > live ? ", " +
      count(daemons.length - live) + " lease ended" : ""), live);
    var rows = new Map();
    Array.prototype.forEach.call(body.rows, function (tr) { rows.set(tr.getAttribute("data-daemon"), tr); });
    var previous = null;
    daemons.forEach(function (d) {
      var tr = rows.get(d.id);
      if (!tr) {
        tr = document.createElement("tr");
        tr.setAttribute("data-daemon", d.id);
        var th = el("th", "daemon-name");
        th.scope = "row";
        tr.appendChild(th);
        [["daemon-version", "Version", ""], ["daemon-heartbeat", "Last heartbeat", "n"],
          ["daemon-jobs", "Jobs", "n"], ["daemon-rate", "Rate", "n"], ["daemon-lease", "Lease", ""]].forEach(function (c) {
          var td = el("td", c[0] + (c[2] ? " " + c[2] : ""));
          td.setAttribute("data-label", c[1]);
          tr.appendChild(td);
        });
      }
      rows.delete(d.id);
      var q = function (c) { return tr.querySelector("." + c); };
      put(q("daemon-name"), daemonName(d) + " (pid " + d.pid + ")" + (d.this ? " · this page" : ""), d.id);
      q("daemon-name").title = d.id;
      put(q("daemon-version"), "v" + d.version, d.version);
      put(q("daemon-heartbeat"), duration(d.heartbeat_age_seconds) + " ago", d.heartbeat_age_seconds);
      put(q("daemon-jobs"), count(d.jobs), d.jobs);
      put(q("daemon-rate"), msgRate(d.messages_per_second), d.messages_per_second);
      put(q("daemon-lease"), d.live ? "live" : "ended", d.live ? "live" : "ended");
      tr.classList.toggle("is-dead", !d.live);
      tr.classList.toggle("is-this", !!d.this);
      var expected = previous ? previous.nextSibling : body.firstChild;
      if (expected !== tr) body.insertBefore(tr, expected);
      previous = tr;
    });
    rows.forEach(function (tr) { tr.remove(); });
  }

  // While the run goes on: the rate now of the jobs that can move; after its
  // end, no rate now (nothing moves) but the run's average.
  function renderRate(totals, run) {
    var finished = typeof run.finished_at === "number";
    put($("overall-rate-label"), finished ? "Average rate" : "Rate now");
    put($("overall-rate"), msgRate(finished ? run.average_messages_per_second : totals.messages_per_second),
      totals.messages_per_second);
    put($("overall-byte-rate"), finished ? "over " + duration(run.elapsed_seconds) : mibRate(totals.bytes_per_second),
      totals.bytes_per_second);
  }

  function renderRun(s, run) {
    if (typeof run.started_at === "number") putTime($("run-started"), run.started_at, dateTime(run.started_at, s.time));
    put($("run-duration"), duration(run.elapsed_seconds));
    var finished = $("run-finished"), verify = $("verify-result");
    if (typeof run.finished_at === "number") putTime(finished, run.finished_at, dateTime(run.finished_at, s.time));
    else put(finished, "still running");
    var v = run.verify;
    if (!v) { verify.removeAttribute("data-outcome"); verify.removeAttribute("data-text"); }
    if (v) {
      verify.setAttribute("data-outcome", v.ok ? "ok" : "differences");
      var summary = (v.ok ? "✓ OK: " : "✕ ") + counted(v.jobs, "job", "jobs") + ", " +
        counted(v.differences, "difference", "differences") +
        (v.unverified ? ", " + count(v.unverified) + " not verified" : "");
      if (verify.getAttribute("data-text") !== summary + v.time + v.path) {
        verify.setAttribute("data-text", summary + v.time + v.path);
        while (verify.firstChild) verify.removeChild(verify.firstChild);
        verify.appendChild(document.createTextNode(summary));
        verify.appendChild(document.createElement("br"));
        var when = el("span", "muted small");
        var t = el("time", "", dateTime(v.time, s.time));
        t.dateTime = new Date(v.time * 1000).toISOString();
        when.appendChild(t);
        verify.appendChild(when);
        if (v.path) {
          verify.appendChild(document.createElement("br"));
          verify.appendChild(pathText("report ", v.path));
        }
      }
    } else if (typeof run.finished_at === "number") {
      while (verify.firstChild) verify.removeChild(verify.firstChild);
      verify.appendChild(document.createTextNode("not run: run "));
      verify.appendChild(el("code", "", "imapmig verify"));
    } else {
      put(verify, "after the run");
    }
  }

  // Controls only where the daemon can allow them: without a token
  // (controls.enabled false) it refuses every one, so none is shown,
  // only the line that says how to enable them.
  function renderControls(controls) {
    var on = !controls || controls.enabled !== false;
    var value = on ? "on" : "off";
    if (document.body.getAttribute("data-controls") !== value) document.body.setAttribute("data-controls", value);
  }

  function renderStateCounts(jobs) {
    var box = $("state-counts");
    var key = JSON.stringify(jobs);
    if (box.getAttribute("data-key") === key) return;
    box.setAttribute("data-key", key);
    while (box.firstChild) box.removeChild(box.firstChild);
    STATES.forEach(function (name) {
      if (!jobs[name]) return;
      var chip = el("button", "badge chip", count(jobs[name]) + " " + (BADGE_WORDS[name] || stateWords(name)));
      chip.type = "button";
      chip.setAttribute("data-state", name);
      chip.setAttribute("data-filter-state", name);
      chip.title = "Show only " + stateWords(name) + " jobs";
      box.appendChild(chip);
    });
  }

  // ---- the throughput chart: inline SVG, drawn here ----
  var SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // A round axis maximum: four gridline steps of 1, 2, 2.5 or 5 times a
  // power of ten, so that every gridline's label is round too.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    var raw = v / 4, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p * 4;
  }
  // The steps of the run: each sample is the rate over the step that ends
  // at its time and starts at the sample before (the first: at the run's
  // start, or a step before it once the hour kept has moved on), as
  // [from, to, msg/s, bytes/s], up to the run's end (later steps are idle).
  function runSteps(samples, stepSeconds, start, end) {
    var steps = [];
    samples.forEach(function (sample, n) {
      var from = n ? samples[n - 1][0] : Math.max(start, sample[0] - stepSeconds);
      if (from >= end) return;
      steps.push([from, Math.min(sample[0], end), sample[1], sample[2]]);
    });
    return steps;
  }
  // The time the chart spans: the run, from its start (or its oldest step
  // kept, once the hour kept has moved on) to its end, or to now while it
  // runs; 1 s at least.
  function chartWindow(samples, stepSeconds, run, now) {
    var end = typeof run.finished_at === "number" ? run.finished_at : now;
    var start = typeof run.started_at === "number" ? run.started_at : end - 300;
    if (samples.length && samples[0][0] - 2 * stepSeconds > start) start = samples[0][0] - stepSeconds;
    return { start: start, end: end, span: Math.max(1, end - start) };
  }
  function renderChart(throughput, now, run) {
    var chart = $("throughput");
    var samples = throughput.samples || [];
    var width = Math.max(260, Math.round(chart.getBoundingClientRect().width || 600));
    var area = chartWindow(samples, throughput.step_seconds || 10, run || {}, now);
    var steps = runSteps(samples, throughput.step_seconds || 10, area.start, area.end);
    var key = width + ":" + area.start + ":" + area.end + ":" + JSON.stringify(steps.length ? [steps[0], steps[steps.length - 1], steps.length] : []);
    state.lastSamples = { throughput: throughput, now: now, run: run };
    if (chart.getAttribute("data-key") === key) return;
    chart.setAttribute("data-key", key);
    var height = 190, left = 44, right = 66, top = 22, bottom = 24;
    var plotW = width - left - right, plotH = height - top - bottom;
    chart.setAttribute("viewBox", "0 0 " + width + " " + height);
    chart.setAttribute("width", String(width));
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    var span = area.span, start = area.start;
    var peak = Math.max.apply(null, [0].concat(steps.map(function (x) { return x[2]; })));
    var maxMsg = niceMax(peak);
    var maxBytes = niceBytes(Math.max.apply(null, [0].concat(steps.map(function (x) { return x[3]; }))));
    // What the chart shows, for the browser test: its window and its peak.
    chart.setAttribute("data-start", String(start));
    chart.setAttribute("data-end", String(start + span));
    chart.setAttribute("data-peak", String(peak));
    function x(t) { return left + (t - start) / span * plotW; }
    function yMsg(v) { return top + plotH - v / maxMsg * plotH; }
    function yBytes(v) { return top + plotH - v / maxBytes * plotH; }
    for (var i = 0; i <= 4; i++) {
      var gy = top + plotH * i / 4;
      chart.appendChild(svg("line", { x1: left, x2: left + plotW, y1: gy, y2: gy, "class": "grid" }));
      chart.appendChild(svg("text", { x: left - 6, y: gy + 4, "class": "axis msg", "text-anchor": "end" },
        fmtAxis(maxMsg * (4 - i) / 4)));
      chart.appendChild(svg("text", { x: left + plotW + 6, y: gy + 4, "class": "axis bytes", "text-anchor": "start" },
        axisBytes(maxBytes * (4 - i) / 4, maxBytes)));
    }
    // Quarters, or halves on a narrow chart (a phone), so labels never overlap.
    var ticks = plotW < 360 ? 2 : 4;
    for (var q = 0; q <= ticks; q++) {
      var tx = x(start + span * q / ticks);
      chart.appendChild(svg("line", { x1: tx, x2: tx, y1: top + plotH, y2: top + plotH + 4, "class": "tick" }));
      chart.appendChild(svg("text", { x: tx, y: height - 6, "class": "axis", "text-anchor": q === 0 ? "start" : q === ticks ? "end" : "middle" },
        tickLabel(span * q / ticks, start, span)));
    }
    chart.appendChild(svg("text", { x: left, y: 11, "class": "axis msg unit", "text-anchor": "middle" }, "msg/s"));
    chart.appendChild(svg("text", { x: left + plotW, y: 11, "class": "axis bytes unit", "text-anchor": "middle" }, "per second"));
    if (steps.length) {
      // A step line: each step's rate held over its whole step.
      var msgPath = "", bytePath = "";
      steps.forEach(function (step, n) {
        var from = x(step[0]).toFixed(1), to = x(step[1]).toFixed(1);
        var ym = yMsg(step[2]).toFixed(1), yb = yBytes(step[3]).toFixed(1);
        msgPath += (n ? "L" : "M") + from + " " + ym + "L" + to + " " + ym;
        bytePath += (n ? "L" : "M") + from + " " + yb + "L" + to + " " + yb;
      });
      var firstX = x(steps[0][0]).toFixed(1), lastX = x(steps[steps.length - 1][1]).toFixed(1);
      var base = (top + plotH).toFixed(1);
      chart.appendChild(svg("path", { d: msgPath + "L" + lastX + " " + base + "L" + firstX + " " + base + "Z", "class": "area" }));
      chart.appendChild(svg("path", { d: msgPath, "class": "line msg" }));
      chart.appendChild(svg("path", { d: bytePath, "class": "line bytes" }));
    } else {
      chart.appendChild(svg("text", { x: left + plotW / 2, y: top + plotH / 2, "class": "axis", "text-anchor": "middle" }, "no samples yet"));
    }
    chart.appendChild(svg("line", { x1: left, x2: left, y1: top, y2: top + plotH, "class": "axisline" }));
    chart.appendChild(svg("line", { x1: left, x2: left + plotW, y1: top + plotH, y2: top + plotH, "class": "axisline" }));
    var last = steps[steps.length - 1];
    put($("throughput-summary"), steps.length ?
      "Solid: messages per second (left axis); dashed: bytes per second (right axis), over steps of up to " +
      duration(throughput.step_seconds || 10) + ". Last step: " + msgRate(last[2]) + ", " + mibRate(last[3]) +
      "; peak " + msgRate(peak) + "." :
      "No throughput samples yet.");
  }
  // A time axis label: the clock, or under a minute the seconds into the
  // chart (a run of a few seconds has no two distinct clock times).
  function tickLabel(offset, start, span) {
    if (span >= 60) return clock(start + offset, span < 1200);
    return (span < 10 ? offset.toFixed(1) : String(Math.round(offset))) + " s";
  }
  // A round axis maximum in binary units (1, 2 or 5 of a KiB, MiB, GiB...).
  function niceBytes(v) {
    var unit = 1;
    while (v >= 1024 * unit && unit < Math.pow(1024, 4)) unit *= 1024;
    return Math.max(1024, niceMax(v / unit) * unit);
  }
  function axisBytes(v, max) {
    var unit = 1, names = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (max >= 1024 * unit && i < names.length - 1) { unit *= 1024; i += 1; }
    return fmtAxis(v / unit) + " " + names[i];
  }
  function fmtAxis(v) { return v >= 10 || v === 0 ? String(Math.round(v)) : v.toFixed(v >= 1 ? 1 : 2); }

  // ---- the jobs table: only the page is in the DOM; rows updated in place ----
  var ACTIONS = [["pause", "Pause"], ["resume", "Resume"], ["retry-failed", "Retry failed"], ["cancel", "Cancel"]];
  function jobHash(name) { return "#job=" + encodeURIComponent(name); }
  function makeRow(name) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-job", name);
    var nameCell = el("th", "job-name");
    nameCell.scope = "row";
    var link = el("a", "job-link");
    putBreakable(link, name);
    link.href = jobHash(name);
    nameCell.appendChild(link);
    tr.appendChild(nameCell);
    var stateCell = el("td", "job-state-cell");
    stateCell.setAttribute("data-label", "State");
    stateCell.appendChild(el("span", "badge job-state"));
    tr.appendChild(stateCell);
    var daemonCell = el("td", "job-daemon");
    daemonCell.setAttribute("data-label", "Daemon");
    tr.appendChild(daemonCell);
    var barCell = el("td", "job-progress");
    barCell.setAttribute("data-label", "Progress");
    var bar = el("progress", "job-bar");
    bar.max = 100;
    bar.setAttribute("aria-label", "Progress of " + name);
    barCell.appendChild(bar);
    barCell.appendChild(el("span", "job-percent"));
    tr.appendChild(barCell);
    [["job-done", "Done", "n"], ["job-total", "Total", "n"], ["job-failed", "Failed", "n"],
      ["job-rate", "Rate", "n"], ["job-eta", "Time left", "n"], ["job-folder", "Folder", ""],
      ["job-error", "Error", ""]].forEach(function (c) {
      var td = el("td", c[0] + (c[2] ? " " + c[2] : ""));
      td.setAttribute("data-label", c[1]);
      tr.appendChild(td);
    });
    var actions = el("td", "job-actions");
    actions.setAttribute("data-label", "Actions");
    ACTIONS.forEach(function (a) {
      var b = el("button", "action", a[1]);
      b.type = "button";
      b.setAttribute("data-action", a[0]);
      b.setAttribute("data-job", name);
      b.setAttribute("aria-label", a[1] + " " + name);
      actions.appendChild(b);
    });
    tr.appendChild(actions);
    return tr;
  }
  function updateRow(tr, job) {
    var q = function (c) { return tr.querySelector("." + c); };
    var badge = q("job-state"), shown = shownState(job), wait = jobWait(job);
    put(badge, badgeWords(job) + (job.paused && job.state !== "paused" ? " (paused)" : ""), job.state);
    if (badge.getAttribute("data-state") !== shown) badge.setAttribute("data-state", shown);
    badge.title = wait ? waitText(job, wait) : "";
    setBar(q("job-bar"), job.counted ? job.percent : null);
    put(q("job-percent"), job.counted ? percent(job.percent) : "not yet counted", job.percent);
    put(q("job-done"), count(job.messages_done), job.messages_done);
    put(q("job-total"), job.counted && typeof job.messages_total === "number" ? count(job.messages_total) : "not yet counted",
      job.counted ? job.messages_total : "");
    put(q("job-failed"), count(job.messages_failed), job.messages_failed);
    q("job-failed").classList.toggle("has-failed", job.messages_failed > 0);
    put(q("job-rate"), msgRate(job.messages_per_second), job.messages_per_second);
    var etaText = typeof job.eta_seconds === "number" ? duration(job.eta_seconds) :
      shown === "done" ? "done" : wait && wait.kind !== "backing_off" && wait.kind !== "waiting" ?
      (wait.until ? "until " + untilText(wait.until, true) : "until resumed") : "–";
    put(q("job-eta"), etaText, job.eta_seconds);
    q("job-eta").title = typeof job.eta_seconds === "number" && state.now ?
      "done ≈ " + dateTime(state.now + job.eta_seconds, state.now) : "";
    putBreakable(q("job-folder"), job.current_folder || "–");
    putDaemon(q("job-daemon"), job.daemon);
    var err = job.error || "";
    if (!err && wait) err = waitText(job, wait);
    put(q("job-error"), err);
    q("job-error").classList.toggle("is-waiting", !job.error && !!err);
    q("job-error").setAttribute("data-label", !job.error && wait ? "Waiting" : "Error");
    if (wait) q("job-error").setAttribute("data-wait", wait.kind); else q("job-error").removeAttribute("data-wait");
    tr.classList.toggle("has-error", !!job.error);
    showActions(tr, job);
  }
  // Only the controls that apply to the job's state are shown (the server
  // refuses the others with 409 all the same).
  var ENDED_STATES = { done: true, done_with_failures: true, failed: true, cancelled: true, stopped: true };
  function showActions(tr, job) {
    var ended = ENDED_STATES[job.state] === true;
    var applies = {
      "pause": !ended && !job.paused,
      "resume": !!job.paused || job.state === "cancelled",
      "retry-failed": job.state !== "cancelled" && (job.messages_failed > 0 || job.state === "failed"),
      "cancel": !ended
    };
    tr.querySelectorAll("button[data-action]").forEach(function (b) {
      var show = applies[b.getAttribute("data-action")] === true;
      if (b.hidden === show) b.hidden = !show;
    });
  }
  function renderJobs(jobs, page) {
    renderRows(jobs);
    state.matched = page.matched || 0;
    var offset = page.offset || 0, limit = page.limit || 100;
    state.offset = offset;
    if (page.next !== undefined) {
      // A fleet's filtered page: the offset is a position in the fleet's
      // list, the next page starts at page.next; matched may be a lower bound.
      state.nextOffset = page.next;
      put($("jobs-page"), count(jobs.length) + " of " + (page.matched_exact === false ? "at least " : "") +
        count(state.matched));
      $("jobs-prev").disabled = !state.backOffsets.length;
      $("jobs-next").disabled = page.next === null;
      $("jobs-empty").hidden = jobs.length > 0;
      return;
    }
    if (!jobs.length && offset > 0 && state.matched > 0) {
      // The list shrank under this page: go to the last page that has jobs.
      state.offset = Math.floor((state.matched - 1) / limit) * limit;
      setTimeout(poll, 0);
    }
    state.nextOffset = null;
    put($("jobs-page"), state.matched ? count(offset + 1) + "-" + count(offset + jobs.length) + " of " + count(state.matched) : "0 of 0");
    $("jobs-prev").disabled = offset <= 0;
    $("jobs-next").disabled = offset + limit >= state.matched;
    $("jobs-empty").hidden = jobs.length > 0;
  }
  // ---- a fleet: the table pages every job of the fleet ----
  // A daemon of a fleet lists in /status.json the jobs it holds; unfiltered
  // and in the default order (or the configuration's), the table lists
  // instead the fleet's jobs from /fleet/jobs.json in the queue's order, a
  // keyset page at a time, each with the daemon holding it: the jobs this
  // daemon holds with their progress, the others with their state in the
  // fleet's queue. A filter, a search or another order asks /status.json,
  // which a fleet's daemon also answers from the fleet's database.
  var FLEET_STATES = { claimed: "running" };
  function fleetListed(s) {
    var sort = $("jobs-sort").value;
    return s.fleet_jobs !== undefined && !$("jobs-filter-state").value && !$("jobs-filter-q").value.trim() &&
      !$("jobs-filter-errors").checked && (!sort || sort === "order" || sort === "attention");
  }
  function fleetQuery() {
    var params = new URLSearchParams();
    if (state.fleet.after !== null) params.set("after", String(state.fleet.after));
    params.set("limit", $("jobs-limit").value);
    return "fleet/jobs.json?" + params.toString();
  }
  function fleetJob(row, mine) {
    var job = mine.get(row.name);
    if (job) return row.daemon ? Object.assign({}, job, { daemon: row.daemon }) : job;
    return { name: row.name, state: FLEET_STATES[row.state] || row.state, daemon: row.daemon, counted: false,
      percent: null, messages_done: null, messages_total: null, messages_failed: 0, messages_per_second: null,
      eta_seconds: null, current_folder: null, error: null, paused: row.state === "paused" };
  }
  function renderFleetJobs(page, own) {
    var mine = new Map(own.map(function (job) { return [job.name, job]; }));
    var jobs = (page.jobs || []).map(function (row) { return fleetJob(row, mine); });
    renderRows(jobs);
    var counts = page.counts || {};
    var total = Object.keys(counts).reduce(function (n, k) { return n + counts[k]; }, 0);
    var first = state.fleet.position;
    put($("jobs-page"), jobs.length ? count(first + 1) + "-" + count(first + jobs.length) + " of " + count(total) :
      "0 of " + count(total));
    state.fleet.next = page.after === undefined ? null : page.after;
    state.fleet.shown = jobs.length;
    $("jobs-prev").disabled = !state.fleet.back.length;
    $("jobs-next").disabled = state.fleet.next === null;
    $("jobs-empty").hidden = jobs.length > 0;
  }
  function fleetPage(forward) {
    var f = state.fleet;
    if (forward && f.next !== null) {
      f.back.push({ after: f.after, position: f.position });
      f.after = f.next;
      f.position += f.shown || 0;
    } else if (!forward && f.back.length) {
      var before = f.back.pop();
      f.after = before.after;
      f.position = before.position;
    }
    poll();
  }
  function renderRows(jobs) {
    var body = $("jobs-body");
    var seen = new Set();
    var previous = null;
    jobs.forEach(function (job) {
      var tr = state.rows.get(job.name);
      if (!tr) { tr = makeRow(job.name); state.rows.set(job.name, tr); }
      updateRow(tr, job);
      seen.add(job.name);
      // Move only what is out of place: a steady page touches no node.
      var expected = previous ? previous.nextSibling : body.firstChild;
      if (expected !== tr) body.insertBefore(tr, expected);
      previous = tr;
    });
    state.rows.forEach(function (tr, name) {
      if (!seen.has(name)) { tr.remove(); state.rows.delete(name); }
    });
  }

  // ---- the job detail panel ----
  function openDetail(name, opener) {
    // Failures page by key: `after` is where the shown page starts (the
    // server's `next` of the page before), `back` the pages before it, and
    // `position` the index of its first row, for the "1-50 of" text.
    state.detail = { name: name, after: null, back: [], position: 0, next: null, shown: 0, q: "", opener: opener || null };
    $("job-failures-q").value = "";
    var panel = $("job-detail");
    put($("job-detail-title"), name);
    var base = "jobs/" + encodeURIComponent(name);
    $("job-manifest-csv").href = base + "/manifest.csv";
    $("job-manifest-json").href = base + "/manifest.json";
    clearBody($("job-folders"));
    clearBody($("job-failures"));
    clearBody($("job-timeline"));
    panel.hidden = false;
    document.body.classList.add("detail-open");
    panel.focus();
    refreshDetail();
  }
  function closeDetail() {
    var detail = state.detail;
    state.detail = null;
    $("job-detail").hidden = true;
    document.body.classList.remove("detail-open");
    if (location.hash.indexOf("#job=") === 0) history.replaceState(null, "", location.pathname + location.search);
    if (detail && detail.opener && document.contains(detail.opener)) detail.opener.focus();
  }
  function clearBody(table) {
    var tbody = table.tBodies[0];
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    return tbody;
  }
  function refreshDetail() {
    var detail = state.detail;
    if (!detail) return Promise.resolve();
    var base = "jobs/" + encodeURIComponent(detail.name);
    var failures = base + "/failures.json?limit=" + FAILURES_LIMIT +
      (detail.after ? "&after=" + encodeURIComponent(detail.after) : "") +
      (detail.q ? "&q=" + encodeURIComponent(detail.q) : "");
    return Promise.all([getJSON(base + ".json"), getJSON(failures)]).then(function (answers) {
      if (state.detail !== detail) return;
      renderDetail(answers[0]);
      renderTimeline(answers[0], detail);
      renderFailures(answers[1], detail);
    }).catch(function (error) {
      if (state.detail !== detail) return;
      put($("job-detail-summary"), error.status === 404 ? "No such job: " + detail.name :
        "Could not load the job: " + error.message);
    });
  }
  function renderDetail(answer) {
    var job = answer.job || {};
    put($("job-detail-summary"), badgeWords(job) + " · " + count(job.messages_done) + " of " +
      (job.counted ? count(job.messages_total) : "(not yet counted)") +
      (job.counted && job.messages_total === 1 ? " message · " : " messages · ") +
      count(job.messages_failed) + " failed · " + count(job.messages_already_present) + " already present · " +
      bytes(job.bytes_done) + (job.counted ? " of " + bytes(job.bytes_total) : "") + " · " +
      counted(job.reconnects, "reconnect", "reconnects") +
      (job.daemon ? " · on " + daemonName(job.daemon) + (job.daemon.live === false ? " (lease ended)" : "") : ""));
    var err = $("job-detail-error");
    err.hidden = !job.error;
    put(err, job.error ? "Error: " + job.error : "");
    var wait = jobWait(job), waitLine = $("job-detail-wait");
    waitLine.hidden = !wait;
    put(waitLine, wait ? waitText(job, wait) : "");
    if (wait) waitLine.setAttribute("data-wait", wait.kind); else waitLine.removeAttribute("data-wait");
    var tbody = $("job-folders").tBodies[0];
    var rows = new Map();
    Array.prototype.forEach.call(tbody.rows, function (tr) { rows.set(tr.getAttribute("data-folder"), tr); });
    var previous = null;
    (answer.folders || []).forEach(function (f) {
      var tr = rows.get(f.folder);
      if (!tr) {
        tr = document.createElement("tr");
        tr.setAttribute("data-folder", f.folder);
        var th = el("th", "folder-name");
        th.scope = "row";
        tr.appendChild(th);
        [["folder-state", "State"], ["folder-progress", "Progress"], ["folder-done n", "Done"],
          ["folder-failed n", "Failed"], ["folder-size n", "Size"]].forEach(function (c) {
          var td = el("td", c[0]);
          td.setAttribute("data-label", c[1]);
          tr.appendChild(td);
        });
        var bar = el("progress", "folder-bar");
        bar.max = 100;
        bar.setAttribute("aria-label", "Progress of folder " + f.folder);
        tr.querySelector(".folder-progress").appendChild(bar);
      }
      rows.delete(f.folder);
      put(tr.querySelector(".folder-name"), f.folder + (f.mailbox && f.mailbox !== f.folder ? " → " + f.mailbox : ""));
      put(tr.querySelector(".folder-state"), f.state, f.state);
      var pct = f.messages_total ? (f.messages_done + f.messages_failed) / f.messages_total * 100 : (f.state === "done" ? 100 : 0);
      setBar(tr.querySelector(".folder-bar"), pct);
      put(tr.querySelector(".folder-done"), count(f.messages_done) + " / " + count(f.messages_total), f.messages_done);
      put(tr.querySelector(".folder-failed"), count(f.messages_failed), f.messages_failed);
      put(tr.querySelector(".folder-size"), bytes(f.bytes_done) + " / " + bytes(f.bytes_total), f.bytes_done);
      var expected = previous ? previous.nextSibling : tbody.firstChild;
      if (expected !== tr) tbody.insertBefore(tr, expected);
      previous = tr;
    });
    rows.forEach(function (tr) { tr.remove(); });
    var excluded = answer.excluded_folders || [];
    $("job-excluded").hidden = !excluded.length;
    put($("job-excluded"), "Excluded folders: " + excluded.join(", "));
  }
  // The job's timeline, oldest first: each change of state with when, how
  // long the job stayed in the state it entered, why and who asked. A long
  // one shows its first and latest changes, and "Show all".
  var TIMELINE_SHOWN = 10, TIMELINE_FIRST = 2;
  // The store keeps a job's first 20 and latest 480 changes: in a timeline
  // that long, those between the 20th and the 21st were dropped.
  var KEPT_FIRST = 20, KEPT = 500;
  function endedState(s) { return ENDED_STATES[s] === true || s === "done_with_failures"; }
  function renderTimeline(answer, detail) {
    var items = answer.timeline || [];
    var last = items[items.length - 1];
    var key = items.length + ":" + (last ? last.time : "") + ":" + !!detail.timelineAll;
    var table = $("job-timeline");
    if (detail.timelineKey !== key) {
      detail.timelineKey = key;
      buildTimeline(clearBody(table), items, detail, answer.time);
    }
    // The state the job is in: how long so far, moving on with each poll.
    var current = table.querySelector("tr.timeline-current .timeline-for");
    if (current && last && typeof answer.time === "number") {
      var so = Math.max(0, answer.time - last.time);
      put(current, duration(so) + " so far", so);
    }
  }
  function buildTimeline(tbody, items, detail, now) {
    if (!items.length) {
      var none = document.createElement("tr");
      var td = el("td", "muted", "No change of state recorded.");
      td.colSpan = 5;
      none.appendChild(td);
      tbody.appendChild(none);
      return;
    }
    var compact = items.length > TIMELINE_SHOWN && !detail.timelineAll;
    var hideFrom = compact ? TIMELINE_FIRST : items.length;
    var hideTo = compact ? items.length - (TIMELINE_SHOWN - TIMELINE_FIRST) : items.length;
    var dropped = items.length >= KEPT ? KEPT_FIRST - 1 : -1;
    items.forEach(function (t, n) {
      if (n >= hideFrom && n < hideTo) {
        if (n === hideFrom) tbody.appendChild(timelineMore(hideTo - hideFrom, detail));
        return;
      }
      var next = items[n + 1];
      // Not a chain: the changes between were dropped (past the bound), or
      // never recorded (a daemon killed): no duration, a note instead.
      var broken = !!next && (n === dropped || next.from !== t.to);
      tbody.appendChild(timelineRow(t, next, broken, now));
      if (broken && !(n + 1 >= hideFrom && n + 1 < hideTo)) {
        tbody.appendChild(timelineNote("timeline-gap", n === dropped ?
          "⋯ changes between these not kept (a job's first 20 and latest 480 are)" :
          "⋯ changes between these not recorded"));
      }
    });
  }
  function timelineRow(t, next, broken, now) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-from", t.from);
    tr.setAttribute("data-to", t.to);
    tr.setAttribute("data-time", String(t.time));
    // The day (when not today) and the time, each kept whole.
    var when = el("td", "timeline-when");
    putTime(when, t.time, "");
    dateTime(t.time, now).split(" ").forEach(function (part, n) {
      if (n) when.firstChild.appendChild(document.createTextNode(" "));
      when.firstChild.appendChild(el("span", "part", part));
    });
    var change = el("td", "timeline-change", stateWords(t.from) + " → ");
    var badge = el("span", "badge", stateWords(t.to));
    badge.setAttribute("data-state", t.to);
    change.appendChild(badge);
    // How long the job stayed in the state it entered: until the next
    // change, or, for the state it is in, so far (filled in each poll).
    var lasted = next && !broken ? next.time - t.time : null;
    var stay = el("td", "timeline-for n", lasted === null ? "–" : duration(lasted));
    stay.setAttribute("data-value", dataValue(lasted));
    if (!next && !endedState(t.to)) tr.classList.add("timeline-current");
    [[when, "When"], [change, "Change"], [stay, "For"], [el("td", "timeline-cause", t.cause), "Cause"],
      [el("td", t.by ? "timeline-by" : "timeline-by nobody", t.by || "–"), "By"]].forEach(function (c) {
      c[0].setAttribute("data-label", c[1]);
      tr.appendChild(c[0]);
    });
    return tr;
  }
  function timelineNote(className, text) {
    var tr = el("tr", className);
    var td = el("td", "muted small", text);
    td.colSpan = 5;
    tr.appendChild(td);
    return tr;
  }
  function timelineMore(hidden, detail) {
    var tr = timelineNote("timeline-more", "⋯ " + counted(hidden, "more change", "more changes") + " ");
    var all = el("button", "", "Show all");
    all.type = "button";
    all.id = "job-timeline-all";
    all.addEventListener("click", function () {
      detail.timelineAll = true;
      refreshDetail();
    });
    tr.firstChild.appendChild(all);
    return tr;
  }
  function renderFailures(page, detail) {
    var tbody = clearBody($("job-failures"));
    (page.items || []).forEach(function (item) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-key", item.key);
      [["failure-folder", "Folder", item.folder], ["failure-key", "Key", item.key],
        ["failure-size n", "Size", bytes(item.size)], ["failure-message-id", "Message-ID", item.message_id || "–"],
        ["failure-reason", "Reason", item.reason]].forEach(function (c) {
        var td = el("td", c[0], c[2]);
        td.setAttribute("data-label", c[1]);
        tr.appendChild(td);
      });
      // Who and what the message is, for its owner: From, Subject, Date.
      var named = [item.from, item.subject, item.date].filter(Boolean).join(" \u00b7 ");
      if (named) tr.querySelector(".failure-message-id").appendChild(el("div", "failure-names muted", named));
      tbody.appendChild(tr);
    });
    if (!page.items || !page.items.length) {
      var empty = document.createElement("tr");
      // matched_exact false: the server counted or searched only the first
      // failed messages (it bounds the work of one request); the manifest has all.
      var td = el("td", "muted", !page.q ? "No failed messages." : page.next ?
        "No match in this part of the failed messages; Next searches on." :
        "No failed message matches.");
      td.colSpan = 5;
      empty.appendChild(td);
      tbody.appendChild(empty);
    }
    // matched_exact false: the server counted (or searched) only the first
    // failed messages, bounding the work of one request.
    var position = detail.position, n = (page.items || []).length, matched = page.matched || 0;
    var of = page.matched_exact === false ? (page.q ? "at least " : "more than ") + count(matched) : count(matched);
    put($("job-failures-page"), n ? count(position + 1) + "-" + count(position + n) + " of " + of : "0 of " + of);
    detail.next = page.next || null;
    detail.shown = n;
    $("job-failures-prev").disabled = !detail.back.length;
    $("job-failures-next").disabled = !detail.next;
  }
  function openFromHash() {
    if (location.hash.indexOf("#job=") !== 0) return;
    var name;
    try { name = decodeURIComponent(location.hash.slice(5)); } catch (e) { return; }
    if (!state.detail || state.detail.name !== name) openDetail(name, null);
  }

  // ---- controls ----
  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; } }
  function showTokenState() {
    put($("token-state"), token() ? "Token saved for this tab." : "No token: read-only.");
  }
  function report(outcome, text) {
    var box = $("control-status");
    box.setAttribute("data-outcome", outcome);
    box.textContent = text;
  }
  // POST a control (with the token, as JSON: the server's defences against
  // cross-site requests); resolves with the answer's status and body.
  function send(path, body) {
    var headers = { "Content-Type": "application/json", Accept: "application/json" };
    var t = token();
    if (t) headers.Authorization = "Bearer " + t;
    return fetch(path, { method: "POST", headers: headers, body: JSON.stringify(body || {}), cache: "no-store",
      credentials: "same-origin" }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (answer) {
        return { status: response.status, ok: response.ok, body: answer, statusText: response.statusText };
      });
    });
  }
  // Report an answer that is not a success; true if it was one.
  function reportAnswer(answer, what) {
    if (answer.ok) return true;
    var body = answer.body;
    if (answer.status >= 400 && answer.status < 500) {
      report("refused", what + ": refused (" + answer.status + "): " + (body.error || answer.statusText));
    } else {
      report("error", what + ": server error " + answer.status + (body.error ? ": " + body.error : ""));
    }
    return false;
  }
  function networkError(what) {
    return function (error) { report("error", what + ": " + (error.message || "network error")); };
  }
  function control(path, what, body, done) {
    report("pending", what + "…");
    return send(path, body).then(function (answer) {
      if (!reportAnswer(answer, what)) return;
      report("ok", done ? done(answer.body) :
        what + ": done" + (answer.body.state ? " (now " + stateWords(answer.body.state) + ")" : "") + ".");
      poll();
    }).catch(networkError(what));
  }
  // ---- bulk controls: the jobs the table's filter selects ----
  var BULK_VERBS = { "pause": "Pause", "resume": "Resume", "retry-failed": "Retry what failed of", "cancel": "Cancel" };
  function bulkFilter() {
    var states = $("jobs-filter-state").value;
    return { state: states ? states.split(",") : [], q: $("jobs-filter-q").value.trim(),
      errors: $("jobs-filter-errors").checked };
  }
  function filterWords(filter) {
    var words = [];
    if (filter.state.length) words.push("in state " + filter.state.map(stateWords).join(" or "));
    if (filter.q) words.push("whose name contains “" + filter.q + "”");
    if (filter.errors) words.push("with errors");
    return words.length ? words.join(", ") : "(all jobs)";
  }
  // A preview first: how many of the jobs the filter selects the control
  // applies to; the confirmation carries that count and the selection's
  // digest, and the server refuses if the jobs changed meanwhile.
  function bulkAction(action) {
    var filter = bulkFilter(), what = "Bulk " + action.replace("-", " ") + " of the jobs " + filterWords(filter);
    report("pending", what + "…");
    send("control/bulk/" + action + "/preview", filter).then(function (answer) {
      if (!reportAnswer(answer, what)) return;
      var preview = answer.body;
      if (!preview.jobs) {
        report("refused", what + ": applies to none of the " + counted(preview.matched, "job", "jobs") + " selected.");
        return;
      }
      var question = BULK_VERBS[action] + " " + counted(preview.jobs, "job", "jobs") + " (of the " +
        counted(preview.matched, "job", "jobs") + " " + filterWords(filter) + ")?";
      if (!window.confirm(question)) {
        report("", what + ": not sent.");
        return;
      }
      var confirmed = { state: filter.state, q: filter.q, errors: filter.errors, count: preview.jobs,
        selection: preview.selection };
      return control("control/bulk/" + action, what, confirmed, function (body) {
        return what + ": done, " + counted(body.jobs, "job", "jobs") + " of " + count(body.selected) + " changed.";
      });
    }).catch(networkError(what));
  }
  function jobAction(action, name) {
    if (action === "cancel" && !window.confirm("Cancel job " + name + "? It stops and is not resumed.")) {
      report("", "Cancel of " + name + " not sent.");
      return;
    }
    control("control/jobs/" + encodeURIComponent(name) + "/" + action, action.replace("-", " ") + " " + name);
  }

  // ---- wiring ----
  var debounce = null, failuresDebounce = null;
  function refilter() {
    state.offset = 0;
    state.nextOffset = null;
    state.backOffsets = [];
    state.fleet = { on: state.fleet.on, after: null, back: [], position: 0, next: null };
    showSort();
    poll();
  }
  // Column headers sort too: first click ascending (name, state) or the most
  // telling end first (progress, failed, rate, time left), second click reverses.
  var DESCENDING_FIRST = { progress: true, failed: true, rate: true, eta: true };
  function sortBy(key) {
    var current = $("jobs-sort").value;
    var first = DESCENDING_FIRST[key] ? "-" + key : key;
    var second = DESCENDING_FIRST[key] ? key : "-" + key;
    $("jobs-sort").value = current === first ? second : first;
    saveSort();
    refilter();
  }
  function showSort() {
    var current = $("jobs-sort").value;
    Array.prototype.forEach.call(document.querySelectorAll("#jobs th[data-sort]"), function (th) {
      var key = th.getAttribute("data-sort");
      if (current === key) th.setAttribute("aria-sort", "ascending");
      else if (current === "-" + key) th.setAttribute("aria-sort", "descending");
      else th.removeAttribute("aria-sort");
    });
  }
  function restoreSort() {
    var saved = null;
    try { saved = localStorage.getItem(SORT_KEY); } catch (e) { /* storage disabled */ }
    var select = $("jobs-sort");
    if (saved && Array.prototype.some.call(select.options, function (o) { return o.value === saved; })) select.value = saved;
  }
  function saveSort() {
    try { localStorage.setItem(SORT_KEY, $("jobs-sort").value); } catch (e) { /* storage disabled */ }
  }
  function init() {
    restoreSort();
    showSort();
    $("jobs-filter-state").addEventListener("change", refilter);
    $("jobs-sort").addEventListener("change", function () { saveSort(); refilter(); });
    $("jobs-limit").addEventListener("change", refilter);
    $("jobs-filter-errors").addEventListener("change", refilter);
    $("jobs-filter-q").addEventListener("input", function () {
      clearTimeout(debounce);
      debounce = setTimeout(refilter, 300);
    });
    $("jobs-filters").addEventListener("submit", function (e) { e.preventDefault(); refilter(); });
    $("jobs-prev").addEventListener("click", function () {
      if (state.fleet.on) return fleetPage(false);
      if (state.backOffsets.length) { state.offset = state.backOffsets.pop(); return poll(); }
      state.offset = Math.max(0, state.offset - Number($("jobs-limit").value)); poll();
    });
    $("jobs-next").addEventListener("click", function () {
      if (state.fleet.on) return fleetPage(true);
      if (state.nextOffset !== null) {
        state.backOffsets.push(state.offset); state.offset = state.nextOffset; return poll();
      }
      state.offset += Number($("jobs-limit").value); poll();
    });
    $("state-counts").addEventListener("click", function (e) {
      var chip = e.target.closest("[data-filter-state]");
      if (!chip) return;
      $("jobs-filter-state").value = chip.getAttribute("data-filter-state");
      refilter();
      $("jobs-section").scrollIntoView();
    });
    $("jobs").addEventListener("click", function (e) {
      var sorter = e.target.closest("th[data-sort]");
      if (sorter) { sortBy(sorter.getAttribute("data-sort")); return; }
      var button = e.target.closest("button[data-action]");
      if (button) { jobAction(button.getAttribute("data-action"), button.getAttribute("data-job")); return; }
      var link = e.target.closest("a.job-link");
      if (link) {
        e.preventDefault();
        var name = link.closest("tr").getAttribute("data-job");
        history.replaceState(null, "", jobHash(name));
        openDetail(name, link);
      }
    });
    $("job-detail-close").addEventListener("click", closeDetail);
    document.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && state.detail) closeDetail();
    });
    window.addEventListener("hashchange", openFromHash);
    $("job-failures-q").addEventListener("input", function () {
      clearTimeout(failuresDebounce);
      failuresDebounce = setTimeout(function () {
        if (!state.detail) return;
        state.detail.q = $("job-failures-q").value.trim();
        state.detail.after = null; state.detail.back = []; state.detail.position = 0;
        refreshDetail();
      }, 300);
    });
    $("job-failures-prev").addEventListener("click", function () {
      var detail = state.detail;
      if (!detail || !detail.back.length) return;
      var previous = detail.back.pop();
      detail.after = previous.after; detail.position = previous.position; refreshDetail();
    });
    $("job-failures-next").addEventListener("click", function () {
      var detail = state.detail;
      if (!detail || !detail.next) return;
      detail.back.push({ after: detail.after, position: detail.position });
      detail.after = detail.next; detail.position += detail.shown; refreshDetail();
    });
    $("token-form").addEventListener("submit", function (e) {
      e.preventDefault();
      var value = $("token").value.trim();
      try { if (value) sessionStorage.setItem(TOKEN_KEY, value); } catch (err) { /* storage disabled */ }
      $("token").value = "";
      showTokenState();
    });
    $("token-clear").addEventListener("click", function () {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (err) { /* storage disabled */ }
      $("token").value = "";
      showTokenState();
    });
    $("pause-all").addEventListener("click", function () { control("control/pause-all", "Pause all"); });
    $("bulk").addEventListener("click", function (e) {
      var button = e.target.closest("button[data-bulk]");
      if (button) bulkAction(button.getAttribute("data-bulk"));
    });
    $("resume-all").addEventListener("click", function () { control("control/resume-all", "Resume all"); });
    var resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        if (state.lastSamples) renderChart(state.lastSamples.throughput, state.lastSamples.now, state.lastSamples.run);
      }, 150);
    });
    showTokenState();
    openFromHash();
    poll();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
}());
