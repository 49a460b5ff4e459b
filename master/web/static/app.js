// tcluster dashboard: a small hash-routed page over /api/v1/, redrawn every 2 s.
// Charts are uPlot (vendored). Each chart's container carries data-points (points drawn)
// and data-ooms (OOM markers) so tests and curious users can read what is shown.
"use strict";

const REFRESH_MS = 2000;
const COLORS = ["#2c6fbb", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                "#ccb974", "#64b5cd"];
const main = document.getElementById("main");
const charts = {};          // key -> uPlot, reused across refreshes
const oomsByKey = {};       // key -> OOM kill times: drawn as markers, and the time axis reaches them
let page = { key: "", refresh: null, stop: null };

const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const bytes = b => { if (b == null) return "-"; const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; } return (i ? b.toFixed(1) : b.toFixed(0)) + " " + u[i]; };
const cores = c => c == null ? "-" : Math.abs(c) >= 0.1 || c === 0 ? (+c).toFixed(2) : (+c).toPrecision(2);
const count = v => Number.isInteger(v) ? String(v) : v.toFixed(1);
const pct = x => (100 * (x || 0)).toFixed(1) + "%";
const when = s => s ? new Date(s).toLocaleString() : "-";
const rangeS = () => +document.getElementById("range").value;

async function api(path, params) {
  const url = new URL("/api/v1/" + path, location.origin);
  Object.entries(params || {}).forEach(([k, v]) => v !== "" && v != null && url.searchParams.set(k, v));
  const r = await fetch(url);
  if (!r.ok) {
    const message = (await r.json().catch(() => ({}))).error || r.statusText;
    if (r.status === 401) showLogin(message);
    throw new Error(message);
  }
  return r.json();
}

// ---- login (a secure master): the token goes to /api/v1/login once; an HttpOnly cookie after ----

let loggingIn = false;

function showLogin(message) {
  if (loggingIn) return;
  loggingIn = true; page.stop?.(); page = { key: "login", refresh: null, stop: null };
  main.innerHTML = `<section class="login"><h1>Log in to tcluster</h1><p class="muted">${esc(message)}</p>
    <form id="login-form"><label>User token <input id="login-token" type="password" autocomplete="current-password"
    required size="60"></label> <button type="submit">Log in</button><p id="login-error" class="error"></p></form></section>`;
  document.getElementById("login-form").addEventListener("submit", async ev => {
    ev.preventDefault();
    const r = await fetch("/api/v1/login", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: document.getElementById("login-token").value }) });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) { document.getElementById("login-error").textContent = body.error || r.statusText; return; }
    loggingIn = false; main.innerHTML = ""; page = { key: "", refresh: null, stop: null };
    showUser(body); refresh();
  });
}

function showUser(who) {
  const el = document.getElementById("who");
  if (!who.secure) { el.textContent = ""; return; }
  el.innerHTML = `${esc(who.user)} (${esc(who.role)}) <a href="#" id="logout">log out</a>`;
  document.getElementById("logout").onclick = async ev => {
    ev.preventDefault();
    await fetch("/api/v1/logout", { method: "POST" });
    el.textContent = ""; showLogin("logged out");
  };
}

// ---- charts ----

function seriesOpts(labels, opts = {}) {
  return labels.map((label, i) => ({ label, stroke: opts.colors?.[i] || COLORS[i % COLORS.length],
    width: opts.widths?.[i] ?? 1.5, dash: opts.dashes?.[i], fill: opts.fills?.[i],
    value: (u, v) => v == null ? "-" : opts.fmt(v) }));
}

// Vertical markers: OOM kills (red) and preemptions (orange), each with its word.
function drawMarks(u, times, color, text, row) {
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 2; ctx.font = "bold 11px sans-serif";
  for (const t of times) {
    const x = u.valToPos(t, "x", true);
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
    ctx.fillText(text, x + 3, u.bbox.top + 12 * row);
  }
  ctx.restore();
}

