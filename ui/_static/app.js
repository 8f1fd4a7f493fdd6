"use strict";
// The viewer's page: hash routes (#/receipts?outcome=failed, #/agent-runs/run_…), JSON from /api/, live updates
// from /api/events. Every record-derived string goes into the DOM as text (h() makes text nodes), never as HTML.
(function () {
  const main = document.getElementById("main");
  const live = document.getElementById("live");

  // A bearer token, if the server needs one, arrives in the URL fragment (#token=...): kept for this tab only.
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get("token")) {
    sessionStorage.setItem("of-ui-token", frag.get("token"));
    history.replaceState(null, "", location.pathname + "#/");
  }
  const token = sessionStorage.getItem("of-ui-token");
  const headers = token ? { authorization: "Bearer " + token } : {};

  // -- DOM helpers ---------------------------------------------------------------------------------
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "data") Object.assign(el.dataset, v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "href") el.setAttribute("href", String(v).startsWith("#") ? v : "#/");  // only our own routes
      else el.setAttribute(k, v);
    }
    add(el, kids);
    return el;
  }
  function add(el, kids) {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) add(el, kid);
      else if (kid instanceof Node) el.appendChild(kid);
      else el.appendChild(document.createTextNode(String(kid)));
    }
  }
  const text = (v) => (v === null || v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));
  function badge(value, title) {
    const v = value === null || value === undefined ? "—" : String(value);
    return h("span", { class: "badge s-" + v.replace(/[^a-z_]/gi, ""), title: title || null }, v);
  }
  function json(v) { return h("pre", {}, JSON.stringify(v, null, 2)); }
  function short(d) { return d ? String(d).replace(/^sha256:/, "").slice(0, 12) : ""; }
  function when(s) { return s ? String(s).replace("T", " ").replace(/\.\d+/, "").replace("Z", "") : ""; }
  function precise(s) { return s ? String(s).replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace("Z", "") : ""; }
  const ROUTES = { receipt: "receipts", agent_run: "agent-runs", workflow_run: "workflow-runs", attempt: "attempts",
                   run: "agent-runs" };
  function link(kind, id, label) {
    if (!id) return "";
    return h("a", { class: "id", href: "#/" + (ROUTES[kind] || kind) + "/" + encodeURIComponent(id) }, label || id);
  }
  function copyButton(textToCopy) {
    return h("button", { type: "button", onclick: async function (ev) {
      try { await navigator.clipboard.writeText(textToCopy); ev.target.textContent = "copied"; }
      catch (e) { ev.target.textContent = "select and copy"; }
    } }, "copy");
  }

  async function api(path) {
    const r = await fetch("api/" + path, { headers });
    let body = null;
    try { body = await r.json(); } catch (e) { /* not JSON */ }
    if (!r.ok) throw new Error(body && body.error ? body.error.message + " (" + body.error.code + ")" : "HTTP " + r.status);
    return body;
  }

  // -- routing -------------------------------------------------------------------------------------
  function route() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, query] = raw.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(query || "") };
  }
  let rendering = 0;
  async function render() {
    const { parts, query } = route();
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.getAttribute("href") === "#/" + (parts[0] || ""));
    }
    const mine = ++rendering;
    let view;
    try {
      view = await VIEWS[parts[0] || ""](parts[1], query);
    } catch (e) {
      view = h("p", { class: "err" }, "Could not load: " + e.message);
    }
    if (mine !== rendering) return;  // a newer render started meanwhile
    const y = window.scrollY;
    main.replaceChildren(view);
    window.scrollTo(0, y);
    document.body.dataset.rendered = String(mine);
  }

  // -- lists ---------------------------------------------------------------------------------------
  function filterBar(name, fields, query) {
    const form = h("form", { class: "filters", onsubmit: function (ev) {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const el of form.querySelectorAll("input,select")) if (el.value.trim()) q.set(el.name, el.value.trim());
      location.hash = "#/" + name + (q.toString() ? "?" + q : "");
    } });
    for (const [key, label, options] of fields) {
      const input = options
        ? h("select", { name: key }, h("option", { value: "" }, "any"), options.map((o) => h("option", { value: o }, o)))
        : h("input", { name: key, placeholder: key === "since" || key === "until" ? "2026-01-31T12" : "" });
      input.value = query.get(key) || "";
      form.appendChild(h("label", {}, label, input));
    }
    form.appendChild(h("button", { type: "submit" }, "Filter"));
    form.appendChild(h("button", { type: "button", onclick: () => { location.hash = "#/" + name; } }, "Clear"));
    return form;
  }
  function table(columns, rows, kind, idKey) {
    return h("table", { class: "list", data: { kind } },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c[0])))),
      h("tbody", {}, rows.map((r) => h("tr", { data: { id: r[idKey] || "" } },
        columns.map((c) => h("td", { class: c[2] || "" }, c[1](r)))))));
  }
  function listView(name, title, fields, columns, kind, idKey, empty) {
    return async function (_id, query) {
      const data = await api(name + (query.toString() ? "?" + query : ""));
      const out = [h("h2", {}, title), filterBar(name, fields, query),
                   h("p", { class: "note" }, data.matched + " of " + data.total + " shown" +
                     (data.truncated ? " (" + data.truncated + " more not listed: narrow the filters)" : ""))];
      out.push(data.rows.length ? table(columns, data.rows, kind, idKey) : h("p", { class: "hint" }, empty));
      return h("section", {}, out);
    };
  }
  const OUTCOMES = ["succeeded", "failed", "refused", "cancelled", "unknown", "running"];
  const TIME = [["since", "since"], ["until", "until"]];

  // -- overview ------------------------------------------------------------------------------------
  async function overview() {
    const s = await api("summary");
    const c = s.counts;
    const cards = h("div", { class: "cards" }, [
      ["receipts", "Receipts", c.receipts], ["agent-runs", "Agent runs", c.agent_runs],
      ["workflow-runs", "Workflow runs", c.workflow_runs], ["attempts", "Work attempts", c.attempts],
      ["tasks", "MCP tasks", c.tasks], ["conversations", "Conversations", c.conversations],
    ].map(([r, label, n]) => h("div", { class: "card" }, h("a", { href: "#/" + r }, h("b", {}, String(n)), label))));
    const attention = s.attention.length
      ? s.attention.map((a) => attentionItem(a, s.resolve))
      : [h("p", { class: "hint" }, "Nothing needs you: no blocked run or attempt, no uncertain step.")];
    const streams = s.streams.length
      ? table([["stream", (r) => r.path, "id"], ["kind", (r) => r.kind], ["records", (r) => String(r.records)],
               ["last seq", (r) => text(r.last_seq)], ["bytes", (r) => text(r.size)],
               ["verify", (r) => r.ok ? badge("ok") : h("span", {}, badge("corrupt"), " ", h("span", { class: "err" }, r.error))]],
              s.streams, "streams", "path")
      : h("p", { class: "hint" }, "No journals in " + s.data_dir + " yet. Run a server, an agent or a workflow with " +
          "--data-dir pointing here, and they appear live.");
    const problems = s.problems.map((p) => h("p", { class: "err problem" }, "Cannot read the " + p.stream + ": " + p.message));
    return h("section", {}, h("h2", {}, "Overview"), h("p", { class: "note" }, "data " + s.data_dir), problems, cards,
             h("h3", {}, "Needs a person (" + s.attention.length + ")"), h("div", { id: "attention" }, attention),
             h("h3", {}, "Journals (journal verify)"), streams);
  }
  async function post(path, body) {
    const r = await fetch("api/" + path, { method: "POST", headers: Object.assign({ "content-type": "application/json" }, headers),
                                           body: JSON.stringify(body) });
    let out = null;
    try { out = await r.json(); } catch (e) { /* not JSON */ }
    if (!r.ok) throw new Error(out && out.error ? out.error.message + " (" + out.error.code + ")" : "HTTP " + r.status);
    return out;
  }
  // The resolve form (served with --allow-resolve): the same answer the resolve command records.
  function resolveForm(a) {
    const verdict = h("select", { name: "verdict" }, h("option", { value: "" }, "did the effect happen?"),
                      h("option", { value: "applied" }, "applied: it happened"), h("option", { value: "not-applied" }, "not applied: it did not"));
    const result = h("input", { name: "result", placeholder: "the step's result as JSON (applied only)", class: "mono" });
    const reason = h("input", { name: "reason", placeholder: "what you checked" });
    const by = h("input", { name: "by", placeholder: "your name" });
    const out = h("span", { class: "note", data: { role: "outcome" } });
    const form = h("form", { class: "filters resolve", onsubmit: async function (ev) {
      ev.preventDefault();
      if (!verdict.value) { out.textContent = "choose applied or not applied"; return; }
      const body = { kind: a.kind, applied: verdict.value === "applied", by: by.value };
      if (a.kind === "workflow_step") {
        Object.assign(body, { run_id: a.run_id, step: a.step });
        if (body.applied) {
          try { body.result = JSON.parse(result.value); }
          catch (e) { out.textContent = "the result is not JSON: " + e.message; return; }
        }
      } else {
        Object.assign(body, { operation_id: a.operation_id, reason: reason.value });
      }
      out.textContent = "recording…";
      try {
        await post("resolve", body);
        out.textContent = "recorded";
        out.className = "note ok";
      } catch (e) {
        out.textContent = e.message;
        out.className = "err";
      }
    } }, h("label", {}, "verdict", verdict), a.kind === "workflow_step" ? h("label", {}, "result", result) : h("label", {}, "reason", reason),
      h("label", {}, "by", by), h("button", { type: "submit" }, "Resolve"), out);
    return form;
  }
  function attentionItem(a, canResolve) {
    const what = {
      workflow_step: () => ["Workflow run ", link("workflow_run", a.run_id), " (" + a.workflow + ") step " + a.step +
                            " " + text(a.name) + (a.tool ? " (tool " + a.tool + ")" : "") + " has an uncertain effect"],
      work_operation: () => ["Work operation " + a.operation_id + " (step " + a.step + ", " + a.effect + ") of attempt ",
                             link("attempts", a.attempt_id), " has an unknown outcome",
                             a.running && a.running.length ? " — its processes are STILL RUNNING" : "",
                             a.resolution_pending ? " — resolved as " + a.resolution_pending.as + ", not yet applied" : ""],
      attempt: () => ["Work attempt ", link("attempts", a.attempt_id), " is blocked: " + text(a.reason)],
      receipt: () => ["Call ", link("receipt", a.receipt_id), " (" + a.tool + ") ended with an unknown effect" +
                      (a.error ? ": " + text(a.error.message) : "")],
    }[a.kind]();
    return h("div", { class: "attention", data: { kind: a.kind } }, h("div", {}, badge(a.status), " ", what,
             a.at ? h("span", { class: "note" }, " · " + when(a.at)) : ""),
             a.commands.map((cmd) => h("div", { class: "cmd" }, h("code", {}, cmd), copyButton(cmd))),
             canResolve && (a.kind === "workflow_step" || a.kind === "work_operation") && !a.resolution_pending ? resolveForm(a) : "");
  }

  // -- details -------------------------------------------------------------------------------------
  function kv(pairs) {
    return h("dl", { class: "kv" }, pairs.filter((p) => p[1] !== undefined && p[1] !== null && p[1] !== "")
      .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : text(v))]));
  }
  function treeNode(n) {
    if (!n || typeof n !== "object") return h("li", { class: "note" }, text(n));  // a cut note ("[nested too deep…]")
    const status = n.outcome || n.status;
    const node = h("span", { class: "node t-" + n.type, data: { id: n.id || "", type: n.type } },
      h("b", {}, text(n.label)), " ", badge(status), n.certainty ? badge(n.certainty, "certainty") : "",
      n.type === "receipt" && n.id ? link("receipt", n.id) : n.type === "run" ? link("run", n.id) : "",
      n.duration_ms !== undefined && n.duration_ms !== null ? h("span", { class: "note" }, n.duration_ms.toFixed(1) + " ms") : "",
      n.params_sha256 ? h("span", { class: "digest mono", title: "params sha256" }, "params " + short(n.params_sha256)) : "",
      n.result_sha256 ? h("span", { class: "digest mono", title: "result sha256" }, "result " + short(n.result_sha256)) : "",
      n.error ? h("span", { class: "err" }, text(n.error.code) + ": " + text(n.error.message)) : "",
      n.text ? h("span", { class: "note" }, "“" + text(n.text).slice(0, 160) + "”") : "");
    return h("li", {}, node, n.children && n.children.length ? h("ul", {}, n.children.map(treeNode)) : "");
  }
  function timeline(events) {
    return h("ol", { class: "timeline" }, events.map((e) => h("li", { class: "o-" + (e.outcome || "") },
      h("time", {}, precise(e.at)), text(e.what), e.duration_ms ? h("span", { class: "note" }, " · " + e.duration_ms.toFixed(1) + " ms") : "")));
  }

  async function agentRun(id) {
    const d = await api("agent-runs/" + encodeURIComponent(id));
    const s = d.summary, f = d.run.finished || {};
    return h("section", {}, h("h2", {}, "Agent run ", h("span", { class: "mono" }, s.run_id), " ", badge(s.status)),
      kv([["agent", s.agent], ["provider / model", s.provider + " / " + s.model], ["rounds", String(s.rounds)],
          ["started", when(s.started_at)], ["finished", when(s.finished_at)],
          ["parent run", d.parent_run_id ? link("run", d.parent_run_id) : null],
          ["started by call", d.run.started.parent_receipt_id ? link("receipt", d.run.started.parent_receipt_id) : null],
          ["principal", d.run.started.principal], ["task", d.run.started.task],
          ["error", f.error ? text(f.error.code) + ": " + text(f.error.message) : null]]),
      h("h3", {}, "Tree: rounds, tool calls, child runs"), h("div", { class: "tree" }, h("ul", {}, treeNode(d.tree))),
      h("h3", {}, "Timeline"), timeline(d.timeline),
      h("h3", {}, "Answer"), f.text ? h("pre", { class: "answer" }, f.text) : h("p", { class: "hint" }, "no text"),
      h("h3", {}, "Records"), json(d.run));
  }

  async function workflowRun(id) {
    const d = await api("workflow-runs/" + encodeURIComponent(id));
    return h("section", {}, h("h2", {}, "Workflow run ", h("span", { class: "mono" }, d.run_id), " ", badge(d.status)),
      kv([["workflow", d.workflow], ["digest", d.digest], ["started", when(d.started_at)], ["updated", when(d.updated_at)],
          ["error", d.error ? text(d.error.code) + ": " + text(d.error.message) : null]]),
      h("h3", {}, "Steps"),
      table([["step", (r) => r.step, "id"], ["name", (r) => r.name], ["status", (r) => badge(r.status)],
             ["tool", (r) => r.tool || ""], ["receipt", (r) => r.receipt ? h("span", {}, link("receipt", r.receipt_id), " ",
               badge(r.receipt.outcome), r.receipt.certainty ? badge(r.receipt.certainty) : "") : ""],
             ["result / error", (r) => r.error ? h("span", { class: "err" }, text(r.error.code) + ": " + text(r.error.message))
               : r.result !== undefined ? h("span", { class: "mono" }, text(r.result).slice(0, 300)) : ""],
             ["resolve", (r) => r.commands ? r.commands.map((c) => h("div", { class: "cmd" }, h("code", {}, c), copyButton(c))) : ""]],
            d.steps, "steps", "step"),
      h("h3", {}, "Input"), json(d.input), d.result !== undefined ? [h("h3", {}, "Result"), json(d.result)] : "",
      d.resolutions.length ? [h("h3", {}, "Resolutions"), json(d.resolutions)] : "");
  }

  async function attempt(id) {
    const d = await api("attempts/" + encodeURIComponent(id));
    return h("section", {}, h("h2", {}, "Work attempt ", h("span", { class: "mono" }, d.attemptId), " ", badge(d.state)),
      kv([["principal", d.principal], ["steps", String(d.steps)], ["cursor", String(d.cursor)],
          ["blocked", d.blockedReason ? text(d.blockedReason) : null], ["plan digest", d.planDigest],
          ["created", when(d.createdAt)], ["updated", when(d.updatedAt)]]),
      h("h3", {}, "Operations"),
      table([["operation", (r) => r.operationId, "id"], ["step", (r) => r.step], ["effect", (r) => r.effect],
             ["status", (r) => badge(r.status)],
             ["receipt", (r) => r.receiptId ? h("span", {}, link("receipt", r.receiptId), " ", badge(r.outcome), badge(r.certainty)) : ""],
             ["resolve", (r) => r.commands ? r.commands.map((c) => h("div", { class: "cmd" }, h("code", {}, c), copyButton(c))) : ""]],
            d.operations, "operations", "operationId"),
      h("h3", {}, "History"), json(d.history));
  }

  async function receipt(id) {
    const d = await api("receipts/" + encodeURIComponent(id));
    const r = d.receipt;
    return h("section", {}, h("h2", {}, "Receipt ", h("span", { class: "mono" }, r.receipt_id), " ", badge(r.outcome), " ",
                              badge(r.certainty)),
      kv([["tool", r.tool], ["principal", r.principal], ["started", when(r.started_at)], ["finished", when(r.finished_at)],
          ["duration", r.duration_ms !== undefined ? r.duration_ms + " ms" : null], ["handler started", text(r.handler_started)],
          ["recovered", r.recovered ? "yes (the process ended mid-call; recovery wrote this receipt)" : null],
          ["spec sha256", r.spec_sha256], ["params sha256", r.params_sha256], ["result sha256", r.result_sha256],
          ["error", r.error ? text(r.error.code) + ": " + text(r.error.message) : null],
          ["journal", r.journal + " (seq " + (r.seq || "—") + ")"],
          ["parent", r.parent_receipt_id ? link("receipt", r.parent_receipt_id) : null]]),
      h("h3", {}, "Child calls (" + d.children.length + ")"),
      d.children.length ? table([["receipt", (c) => link("receipt", c.receipt_id), "id"], ["tool", (c) => c.tool],
                                 ["outcome", (c) => badge(c.outcome)], ["certainty", (c) => badge(c.certainty)]],
                                d.children, "children", "receipt_id") : h("p", { class: "hint" }, "none"),
      h("h3", {}, "Named by"),
      d.referenced_by.length ? h("ul", {}, d.referenced_by.map((x) => h("li", {}, x.kind.replace("_", " ") + " ",
        x.kind === "task" ? h("span", { class: "mono" }, x.id) : link(x.kind, x.id), x.step ? " step " + x.step : "",
        x.operation ? " operation " + x.operation : "", " ", badge(x.status)))) : h("p", { class: "hint" }, "no run or task names it"),
      h("h3", {}, "Record"), json(r));
  }

  async function artifact(id) {
    const d = await api("artifacts/" + encodeURIComponent(id));
    if (d.error) return h("section", {}, h("h2", {}, "Artifact ", h("span", { class: "mono" }, id)),
                          h("p", { class: "err" }, text(d.error.code) + ": " + text(d.error.message)));
    return h("section", {}, h("h2", {}, "Artifact ", h("span", { class: "mono" }, d.artifact_id)),
      kv([["size", d.size + " bytes"], ["sha256 (verified)", d.sha256], ["media type", d.media_type]]),
      h("p", { class: "note" }, d.truncated ? "the first " + d.shown + " bytes of " + d.size + " (the rest is not shown)" : "all of it"),
      h("pre", { class: "artifact" }, d.text));
  }

  const VIEWS = {
    artifacts: (id) => artifact(id),
    "": overview,
    receipts: (id, q) => id ? receipt(id) : listView("receipts", "Receipts",
      [["q", "id contains"], ["outcome", "outcome", OUTCOMES], ["certainty", "certainty", ["known", "unknown"]],
       ["tool", "tool"], ["principal", "principal"], ...TIME],
      [["receipt", (r) => link("receipt", r.receipt_id), "id"], ["tool", (r) => r.tool], ["outcome", (r) => badge(r.outcome)],
       ["certainty", (r) => badge(r.certainty)], ["ms", (r) => r.duration_ms !== undefined ? String(r.duration_ms) : ""],
       ["principal", (r) => text(r.principal)], ["parent", (r) => link("receipt", r.parent_receipt_id, short(r.parent_receipt_id))],
       ["started", (r) => when(r.started_at)], ["error", (r) => r.error ? h("span", { class: "err" }, text(r.error.code)) : ""]],
      "receipts", "receipt_id", "No receipts match.")(id, q),
    "agent-runs": (id, q) => id ? agentRun(id) : listView("agent-runs", "Agent runs",
      [["q", "id or agent contains"], ["status", "status", ["running", "completed", "max_rounds", "cancelled", "failed", "interrupted"]],
       ["principal", "principal"], ...TIME],
      [["run", (r) => link("run", r.run_id), "id"], ["agent", (r) => r.agent], ["status", (r) => badge(r.status)],
       ["rounds", (r) => String(r.rounds)], ["tool calls", (r) => String(r.tool_calls)],
       ["parent", (r) => link("run", r.parent_run_id, short(r.parent_run_id))], ["model", (r) => text(r.model)],
       ["started", (r) => when(r.started_at)]],
      "agent-runs", "run_id", "No agent runs match.")(id, q),
    "workflow-runs": (id, q) => id ? workflowRun(id) : listView("workflow-runs", "Workflow runs",
      [["q", "id or workflow contains"], ["status", "status", ["running", "blocked", "succeeded", "failed", "cancelled"]], ...TIME],
      [["run", (r) => link("workflow_run", r.run_id), "id"], ["workflow", (r) => r.workflow], ["status", (r) => badge(r.status)],
       ["settled steps", (r) => String(r.steps_settled)], ["uncertain", (r) => (r.uncertain || []).join(", ")],
       ["started", (r) => when(r.started_at)], ["updated", (r) => when(r.updated_at)]],
      "workflow-runs", "run_id", "No workflow runs match.")(id, q),
    attempts: (id, q) => id ? attempt(id) : listView("attempts", "Work attempts",
      [["q", "id contains"], ["status", "state", ["running", "blocked", "verified", "completed", "cancelled", "failed"]],
       ["principal", "principal"], ...TIME],
      [["attempt", (r) => link("attempts", r.attempt_id), "id"], ["state", (r) => badge(r.status)], ["principal", (r) => text(r.principal)],
       ["steps", (r) => r.cursor + " / " + r.steps], ["unknown ops", (r) => String(r.unknown)],
       ["blocked", (r) => text(r.blocked_reason)], ["created", (r) => when(r.created_at)]],
      "attempts", "attempt_id", "No work attempts match.")(id, q),
    tasks: (id, q) => listView("tasks", "MCP tasks",
      [["q", "task or receipt id contains"], ["status", "status", ["working", "input_required", "completed", "failed", "cancelled"]],
       ["tool", "tool"], ["principal", "principal"], ...TIME],
      [["task", (r) => r.task_id, "id"], ["tool", (r) => r.tool], ["status", (r) => badge(r.status)],
       ["receipt", (r) => link("receipt", r.receipt_id)], ["certainty", (r) => r.certainty ? badge(r.certainty) : ""],
       ["result", (r) => r.result_artifact ? h("span", {}, "artifact ", link("artifacts", r.result_artifact), " (" + r.result_size + " bytes)")
         : r.error ? h("span", { class: "err" }, text(r.error.message))
         : r.result ? h("span", { class: "mono" }, text(r.result.structuredContent || r.result.content).slice(0, 300)) : ""],
       ["created", (r) => when(r.created_at)]],
      "tasks", "task_id", "No MCP tasks match.")(id, q),
    conversations: (id, q) => listView("conversations", "Chat conversations",
      [["q", "id or agent contains"], ["principal", "principal"], ...TIME],
      [["conversation", (r) => r.conversation_id, "id"], ["agent", (r) => r.agent], ["thread", (r) => r.thread_id, "id"],
       ["principal", (r) => text(r.principal)], ["issued", (r) => when(r.issued_at)], ["last used", (r) => when(r.used_at)]],
      "conversations", "conversation_id", "No chat conversations match.")(id, q),
  };

  // -- live updates --------------------------------------------------------------------------------
  let pending = null, deferred = false;
  // Redraw for a live update, unless the person is typing into the page (a filter, a resolve form): then once
  // the focus leaves it, so nothing they typed is wiped.
  function liveRender() {
    live.className = "live on";
    const el = document.activeElement;
    if (el && main.contains(el) && ["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName)) {
      if (!deferred) {
        deferred = true;
        el.addEventListener("blur", function () { deferred = false; render(); }, { once: true });
      }
      return;
    }
    render();
  }
  async function follow() {
    for (;;) {
      try {
        const r = await fetch("api/events", { headers });
        if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
        live.className = "live on";
        live.textContent = "live";
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            if (block.startsWith("event: changed")) {
              live.className = "live on flash";
              clearTimeout(pending);
              pending = setTimeout(liveRender, 100);
            }
          }
        }
      } catch (e) { /* the server went away: retry below */ }
      live.className = "live off";
      live.textContent = "offline";
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }

  window.addEventListener("hashchange", render);
  render();
  follow();
})();
