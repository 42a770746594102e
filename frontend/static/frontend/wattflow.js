/* Wattflow pages: Plotly drawing, the live dashboard, the job prediction and the budget
 * what-if. Figures are built on the server (frontend/figures.py); this file only draws them,
 * keeps the websocket, and asks the server again when something changed. */
(function () {
  "use strict";
  const PLOT_CONFIG = { responsive: true, displaylogo: false };
  const REFRESH_MIN_MS = 3000; // at most one dashboard re-fetch per 3 s, however busy

  function plot(id, figure) {
    const el = document.getElementById(id);
    if (!el || !window.Plotly) return;
    Plotly.react(el, figure.data, figure.layout, PLOT_CONFIG);
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function fmt(value, digits) {
    return value === null || value === undefined ? "—" : Number(value).toFixed(digits);
  }

  function duration(seconds) {
    const s = Math.round(seconds);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return h + " h " + String(m).padStart(2, "0") + " min";
    if (m) return m + " min " + String(r).padStart(2, "0") + " s";
    return r + " s";
  }

  function text(id, value) {
    const el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  // --- the dashboard ------------------------------------------------------------------------
  function dashboard(opts) {
    const status = document.getElementById("live-status");
    let socket = null;
    let lastFetch = 0;
    let pendingFetch = null;
    const rounds = {}; // round_id -> decisions, merged from the groups a user is in

    function setStatus(state, label) {
      status.dataset.state = state;
      status.textContent = label;
    }

    function drawAll(figs, budgetFigs) {
      plot("fig-power", figs.power);
      plot("fig-heatmap", figs.heatmap);
      plot("fig-jct", figs.jct);
      plot("fig-queue", figs.queue);
      if (figs.grid) plot("fig-grid", figs.grid);
      Object.keys(budgetFigs || {}).forEach((id) => plot(id, budgetFigs[id]));
    }

    // Spent budgets (a lead's teams, an admin's all): redrawn with every data fetch, so an
    // alert a round raises appears with that round's push.
    function showAlerts(alerts) {
      const box = document.getElementById("budget-alerts");
      const list = document.getElementById("budget-alert-list");
      if (!box || !list || !alerts) return;
      list.replaceChildren();
      alerts.forEach((a) => {
        const li = document.createElement("li");
        li.dataset.alert = a.id;
        li.dataset.action = a.action;
        const strong = document.createElement("strong");
        strong.textContent = a.team;
        li.appendChild(strong);
        li.appendChild(document.createTextNode(
          ": " + a.found + " at " + a.at_utc + " UTC (" + a.spent + "). " + a.consequence));
        list.appendChild(li);
      });
      box.hidden = alerts.length === 0;
    }

    function apply(data) {
      drawAll(data.figures, data.budget_figures);
      showAlerts(data.alerts);
      if (data.latest_round) showRound(data.latest_round);
      text("kpi-power", fmt(data.cluster_power_w, 0));
      text("kpi-queue", data.queue_now);
      text("kpi-running", data.running_now);
      if (data.grid_now) text("kpi-grid", fmt(data.grid_now.ci_g_per_kwh, 0));
      text("kpi-at", data.at.slice(0, 19).replace("T", " "));
    }

    function refresh() {
      // Throttled: many telemetry pushes in a burst cost one request.
      const wait = lastFetch + REFRESH_MIN_MS - Date.now();
      if (wait > 0) {
        if (!pendingFetch) pendingFetch = setTimeout(() => { pendingFetch = null; refresh(); }, wait);
        return;
      }
      lastFetch = Date.now();
      fetch(opts.dataUrl, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
        .then(apply)
        .catch(() => setStatus("offline", "offline: retrying"));
    }

    let shownRound = -1;

    const labels = opts.labels || { actions: {}, waits: {} };
    function waitLabel(code) {
      if (!code) return "";
      return labels.waits[code] || code.replace(/_/g, " ");
    }

    function showRound(payload) {
      // A resync may bring a round older than one already pushed: keep the newest.
      if (payload.round_id < shownRound) return;
      shownRound = payload.round_id;
      // One row per job: the page's own summary (with placements) replaces a pushed one.
      const decisions = (rounds[payload.round_id] = rounds[payload.round_id] || {});
      (payload.decisions || []).forEach((d) => {
        const key = d.job_id + ":" + (d.action === "wait" || d.action === "keep" ? "why" : d.action);
        decisions[key] = d;
      });
      const when = (payload.at || "").slice(0, 19).replace("T", " ");
      const running = payload.running === undefined ? "?" : payload.running;
      text("round-head", "Round " + payload.round_id + " at " + when + " UTC, policy " +
        (payload.policy || "?") + ": the cluster has " + (payload.queue_length === undefined ? "?" : payload.queue_length) +
        " queued, " + running + " running");
      const table = document.getElementById("round-table");
      const body = table.querySelector("tbody");
      body.replaceChildren();
      Object.values(decisions).forEach((d) => {
        const tr = document.createElement("tr");
        tr.dataset.action = d.action;
        const name = d.job_name || "";
        const gpus = d.gpus ? d.gpus + " GPU" + (d.gpus > 1 ? "s" : "") : "";
        const where = d.placement ? gpus + " · " + d.placement : gpus;
        const clock = d.sm_clock_mhz ? d.sm_clock_mhz + " MHz" : (d.action === "wait" || d.action === "keep" ? "" : "default");
        let why = (d.reason || "").replace(/^(Waiting|Waits)\s*[:-]\s*/, "");
        why = why.charAt(0).toUpperCase() + why.slice(1);
        if (d.action === "keep") why = "its hard-limit action is \"start no new jobs\", so running jobs finish and nothing new starts.";
        const cells = [null, labels.actions[d.action] || d.action, where || "—", d.batch_size ?? "", clock, null];
        cells.forEach((v, i) => {
          const td = document.createElement("td");
          if (i === 0) {
            const a = document.createElement("a");
            a.href = "/jobs/" + d.job_id + "/";
            a.className = "trunc";
            a.title = name;
            a.textContent = name ? name + " #" + d.job_id : "#" + d.job_id;
            td.appendChild(a);
          } else if (i === 5) {
            const label = waitLabel(d.reason_code);
            if (label) {
              const strong = document.createElement("strong");
              strong.textContent = label + (why ? ": " : "");
              td.appendChild(strong);
            }
            td.appendChild(document.createTextNode(why));
          } else {
            td.textContent = v;
          }
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
      table.hidden = Object.keys(decisions).length === 0;
      // The round's counts are the cluster's (payload.scope); the KPI cards are the user's
      // own jobs and follow from the data fetch a round push triggers.
    }

    function connect() {
      if (socket) return;
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + location.host + opts.wsPath);
      setStatus("connecting", "connecting…");
      socket.onopen = () => setStatus("live", "live");
      socket.onmessage = (event) => {
        const msg = JSON.parse(event.data);
        if (msg.type === "round") { showRound(msg.payload); refresh(); }
        // Accounting changed a visible budget's usage: redraw the budget figures and numbers.
        if (msg.type === "budget") refresh();
        // Access changed (team joined or left): what the page shows may have changed too.
        if (msg.type === "groups") refresh();
        if (msg.type === "telemetry") {
          // Redraw from the figures the server built for this push; no request needed.
          text("kpi-power", fmt(msg.payload.cluster_power_w, 0));
          text("kpi-at", msg.payload.at.slice(0, 19).replace("T", " "));
          plot("fig-power", msg.figures.power);
          plot("fig-heatmap", msg.figures.heatmap);
        }
      };
      socket.onclose = () => {
        socket = null;
        if (document.hidden) return;
        setStatus("offline", "offline: reconnecting");
        setTimeout(() => { if (!document.hidden) connect(); }, 5000);
      };
    }

    // Page Visibility: a hidden tab closes its socket (no pushes, no redraws); coming back
    // re-fetches everything (what it missed) and reconnects.
    document.addEventListener("visibilitychange", () => {
      if (document.hidden) {
        if (socket) { const s = socket; socket = null; s.onclose = null; s.close(); }
        setStatus("paused", "paused (tab hidden)");
      } else {
        lastFetch = 0;
        refresh();
        connect();
      }
    });

    drawAll(opts.figures, opts.budgetFigures);
    if (opts.latestRound) showRound(opts.latestRound);
    if (!document.hidden) connect(); else setStatus("paused", "paused (tab hidden)");
    window.WattflowDashboard = { refresh, showRound }; // for debugging in the console
  }

  // --- job submission: live prediction --------------------------------------------------------
  function jobForm() {
    const form = document.getElementById("job-form");
    const box = document.getElementById("prediction");
    const list = box.querySelector("dl");
    const note = document.getElementById("prediction-note");
    let timer = null;

    function update() {
      const fd = new FormData(form);
      const params = new URLSearchParams();
      ["team", "workload", "resembles", "param_count", "gpus", "max_gpus", "batch_size", "iterations"].forEach((k) => params.set(k, fd.get(k) || ""));
      if (!fd.get("gpus") || !fd.get("batch_size") || !fd.get("iterations")) return;
      fetch(box.dataset.url + "?" + params, { credentials: "same-origin" })
        .then((r) => r.json().then((body) => ({ ok: r.ok, body })))
        .then(({ ok, body }) => {
          if (!ok) {
            list.hidden = true;
            note.textContent = Object.entries(body.errors || {})
              .map(([k, v]) => k + ": " + v.join(" ")).join("; ");
            return;
          }
          note.textContent = "For " + body.iterations + " iterations of " + body.workload + ":";
          text("pred-gpu", body.gpus + " × " + body.gpu_model);
          text("pred-duration", duration(body.duration_s));
          text("pred-energy", fmt(body.energy_kwh, 3) + " kWh");
          text("pred-carbon", fmt(body.co2_g / 1000, 3) + " kg CO2e");
          text("pred-power", fmt(body.power_w, 0) + " W");
          text("pred-ci", fmt(body.ci_g_per_kwh, 0) + " g/kWh" + (body.ci_estimated ? " (estimated)" : ""));
          // "estimated": a prior from another workload or GPU model, not yet learned.
          const kinds = { catalog: "measured (catalog)", learned: "learned from earlier jobs", estimated: "estimated" };
          text("pred-model", (kinds[body.model_kind] || body.model_kind) + " — " + body.model_source);
          list.hidden = false;
        });
    }

    form.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(update, 250); });
    update();
  }

  // --- job page: follows the job while it is not finished ----------------------------------------
  // Polls the job's REST resource while the tab is shown: progress is updated in place; a new
  // state, wait reason (its code) or allocation reloads the page (its tables and figures are drawn
  // on the server). The page names state and allocation; the wait code (never printed on a
  // page: words are) is taken from the first answer, asked at once. A finished job's page
  // does not poll.
  function jobPage(opts) {
    const everyMs = opts.everyMs || 5000;
    let code = null;
    function check() {
      if (document.hidden) return;
      fetch(opts.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => (r.ok ? r.json() : null))
        .then((job) => {
          if (!job) return;
          const seen = [job.state, job.current_allocation ? job.current_allocation.id : ""].join("|");
          if (code === null) code = job.pending_reason_code;
          if (seen !== opts.seen || code !== job.pending_reason_code) { location.reload(); return; }
          const done = job.completed_iterations;
          text("job-iterations", fmt(done, 0));
          text("job-progress", Math.min(100, (100 * done) / opts.total).toFixed(1));
        })
        .catch(() => {});
    }
    check();
    setInterval(check, everyMs);
  }

  // --- budget what-if -------------------------------------------------------------------------
  function whatIf() {
    const box = document.getElementById("whatif");
    const form = document.getElementById("budget-form");
    const allFactors = JSON.parse(box.dataset.factors);
    const floors = JSON.parse(box.dataset.floors);
    const ceilings = JSON.parse(box.dataset.ceilings);
    const progress = document.getElementById("whatif-progress");
    const statusEl = document.getElementById("whatif-status");
    const button = document.getElementById("whatif-run");

    async function run() {
      const fd = new FormData(form);
      const kind = document.getElementById("whatif-kind").value;
      const proposed = parseFloat(fd.get(kind === "energy" ? "energy_limit_kwh" : "carbon_limit_kg"));
      if (!(proposed > 0)) {
        statusEl.textContent = "Enter a positive " + kind + " limit first.";
        return;
      }
      // Points under the smallest or over the largest limit a budget may have are left out
      // (the server refuses them, and the first refusal ended the sweep); the proposed one
      // always runs, so a proposal outside them gets the server's message.
      const factors = allFactors.filter(
        (f) => f === 1 || (proposed * f >= floors[kind] && proposed * f <= ceilings[kind]));
      button.disabled = true;
      progress.hidden = false;
      progress.max = factors.length;
      progress.value = 0;
      let done = [];
      let never = [];
      let unfinished = [];
      let note = "";
      for (let i = 0; i < factors.length; i++) {
        statusEl.textContent = "Simulating " + (i + 1) + " of " + factors.length + "…";
        const body = new URLSearchParams({
          team: fd.get("team"), kind: kind, limit: String(proposed * factors[i]),
          period_start: fd.get("period_start"), period_end: fd.get("period_end"),
          proposed: String(proposed), done: JSON.stringify(done),
        });
        const r = await fetch(box.dataset.url, {
          method: "POST", credentials: "same-origin", body: body,
          headers: { "X-CSRFToken": csrfToken() },
        });
        const answer = await r.json();
        if (!r.ok) {
          statusEl.textContent = Object.entries(answer.errors || {})
            .map(([k, v]) => k + ": " + v.join(" ")).join("; ");
          button.disabled = false;
          return;
        }
        done = answer.points;
        never = answer.never_run || [];
        note = answer.note ? " " + answer.note : "";
        if ((answer.unfinished || []).length) unfinished = answer.unfinished;
        progress.value = i + 1;
        plot("fig-whatif", answer.figure);
        const nothing = answer.n_jobs === 0
          ? "The team has no queued or running jobs: nothing to replay."
          : answer.schedulable_gpus === 0
            ? "No GPU can take work now (nodes draining, unhealthy or silent): nothing can run."
            : "";
        if (nothing) {
          statusEl.textContent = nothing;
          button.disabled = false;
          return;
        }
      }
      const left = never.length
        ? " Left out, as they can never run here: " +
          never.map((n) => n.job + " (" + n.reason + ")").join("; ") + "."
        : "";
      // No budget tried let every job finish: say which jobs did not (a blank plot said nothing).
      const blank = done.length && done.every((p) => p[1] === null) && unfinished.length
        ? " No budget tried lets every job finish within 30 days; still running then: " +
          unfinished.join(", ") + "."
        : "";
      statusEl.textContent = "Done: " + done.length + " budgets simulated; each point is the best " +
        "predicted at or under its budget. A gap means not every job finishes within 30 days." +
        note + blank + left;
      button.disabled = false;
    }

    button.addEventListener("click", run);
  }

  // --- confirmations: a form with data-confirm asks before it submits ---------------------------
  function confirmForms() {
    document.querySelectorAll("form[data-confirm]").forEach((form) => {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  }

  window.Wattflow = { plot, dashboard, jobForm, jobPage, whatIf, confirmForms };
})();