// key: a stable id; el: container; data: [xs, ...ys]; labels per y; fmt for the axis and legend.
function chart(key, el, title, data, labels, fmt, opts = {}) {
  let box = el.querySelector(`[data-chart="${key}"]`);
  if (!box) {
    box = document.createElement("div");
    box.className = "chart"; box.dataset.chart = key;
    box.innerHTML = `<h3>${esc(title)}</h3><div class="plot"></div>`;
    el.appendChild(box);
  }
  const ooms = opts.ooms || [], preempts = opts.preempts || [];
  box.dataset.preemptions = preempts.length;
  box.dataset.points = data[0].length ? data.slice(1).reduce((n, ys) => n + ys.filter(v => v != null).length, 0) : 0;
  box.dataset.ooms = ooms.length;
  oomsByKey[key] = ooms;
  const sig = labels.join("|");
  let u = charts[key];
  if (u && (u._sig !== sig || !document.body.contains(u.root))) { u.destroy(); u = null; }
  if (!u) {
    const width = Math.max(320, box.clientWidth - 12);
    u = new uPlot({ width, height: opts.height || 200,
      scales: { x: { time: true, range: (u, min, max) => { const o = oomsByKey[key] || [];
                                 return [Math.min(min, ...o), Math.max(max, ...o.map(t => t + 1))]; } }, y: { range: (u, min, max) => [0, Math.max(max * 1.05, opts.minMax || 1e-9)] } },
      series: [{}, ...seriesOpts(labels, { ...opts, fmt })],
      axes: [{}, { values: (u, vals) => vals.map(fmt), size: 80 }],
      hooks: { draw: [u => { drawMarks(u, u._ooms || [], "#c0392b", "OOM", 1);
                             drawMarks(u, u._preempts || [], "#e67e22", "preempted", 2); }] } }, data, box.querySelector(".plot"));
    u._sig = sig; charts[key] = u;
  } else {
    u.setData(data);
  }
  u._ooms = ooms; u._preempts = preempts; u.redraw(false);
  return box;
}

// One x axis for series of several things sampled at the same bucket times.
function align(list) {
  const xs = [...new Set(list.flatMap(s => s.t))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  return { xs, pick: (s, f) => { const out = new Array(xs.length).fill(null); s.t.forEach((t, i) => out[at.get(t)] = s[f][i]); return out; } };
}

// ---- pages ----

async function overview() {
  const [o, c] = await Promise.all([api("overview"), api("cluster/usage", { since: Date.now() / 1000 - rangeS() })]);
  const bar = (cap, alloc, used, fmt) => `<div class="bar" title="allocated ${fmt(alloc)}, used ${fmt(used)} of ${fmt(cap)}">
      <span class="alloc" style="width:${cap ? 100 * alloc / cap : 0}%"></span><span class="used" style="width:${cap ? 100 * used / cap : 0}%"></span></div>`;
  const card = (title, big, rest) => `<div class="card"><div class="muted">${title}</div><div class="big">${big}</div>${rest || ""}</div>`;
  let html = `<h1>Cluster</h1><div class="cards">
    ${card("CPU (cores) used / allocated / capacity", `${cores(o.used.cpu)} / ${cores(o.allocated.cpu)} / ${cores(o.capacity.cpu)}`, bar(o.capacity.cpu, o.allocated.cpu, o.used.cpu, cores))}
    ${card("Memory used / allocated / capacity", `${bytes(o.used.memory)} / ${bytes(o.allocated.memory)} / ${bytes(o.capacity.memory)}`, bar(o.capacity.memory, o.allocated.memory, o.used.memory, bytes))}
    ${card("Tasks", `${o.tasks.running} running`, `<div>${o.tasks.pending} pending</div>`)}
    ${o.gpus ? card("GPUs bound / capacity", `${o.gpus.allocated} / ${o.gpus.capacity}`,
      bar(o.gpus.capacity, o.gpus.allocated, 0, count) + (o.gpus.util_percent == null ? "" : `<div id="gpu-util">${o.gpus.util_percent.toFixed(0)}% mean utilization of the bound</div>`)) : ""}
    ${card("Nodes", Object.entries(o.nodes).map(([s, n]) => `<span class="${s}">${n} ${s}</span>`).join(" ") || "none")}
    ${card("Jobs", Object.entries(o.jobs).filter(([, n]) => n).map(([s, n]) => `<span class="${s}">${n} ${s}</span>`).join(" ") || "none")}
    ${card("OOM kills (ever)", `<span class="${o.oom_kills ? "oom" : ""}">${o.oom_kills}</span>`)}</div>
    <h2>Queues: guaranteed (line) vs current dominant share</h2>${queueTable(o.queues)}
    <h2>Over time</h2><div class="charts" id="ov-charts"></div>`;
  setMain("overview", html);
  const s = c.series, el = document.getElementById("ov-charts");
  chart("ov-cpu", el, "CPU: capacity, allocated, used (cores)", [s.t, s.cpu_capacity, s.cpu_allocated, s.cpu_used], ["capacity", "allocated", "used"], cores, { dashes: [[6, 4]] });
  chart("ov-mem", el, "Memory: capacity, allocated, used (working set)", [s.t, s.memory_capacity, s.memory_allocated, s.memory_used], ["capacity", "allocated", "used"], bytes, { dashes: [[6, 4]] });
  chart("ov-tasks", el, "Tasks", [s.t, s.running_tasks, s.pending_tasks], ["running", "pending"], count);
}

function queueTable(queues) {
  return `<table><tr><th>queue</th><th>weight</th><th>guaranteed</th><th>share</th><th></th><th>running</th><th>pending</th></tr>` +
    queues.map(q => `<tr><td>${"&nbsp;&nbsp;".repeat(q.depth - 1)}${esc(q.user ? "@" + q.user : (q.name || q.path))}</td><td>${q.weight}</td>
      <td>${pct(q.guaranteed_share)}</td><td>${pct(q.dominant_share)}</td>
      <td><div class="bar"><span class="share" style="width:${100 * Math.min(1, q.dominant_share)}%"></span>
      <span class="guar" style="width:${100 * q.guaranteed_share}%"></span></div></td>
      <td>${q.running_tasks} (${q.running_jobs})</td><td>${q.pending_tasks} (${q.pending_jobs})</td></tr>`).join("") + `</table>`;
}

async function nodes() {
  const list = await api("nodes");
  setMain("nodes", `<h1>Nodes</h1><table><tr><th>node</th><th>state</th><th>CPU allocated / capacity</th>
    <th>memory allocated / capacity</th><th>tasks</th><th>labels</th><th>last seen</th><th>operator</th></tr>` + list.map(n => `<tr>
    <td><a href="#/nodes/${encodeURIComponent(n.name)}">${esc(n.name)}</a></td><td class="state ${n.state}">${n.state}</td>
    <td>${cores(n.used.cpu)} / ${cores(n.capacity.cpu)}</td><td>${bytes(n.used.memory)} / ${bytes(n.capacity.memory)}</td>
    <td>${n.tasks.length}</td><td>${esc(Object.entries(n.labels).map(([k, v]) => k + "=" + v).join(", "))}</td>
    <td>${when(n.last_seen)}</td><td>${opsText(n)}</td></tr>`).join("") + "</table>");
}

// Node operations (README "Node operations"): who asked what, when, why; a drain's deadline and what it waits for.
function opsText(n) {
  const o = n.ops || {}, parts = [];
  if (o.state && o.state !== "READY") {
    let text = `<span class="state ${o.state}">${o.state.toLowerCase()}</span> by ${esc(o.by || "?")} ${when(o.at)}`;
    if (o.reason) text += `: ${esc(o.reason)}`;
    if (o.state === "DRAINING") text += o.drain_deadline ? `; deadline ${when(o.drain_deadline)}` : "; no deadline";
    if (n.blockers && n.blockers.length) text += `; waiting for ${n.blockers.map(b => `<span title="${esc(b.why)}">${esc(b.task)}</span>`).join(", ")}`;
    parts.push(text);
  }
  if (o.maintenance) parts.push(`maintenance ${when(o.maintenance.start)} to ${when(o.maintenance.end)} by ${esc(o.maintenance.by || "?")}${o.maintenance.reason ? ": " + esc(o.maintenance.reason) : ""}`);
  return parts.join("; ");
}

async function node(name) {
  const d = await api(`nodes/${encodeURIComponent(name)}/usage`, { since: Date.now() / 1000 - rangeS() });
  setMain("node:" + name, `<h1>Node ${esc(name)}</h1><div class="charts" id="node-charts"></div><h2>Tasks</h2>
    <table><tr><th>task</th><th>job</th><th>state</th><th>CPU</th><th>working set</th></tr>` + d.tasks.map(t => `<tr>
    <td>${esc(t.id)}</td><td><a href="#/jobs/${esc(t.job_id)}">${esc(t.name || t.job_id)}</a></td><td class="state ${t.state}">${t.state}</td>
    <td>${cores(t.usage?.cpu_rate)}</td><td>${bytes(t.usage?.memory_working_set_bytes)}</td></tr>`).join("") + "</table>");
  const s = d.series || { t: [] }, el = document.getElementById("node-charts");
  chart("node-cpu:" + name, el, "CPU: allocated vs used (cores)", [s.t, s.cpu_capacity || [], s.cpu_allocated || [], s.cpu_used || []], ["capacity", "allocated", "used"], cores, { dashes: [[6, 4]] });
  chart("node-mem:" + name, el, "Memory: allocated vs used (working set)", [s.t, s.memory_capacity || [], s.memory_allocated || [], s.memory_used || []], ["capacity", "allocated", "used"], bytes, { dashes: [[6, 4]] });
}

async function queues() {
  const [q, u] = await Promise.all([api("queues"), api("queues/usage", { since: Date.now() / 1000 - rangeS() })]);
  setMain("queues", `<h1>Queues</h1><p class="muted">fairness ${esc(q.fairness)}, tree from ${esc(q.source)}</p>
    ${queueTable(q.queues)}<h2>Dominant share over time (dashed: guaranteed)</h2><div class="charts" id="q-charts"></div>`);
  const leaves = q.queues.filter(x => x.leaf && u.queues[x.path]);
  if (!leaves.length) return;
  const a = align(leaves.map(x => u.queues[x.path]));
  const shares = leaves.map(x => a.pick(u.queues[x.path], "dominant_share"));
  const guar = leaves.map(x => a.pick(u.queues[x.path], "guaranteed_share"));
  const colors = leaves.flatMap((_, i) => [COLORS[i % COLORS.length]]);
  chart("q-shares", document.getElementById("q-charts"), "Leaf queues", [a.xs, ...shares, ...guar],
    [...leaves.map(x => x.path), ...leaves.map(x => x.path + " guaranteed")], pct,
    { colors: [...colors, ...colors], dashes: [...leaves.map(() => undefined), ...leaves.map(() => [5, 5])], height: 280,
      preempts: (u.preemptions || []).map(p => p.at) });
  document.getElementById("q-charts").insertAdjacentHTML("beforeend", `<div id="preemption-list">${(u.preemptions || []).slice(-20)
    .map(p => `<div class="preempted">${esc(new Date(p.at * 1000).toLocaleString())}: queue ${esc(p.preemptor_queue)} preempted a task of queue ${esc(p.victim_queue)} (job ${esc(p.job_id)}, for job ${esc(p.by_job)})</div>`).join("")}</div>`);
}

async function jobs() {
  const f = page.filters || (page.filters = { state: "", queue: "", user: "", q: "" });
  const list = await api("jobs", { ...f, tasks: "false", limit: 200 });
  if (page.key !== "jobs") {
    setMain("jobs", `<h1>Jobs</h1><div class="filters">
      <select id="f-state"><option value="">any state</option>${["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"].map(s => `<option>${s}</option>`).join("")}</select>
      <input id="f-queue" placeholder="queue"><input id="f-user" placeholder="owner"><input id="f-q" placeholder="search name or id"></div><div id="job-table"></div>`);
    page.filters = f;
    ["state", "queue", "user", "q"].forEach(k => document.getElementById("f-" + k).addEventListener("input", e => { f[k] = e.target.value; refresh(); }));
  }
  document.getElementById("job-table").innerHTML = `<table><tr><th>id</th><th>name</th><th>queue</th><th>owner</th><th>state</th>
    <th>tasks</th><th>request per task</th><th>submitted</th></tr>` + list.map(j => `<tr data-job="${esc(j.id)}">
    <td><a href="#/jobs/${esc(j.id)}">${esc(j.id)}</a></td><td>${esc(j.name)}</td><td>${esc(j.queue)}</td><td>${esc(j.user || "-")}</td>
    <td class="state ${j.state}">${j.state}</td><td>${Object.entries(j.task_states).map(([s, n]) => `${n} ${s.toLowerCase()}`).join(", ")}</td>
    <td>${cores(j.resources.cpu)} CPU, ${bytes(j.resources.memory)}</td><td>${when(j.submitted_at)}</td></tr>`).join("") + "</table>";
}

async function job(id) {
  const [j, u] = await Promise.all([api("jobs/" + id), api(`jobs/${id}/usage`, { since: Date.now() / 1000 - rangeS(), detail: page.task ?? 0 })]);
  const sel = page.task ?? 0;
  const ooms = u.tasks.flatMap(t => t.ooms.map(o => ({ ...o, task: t.index })));
  const gpuCol = j.tasks.some(t => t.gpus && t.gpus.length);     // the node's GPU indices of each task
  setMain("job:" + id, `<h1>Job ${esc(j.id)} ${esc(j.name)} <span class="state ${j.state}">${j.state}</span></h1>
    <p class="muted">queue ${esc(j.queue)} · owner ${esc(j.user || "agent default")} · ${cores(j.resources.cpu)} CPU and ${bytes(j.resources.memory)}${u.limits.gpus ? ` and ${u.limits.gpus} GPU` : ""} per task
    ${j.cpu_limit ? "· cap " + cores(j.cpu_limit) : ""} · submitted ${when(j.submitted_at)} · <code>${esc(j.command.join(" "))}</code></p>
    ${j.pending_reason ? `<p class="reason" id="pending-reason">pending: ${esc(j.pending_reason)}</p>` : ""}
    ${j.reason ? `<p class="reason" id="end-reason">ended: ${esc(j.reason)}</p>` : ""}
    ${batchLine(j)}
    <div id="oom-list">${ooms.map(o => `<div class="oom">OOM kill: task ${o.task} on ${esc(o.node)} at ${esc(new Date(o.at * 1000).toLocaleString())}</div>`).join("")}</div>
    <div id="preemption-list">${(u.preemptions || []).map(p => `<div class="preempted">task ${p.task} preempted at ${esc(new Date(p.at * 1000).toLocaleString())}: ${esc(p.reason)}</div>`).join("")}</div>
    <h2>Tasks</h2><table id="tasks"><tr><th>#</th><th>state</th><th>node</th><th>try</th><th>exit</th><th>reason</th><th>CPU</th><th>working set</th><th>peak</th><th>pids</th>${gpuCol ? "<th>GPUs</th>" : ""}<th></th></tr>` +
    j.tasks.slice(0, 200).map(t => { const x = t.usage; return `<tr data-task="${t.index}"><td>${t.index}</td><td class="state ${t.state}">${t.state}</td>
      <td>${esc(t.node || "-")}</td><td>${t.attempt}</td><td>${t.exit_code ?? (t.signal_name || "-")}</td><td class="${t.reason === "OOMKilled" ? "oom" : ""}">${esc(t.reason)}</td>
      <td>${cores(x.cpu_rate)}</td><td>${bytes(Math.max(0, x.memory_bytes - x.memory_file_bytes))}</td><td>${bytes(x.memory_peak_bytes)}</td><td>${x.pids}</td>
      ${gpuCol ? `<td>${esc((t.gpus || []).join(",") || "-")}</td>` : ""}<td><a href="#/jobs/${esc(id)}/logs/${t.index}">log</a></td></tr>`; }).join("") + `</table>
    <h2>Usage <select id="task-pick">${u.tasks.map(t => `<option value="${t.index}" ${t.index === sel ? "selected" : ""}>task ${t.index}</option>`).join("")}</select></h2>
    <div class="charts" id="job-charts"></div>`);
  const pick = document.getElementById("task-pick");
  pick.onchange = () => { page.task = +pick.value; refresh(); };
  drawJobCharts(id, u, ooms.map(o => o.at), sel, (u.preemptions || []).map(p => p.at));
}

// Arrays, dependencies, gangs and time limits, where the job has them (README, "Batch work").
function batchLine(j) {
  const parts = [];
  if (j.array) parts.push(`array ${esc(j.array)}${j.throttle ? `, at most ${j.throttle} at once` : ""}; waiting ` +
    `[${esc((j.pending_indexes || "").slice(0, 80)) || "none"}]` + (j.skipped_indexes ? `; cancelled before starting [${esc(j.skipped_indexes.slice(0, 80))}]` : ""));
  if (j.dependency) parts.push(`depends on ${esc(j.dependency)}`);
  if (j.gang) parts.push(`gang of ${j.tasks_total}`);
  if (j.time_limit_s) parts.push(`time limit ${j.time_limit_s}s`);
  return parts.length ? `<p class="muted" id="batch">${parts.join(" · ")}</p>` : "";
}

function drawJobCharts(id, u, oomTimes, sel, preemptTimes) {
  const el = document.getElementById("job-charts");
  if (!u.tasks.length) return;
  const a = align(u.tasks.map(t => t.series));
  // Stacked CPU: each band is the running sum up to that task; the top is drawn first.
  let acc = new Array(a.xs.length).fill(0);
  const stacked = u.tasks.map(t => { const user = a.pick(t.series, "cpu_user"), sys = a.pick(t.series, "cpu_system");
    acc = acc.map((v, i) => v + (user[i] || 0) + (sys[i] || 0)); return acc.slice(); });
  const n = u.tasks.length, req = a.xs.map(() => u.limits.cpu_request * n);
  const cpuLabels = u.tasks.map(t => "task " + t.index).reverse();
  chart("job-cpu:" + id, el, `CPU by task, stacked (cores; dashed: request${u.limits.cpu_limit ? ", cap" : ""})`,
    [a.xs, ...stacked.slice().reverse(), req, ...(u.limits.cpu_limit ? [a.xs.map(() => u.limits.cpu_limit * n)] : [])],
    [...cpuLabels, "request", ...(u.limits.cpu_limit ? ["cap"] : [])], cores,
    { ooms: oomTimes, preempts: preemptTimes, fills: cpuLabels.map((_, i) => COLORS[(n - 1 - i) % COLORS.length] + "cc"),
      colors: [...cpuLabels.map((_, i) => COLORS[(n - 1 - i) % COLORS.length]), "#333", "#c0392b"],
      dashes: [...cpuLabels.map(() => undefined), [6, 4], [2, 3]] });
  const t = u.tasks.find(x => x.index === sel) || u.tasks[0], s = t.series;
  const limit = s.t.map(() => u.limits.memory || null), peak = s.t.map(() => t.memory_peak_bytes || null);
  chart("job-mem:" + id, el, `Memory of task ${t.index}: working set, anon (RSS), page cache, swap; limit and peak`,
    [s.t, s.memory_working_set, s.memory_anon, s.memory_cache, s.memory_swap, limit, peak],
    ["working set", "anon", "cache", "swap", "limit", "peak"], bytes,
    { ooms: oomTimes, colors: ["#2c6fbb", "#55a868", "#ccb974", "#8172b3", "#c0392b", "#937860"], widths: [2.5], dashes: [, , , , [6, 4], [2, 3]] });
  chart("job-cpu1:" + id, el, `CPU of task ${t.index}: user, system, throttled (cores)`,
    [s.t, s.cpu_user, s.cpu_system, s.cpu_throttled], ["user", "system", "throttled"], cores, { ooms: oomTimes });
  chart("job-pids:" + id, el, `Processes of task ${t.index}` + (u.limits.pids_max ? ` (max ${u.limits.pids_max})` : ""),
    [s.t, s.pids], ["pids"], count, { ooms: oomTimes });
  chart("job-io:" + id, el, `I/O of task ${t.index} (bytes/s)`, [s.t, s.io_read, s.io_write], ["read", "write"], bytes, { ooms: oomTimes });
  drawGpuCharts(id, u, t, oomTimes, preemptTimes);
}

// GPU tasks whose node reads NVML: each task's devices' mean utilization, and the chosen
// task's GPU memory (used of its devices' total). Nothing where no task has a GPU series.
function drawGpuCharts(id, u, t, oomTimes, preemptTimes) {
  const withGpu = u.tasks.filter(x => x.gpu);
  if (!withGpu.length) return;
  const el = document.getElementById("job-charts"), g = align(withGpu.map(x => x.gpu));
  chart("job-gpu:" + id, el, `GPU utilization by task (% of its ${u.limits.gpus || ""} GPUs, mean)`,
    [g.xs, ...withGpu.map(x => g.pick(x.gpu, "gpu_util"))], withGpu.map(x => "task " + x.index),
    v => v.toFixed(0) + "%", { ooms: oomTimes, preempts: preemptTimes, minMax: 100 });
  const s = t.gpu;
  if (!s || !s.gpu_memory_used) return;      // only the task in detail has every GPU series
  chart("job-gpumem:" + id, el, `GPU memory of task ${t.index}: used and its devices' total`,
    [s.t, s.gpu_memory_used, s.gpu_memory_total], ["used", "total"], bytes,
    { ooms: oomTimes, colors: ["#2c6fbb", "#c0392b"], widths: [2.5], dashes: [, [6, 4]] });
}

function logs(id, index) {
  if (page.key === `logs:${id}:${index}`) return;
  setMain(`logs:${id}:${index}`, `<h1>Log of <a href="#/jobs/${esc(id)}">${esc(id)}</a> task ${esc(index)}</h1>
    <div class="filters"><select id="log-stream"><option>stdout</option><option>stderr</option></select>
    <label><input type="checkbox" id="log-follow" checked> follow</label></div><pre class="log" id="log"></pre>`);
  const start = () => {
    page.stop?.();
    const ctl = new AbortController(), pre = document.getElementById("log");
    page.stop = () => ctl.abort();
    pre.textContent = "";
    const params = new URLSearchParams({ stream: document.getElementById("log-stream").value, tail: 262144,
      follow: document.getElementById("log-follow").checked ? "1" : "" });
    fetch(`/api/v1/jobs/${id}/tasks/${index}/logs?${params}`, { signal: ctl.signal }).then(async r => {
      if (!r.ok) { const m = (await r.json().catch(() => ({}))).error || r.statusText;
        pre.textContent = m; if (r.status === 401) showLogin(m); return; }
      const reader = r.body.getReader(), dec = new TextDecoder();
      for (;;) { const { value, done } = await reader.read(); if (done) break;
        const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent += dec.decode(value, { stream: true }); if (atEnd) pre.scrollTop = pre.scrollHeight; }
    }).catch(e => { if (e.name !== "AbortError") pre.textContent += "\n[" + e.message + "]"; });
  };
  document.getElementById("log-stream").onchange = start;
  document.getElementById("log-follow").onchange = start;
  start();
}

// ---- usage: the ledger's sums by queue and by user over a chosen period (README "Usage ledger") ----

const dayInput = s => new Date(s * 1000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 10);

async function usage() {
  const f = page.period || (page.period = { since: dayInput(Date.now() / 1000 - 30 * 86400), until: "" });
  const secs = d => d ? new Date(d + "T00:00").getTime() / 1000 : "";
  const until = f.until ? secs(f.until) + 86400 : Date.now() / 1000;    // the until day is included
  const [byQueue, byUser] = await Promise.all(["queue", "user"].map(by => api("usage/report", { since: secs(f.since), until, by })));
  if (page.key !== "usage") {
    setMain("usage", `<h1>Usage</h1><div class="filters">from <input id="u-since" type="date" value="${esc(f.since)}">
      to <input id="u-until" type="date" value="${esc(f.until)}"> <span class="muted">(empty: now)</span></div>
      <p class="muted" id="u-note"></p><h2>By queue</h2><div id="u-queue"></div><h2>By user</h2><div id="u-user"></div>`);
    page.period = f;
    ["since", "until"].forEach(k => document.getElementById("u-" + k).addEventListener("change", e => { f[k] = e.target.value; refresh(); }));
  }
  document.getElementById("u-note").textContent = `attempts that ended from ${when(byQueue.since * 1000)} to ${when(byQueue.until * 1000)}`
    + (byQueue.own_only ? " (your own usage)" : "");
  for (const [id, r] of [["u-queue", byQueue], ["u-user", byUser]]) {
    document.getElementById(id).innerHTML = `<table class="usage" data-by="${r.by}"><tr><th>${r.by}</th><th>CPU-hours</th><th>GPU-hours</th>
      <th>jobs</th><th>attempts</th><th>failures</th><th>wall-hours</th></tr>` + r.lines.map(l => `<tr data-key="${esc(l[r.by])}">
      <td>${esc(l[r.by])}</td><td>${l.cpu_hours.toFixed(2)}</td><td>${l.gpu_hours.toFixed(2)}</td><td>${l.jobs}</td>
      <td>${l.attempts}</td><td>${l.failures}</td><td>${l.wall_hours.toFixed(2)}</td></tr>`).join("") + "</table>";
  }
}

// ---- routing and the 2 s refresh ----

function setMain(key, html) {
  if (page.key !== key) { page.stop?.(); page = { key, filters: page.filters, period: page.period, task: undefined }; main.innerHTML = "";
    Object.keys(charts).forEach(k => { charts[k].destroy(); delete charts[k]; }); }
  // Keep chart containers (and their canvases) across refreshes; replace the rest.
  const kept = [...main.querySelectorAll(".charts")].map(c => [c.id, c]);
  main.innerHTML = html;
  for (const [id, old] of kept) { const fresh = document.getElementById(id); if (fresh) fresh.replaceWith(old); }
}

// ---- federation: this master as a Megha LM (GET /api/v1/federation) ----

async function federation() {
  const f = await api("federation");
  if (!f.federation) {
    setMain("federation", `<h1>Federation</h1><p class="muted">This master is not a federation LM
      (start it with --federation-lm-id N).</p>`);
    return;
  }
  const l = f.lm, p = f.pending, a = f.answers;
  const gms = f.gms.length ? `<table><tr><th>GM index</th><th>name</th><th>view age</th><th>backlog</th><th>stream</th></tr>${
    f.gms.map(g => `<tr><td>${g.index}</td><td>${esc(g.name)}</td><td>${g.view_age_s.toFixed(1)} s</td>
      <td>${g.backlog}</td><td>${g.closed ? "closed (too slow)" : "open"}</td></tr>`).join("")}</table>`
    : `<p class="muted">No GM is subscribed now.</p>`;
  setMain("federation", `<h1>Federation</h1>
    <p>LM ${esc(l.name)} (index ${l.index}) of ${l.gms} GMs, epoch ${l.epoch}, ${l.nodes} nodes;
      a full state to every GM each ${l.state_interval_s} s</p>
    <h2>GMs connected</h2>${gms}
    <h2>Pending</h2><table><tr><th>Places being answered</th><th>tasks waiting for their node</th>
      <th>victims stopping</th><th>federated tasks running</th></tr>
      <tr><td>${p.places}</td><td>${p.waiting_for_node}</td><td>${p.victims_stopping}</td><td>${f.running_tasks}</td></tr></table>
    <h2>Places answered since this master leads</h2><table><tr><th>launches</th><th>repartitions</th>
      <th>preemptions</th><th>refused (stale epoch)</th><th>inconsistencies</th></tr>
      <tr><td>${a.launches}</td><td>${a.repartitions}</td><td>${a.preemptions}</td><td>${a.refused}</td>
      <td>${a.inconsistencies}</td></tr></table>`);
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  document.querySelectorAll("[data-nav]").forEach(a => a.classList.toggle("active", a.dataset.nav === (parts[0] || "overview")));
  if (parts[0] === "nodes" && parts[1]) return () => node(parts[1]);
  if (parts[0] === "nodes") return nodes;
  if (parts[0] === "queues") return queues;
  if (parts[0] === "jobs" && parts[1] && parts[2] === "logs") return () => logs(parts[1], parts[3] || "0");
  if (parts[0] === "jobs" && parts[1]) return () => job(parts[1]);
  if (parts[0] === "jobs") return jobs;
  if (parts[0] === "usage") return usage;
  if (parts[0] === "federation") return federation;
  return overview;
}

let busy = false;
async function refresh() {
  if (busy || loggingIn) return;
  busy = true;
  const live = document.getElementById("live");
  try { await route()(); live.classList.remove("stale"); live.title = "updated " + new Date().toLocaleTimeString(); }
  catch (e) { live.classList.add("stale"); live.title = e.message; if (!main.innerHTML) main.textContent = e.message; }
  finally { busy = false; }
}

window.addEventListener("hashchange", refresh);
document.getElementById("range").addEventListener("change", refresh);

// `tcl dev` prints a link with the token in the fragment (never sent to the server):
// trade it for a session, then drop it from the address bar and the history.
async function loginFromLink() {
  const m = location.hash.match(/^#login=(.+)$/);
  if (!m) return;
  history.replaceState(null, "", location.pathname + "#/");
  await fetch("/api/v1/login", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: decodeURIComponent(m[1]) }) });
}

loginFromLink().then(() => fetch("/api/v1/whoami")).then(async r => {
  const body = await r.json().catch(() => ({}));
  if (r.ok) showUser(body); else if (r.status === 401) showLogin(body.error || "log in");
}).catch(() => {}).then(() => { setInterval(refresh, REFRESH_MS); refresh(); });
