// The web inbox: the interrupts the signed-in approver may see, a header
// line each, the tool's arguments as a table and one answer form (form.js,
// shared with the link pages). Updates arrive as server-sent events; a card
// being filled in is kept as it is, so nothing typed is lost.
"use strict";
(() => {
  const $ = (s, root = document) => root.querySelector(s);
  const {build, el} = window.InterlockForm;
  const api = (path, opts = {}) => fetch(path, {credentials: "same-origin", ...opts,
    headers: {"X-Interlock-Request": "1", "Content-Type": "application/json", ...(opts.headers || {})}});

  const cards = new Map(); // "<run>/<interrupt>" → {item, card, refreshHeader}
  let source = null;
  let me = null;

  function dur(ms) {
    const m = Math.floor(ms / 60000);
    if (m < 1) return "under a minute";
    const h = Math.floor(m / 60);
    return h ? `${h}h${m % 60}m` : `${m}m`;
  }
  const clock = (d) => d.toISOString().slice(11, 16) + " UTC";
  function expires(at) {
    const left = at - Date.now();
    return left > 0 ? `expires in ${dur(left)} (${clock(at)})` : `expired at ${clock(at)}`;
  }
  const mayDecide = (item) => {
    const who = [...(item.approvers || []), ...(item.approverGroups || []).map((g) => "group " + g)];
    return who.length ? who.join(", ") : "anyone";
  };
  const toolOf = (item) => (item.call && item.call.tool) || (item.metadata && item.metadata.tool) || item.toolCallId || item.reason;
  const argsOf = (item) => {
    // A gated call's own arguments (the ones its digest covers) first.
    const a = item.call ? (item.call.arguments || {}) : item.metadata && item.metadata.arguments;
    return a && typeof a === "object" && !Array.isArray(a) ? a : null;
  };
  const show = (v) => (typeof v === "string" ? v : JSON.stringify(v));
  // remaining says what a tally still needs: "1 of 2 approvals; waiting on bob, group finance".
  function remaining(t) {
    let s = `${t.approvals} of ${t.approvalsNeeded} approvals`;
    if (t.denialsNeeded > 1 || t.denials > 0) s += `, ${t.denials} of ${t.denialsNeeded} denials`;
    if (t.waitingOn && t.waitingOn.length) s += "; waiting on " + t.waitingOn.map((w) => w.replace(/^group:/, "group ")).join(", ");
    return s;
  }
  const voteWords = (v) => ({resolved: "approved", cancelled: "denied", withdrawn: "withdrew"})[v.status] || v.status;

  function headline(item) {
    const parts = [toolOf(item), `asked by ${item.agent}`, `may decide: ${mayDecide(item)}`,
      `waiting ${dur(Date.now() - new Date(item.suspendedAt))}`];
    if (item.expiresAt) parts.push(expires(new Date(item.expiresAt)));
    if (item.tally) parts.push(`${item.tally.approvals} of ${item.tally.approvalsNeeded} approvals`);
    return parts.join(" · ");
  }

  function table(caption, rows, attrs = {}) {
    const t = el("table", {class: "kv", ...attrs}, el("caption", {class: "sr-only", text: caption}));
    for (const [k, v] of rows) t.append(el("tr", {}, el("th", {scope: "row", text: k}), el("td", {}, el("code", {text: show(v)}))));
    return t;
  }

  // schemaOf describes the tool's arguments, so editing them uses the same
  // form as answering.
  function schemaOf(args) {
    const properties = {};
    for (const [k, v] of Object.entries(args)) {
      properties[k] = {type: typeof v === "number" ? "number" : typeof v === "boolean" ? "boolean" :
        typeof v === "string" ? "string" : (Array.isArray(v) ? "array" : "object")};
    }
    return {type: "object", properties, required: Object.keys(args)};
  }

  function render(item) {
    const key = item.runId + "/" + item.id;
    const domID = "i-" + key.replace(/[^A-Za-z0-9_-]/g, "_");
    const card = el("article", {class: "card", id: domID, "data-run": item.runId, "data-interrupt": item.id,
      "aria-labelledby": domID + "-title"});
    const details = el("details");
    const head = el("span", {class: "headline"});
    // The votes so far and who is still needed, redrawn on each refresh.
    const votesBox = el("div", {class: "votes", "aria-live": "polite"});
    // mine is the signed-in approver's standing vote, if any; controls
    // locks the form once they voted, unless the policy lets votes change.
    let mine = null;
    let controls = () => {};
    const drawVotes = () => {
      const t = card.item ? card.item.tally : item.tally;
      const votes = (card.item || item).votes || [];
      const last = me ? votes.filter((v) => v.approver === me.identity).pop() : undefined;
      mine = last && last.status !== "withdrawn" ? last : null;
      controls();
      if (!t) { votesBox.replaceChildren(); return; }
      const change = item.policy && item.policy.allowChange;
      votesBox.replaceChildren(el("h3", {text: "Votes"}), el("p", {class: "banner", "data-remaining": "", text: remaining(t)}),
        ...(mine ? [el("p", {"data-you": "", text: `You ${voteWords(mine)} at ${clock(new Date(mine.at))}; ` +
          (change ? "the policy lets you change your vote." : "your vote stands.")})] : []),
        ...(votes.length ? [table("The votes so far", votes.map((v) => [v.approver, `${voteWords(v)} at ${clock(new Date(v.at))}` +
          (item.call && v.callDigest && v.callDigest !== item.call.digest ? " (edited arguments)" : "")]), {"data-votes": ""})] : []));
    };
    const refreshHeader = () => { head.textContent = headline(card.item || item); drawVotes(); };
    details.append(el("summary", {}, el("h2", {id: domID + "-title", text: item.message || "(no message)"}), head));
    const body = el("div", {class: "detail"});
    details.append(body);
    card.append(details);
    body.append(table("About the request", [["Run", item.runId], ["Agent", item.agent], ["Reason", item.reason],
      ...(item.toolCallId ? [["Tool call", item.toolCallId]] : [])]));
    // The run's input, read when the card is first opened.
    const input = el("div", {class: "input"});
    body.append(input);
    details.addEventListener("toggle", async () => {
      if (!details.open || input.dataset.loaded) return;
      input.dataset.loaded = "1";
      const res = await api("/v1/runs/" + encodeURIComponent(item.runId));
      if (!res.ok) return;
      const {run} = await res.json();
      const v = run.input;
      if (v === undefined || v === null) return;
      const rows = typeof v === "object" && !Array.isArray(v) ? Object.entries(v) : [["Input", v]];
      input.append(el("h3", {text: "The run's input"}), table("The run's input", rows));
    });
    const args = argsOf(item);
    if (item.call) body.append(el("p", {class: "muted"}, document.createTextNode(`The call: ${item.call.tool}, digest `),
      el("code", {class: "digest", text: item.call.digest}),
      document.createTextNode(". Your approval counts for exactly these arguments.")));
    if (args) body.append(el("h3", {text: "Arguments"}), table("The tool's arguments", Object.entries(args), {"data-arguments": ""}));
    body.append(votesBox);
    refreshHeader();
    const disabled = !item.canDecide;
    if (item.refusal === "requester_excluded") {
      body.append(el("p", {class: "banner", text: "You started this run, and its policy does not let the person who started it vote. " +
        "You may see it; the others decide."}));
    } else if (disabled) body.append(el("p", {class: "banner", text: `You may see this, but only ${mayDecide(item)} may decide it.`}));

    const form = el("form", {"aria-label": "Answer: " + (item.message || item.id), novalidate: true});
    const fieldsBox = el("div");
    let answer = build(fieldsBox, item.responseSchema, args, {idPrefix: domID + "-f", disabled});
    const diff = el("ul", {class: "diff", "aria-live": "polite"});
    let editing = false;
    const comment = el("input", {id: domID + "-comment", autocomplete: "off"});
    comment.disabled = disabled;
    const approve = el("button", {class: "approve", type: "submit", text: "Approve"});
    const edit = el("button", {class: "secondary", type: "button", text: "Edit arguments"});
    const deny = el("button", {class: "deny", type: "button", text: "Deny…"});
    for (const b of [approve, edit, deny]) b.disabled = disabled;
    const actions = el("div", {class: "actions"}, approve, args ? edit : null, deny);
    form.append(fieldsBox, diff, el("label", {for: comment.id, text: "Comment (optional)"}), comment, actions);
    body.append(form);

    // showDiff lists what the edits change; it redraws only when that
    // changes, so a click that ends an edit lands where it began.
    const showDiff = () => {
      const items = [];
      const now = editing ? answer.peek() : undefined;
      if (now) {
        for (const k of new Set([...Object.keys(args), ...Object.keys(now)])) {
          if (JSON.stringify(args[k]) === JSON.stringify(now[k])) continue;
          items.push([k, k in args ? show(args[k]) : "(none)", k in now ? show(now[k]) : "(removed)"]);
        }
      }
      const key = JSON.stringify([editing, items]);
      if (diff.dataset.key === key) return;
      diff.dataset.key = key;
      diff.replaceChildren(...items.map(([k, was, is]) => el("li", {}, document.createTextNode(k + ": "), el("del", {text: was}),
        document.createTextNode(" → "), el("ins", {text: is}))));
      if (editing && !items.length) diff.append(el("li", {text: "No changes from what the agent proposed."}));
    };
    fieldsBox.addEventListener("input", showDiff);
    fieldsBox.addEventListener("change", showDiff);
    edit.onclick = () => {
      editing = !editing;
      answer = editing ? build(fieldsBox, schemaOf(args), args, {idPrefix: domID + "-e"}) :
        build(fieldsBox, item.responseSchema, args, {idPrefix: domID + "-f"});
      edit.textContent = editing ? "Back to the answer" : "Edit arguments";
      approve.textContent = editing ? "Approve with these arguments" : "Approve";
      showDiff();
      const first = $("input,select,textarea", fieldsBox);
      if (first) first.focus();
    };

    form.onsubmit = async (e) => {
      e.preventDefault();
      let payload;
      try { payload = answer.value(); } catch { return; }
      // A gated call: the approval is bound to the digest shown; edited
      // arguments approve the edited call (its own digest).
      if (item.call) {
        const b = editing ? {status: "resolved", arguments: payload, comment: comment.value} :
          {status: "resolved", callDigest: item.call.digest, comment: comment.value, payload};
        await decide(item, card, b, answer, approve);
        return;
      }
      await decide(item, card, {status: "resolved", payload, comment: comment.value}, answer, approve);
    };

    // Deny asks for a reason and a confirmation.
    const reasonID = domID + "-reason";
    const reason = el("textarea", {id: reasonID, rows: "2", required: true, "aria-describedby": reasonID + "-error"});
    const reasonError = el("p", {class: "error", id: reasonID + "-error"});
    const confirmDeny = el("button", {class: "deny", type: "button", text: "Deny"});
    const keep = el("button", {class: "secondary", type: "button", text: "Keep waiting"});
    const confirm = el("div", {class: "confirm", role: "group", "aria-label": "Confirm deny"},
      el("p", {text: "Deny this request? The agent receives a cancellation."}),
      el("label", {for: reasonID}, document.createTextNode("Reason"), el("span", {class: "req", "aria-hidden": "true", text: " *"})),
      reason, reasonError, el("div", {class: "actions"}, confirmDeny, keep));
    confirm.hidden = true;
    body.append(confirm);
    deny.onclick = () => { confirm.hidden = false; reason.focus(); };
    keep.onclick = () => { confirm.hidden = true; deny.focus(); };
    confirmDeny.onclick = async () => {
      reasonError.textContent = "";
      reason.removeAttribute("aria-invalid");
      if (!reason.value.trim()) {
        reasonError.textContent = "Say why you deny it.";
        reason.setAttribute("aria-invalid", "true");
        reason.focus();
        return;
      }
      await decide(item, card, {status: "cancelled", comment: reason.value.trim(),
        ...(item.call ? {callDigest: item.call.digest} : {})}, answer, confirmDeny);
    };
    // Once the approver voted, the form waits (a vote counts once) unless
    // the policy lets votes change.
    controls = () => {
      const locked = disabled || (mine !== null && !(item.policy && item.policy.allowChange));
      for (const b of [approve, edit, deny, confirmDeny]) b.disabled = locked;
      comment.disabled = locked;
      if (locked) confirm.hidden = true;
    };
    controls();
    const c = {item, card, details, refreshHeader};
    card.item = item;
    return c;
  }

  async function decide(item, card, body, answer, button) {
    if (body.payload === undefined) delete body.payload;
    if (!body.comment) delete body.comment;
    button.disabled = true;
    let res, out;
    try {
      res = await api(`/v1/runs/${encodeURIComponent(item.runId)}/interrupts/${encodeURIComponent(item.id)}/decision`,
        {method: "POST", body: JSON.stringify(body)});
      out = await res.json();
    } catch (e) {
      button.disabled = false;
      answer.refuse("The gateway did not answer (" + e.message + "). Send it again: it counts once.");
      return;
    }
    if (!res.ok) {
      // The card stays as it was, with the reason next to its field.
      button.disabled = false;
      answer.refuse(words(out.code, out.message));
      if (out.code === "call_mismatch") refresh();
      return;
    }
    const verdict = out.verdict || {};
    if (verdict.outcome === "vote_recorded") {
      // The vote counts; the request still waits for others. The button
      // stays as the refresh leaves it: locked once one voted, unless the
      // policy lets votes change (a refresh an event started may have
      // locked it already).
      notice(`Your vote is recorded: ${item.message || item.id} still needs ` +
        (verdict.tally ? remaining(verdict.tally) : verdict.detail) + ".", item);
      refresh();
      return;
    }
    const verb = body.status === "resolved" ? "Approved" : "Denied";
    notice(`${verb}: ${item.message || item.id}.`, item);
    remove(item.runId + "/" + item.id);
    refresh();
  }

  function words(code, message) {
    switch (code) {
      case "schema_mismatch": return "The answer does not fit what the agent asked for: " + message;
      case "not_allowed": return "You may not decide this: " + message;
      case "already_decided": return "Someone decided this already: " + message;
      case "expired": return "This request has expired: " + message;
      case "rate_limited": return "Too many refused attempts; wait a moment. " + message;
      // The message names two digests: words are enough.
      case "call_mismatch": return "The call changed since you saw it; your vote was not counted. Check the arguments shown now and decide again.";
      case "already_voted": return "You voted on this already; your first vote stands. " + message;
      case "requester_excluded": return "You started this run; its policy does not let you vote on it.";
      case "vote_limit": return "This request takes no more open votes now. " + message;
    }
    return message || code;
  }

  function notice(text, item) {
    const n = $("#notice");
    n.replaceChildren(document.createTextNode(text + " "));
    if (item) n.append(el("a", {href: `#${item.runId}/${item.id}`, text: "See the run"}));
    n.hidden = false;
  }

  function remove(key) {
    const c = cards.get(key);
    if (c) { c.card.remove(); cards.delete(key); }
  }

  function order() {
    const agent = $("#filter-agent").value;
    const sort = $("#sort").value;
    const all = [...cards.values()];
    const t = (c, f) => (c.item[f] ? new Date(c.item[f]).getTime() : Infinity);
    all.sort((a, b) => sort === "expiring" ? t(a, "expiresAt") - t(b, "expiresAt") :
      sort === "newest" ? t(b, "suspendedAt") - t(a, "suspendedAt") : t(a, "suspendedAt") - t(b, "suspendedAt"));
    let shown = 0;
    const list = $("#list");
    for (const c of all) {
      c.card.hidden = agent !== "" && c.item.agent !== agent;
      if (!c.card.hidden) shown++;
    }
    // Cards move only when the order changes (what is typed in them stays),
    // and the focus stays where it was.
    if (all.some((c, i) => list.children[i] !== c.card) || list.children.length !== all.length) {
      const focused = document.activeElement;
      list.append(...all.map((c) => c.card));
      if (focused && focused !== document.activeElement && document.contains(focused)) focused.focus();
    }
    const total = cards.size;
    $("#count").textContent = agent ? `${shown} of ${total} waiting (agent ${agent})` : `${total} waiting`;
    $("#empty").hidden = total > 0;
    $("#controls").hidden = total === 0;
  }

  async function refresh() {
    const res = await api("/v1/interrupts?limit=500");
    if (res.status === 401) { signedOut(); return false; }
    const {interrupts} = await res.json();
    $("#login").hidden = true;
    const seen = new Set();
    for (const item of interrupts) {
      const key = item.runId + "/" + item.id;
      seen.add(key);
      const c = cards.get(key);
      if (c) { c.item = item; c.card.item = item; c.refreshHeader(); } else cards.set(key, render(item));
    }
    for (const key of [...cards.keys()]) if (!seen.has(key)) remove(key);
    const agents = [...new Set(interrupts.map((i) => i.agent))].sort();
    const pick = $("#filter-agent");
    const was = pick.value;
    pick.replaceChildren(el("option", {value: "", text: "All agents"}), ...agents.map((a) => el("option", {value: a, text: a})));
    pick.value = agents.includes(was) ? was : "";
    order();
    loaded = true;
    openHash();
    return true;
  }

  // openHash opens, scrolls to and highlights the card #<run>/<interrupt>
  // names; an interrupt no longer waiting shows its run instead. Before the
  // list has loaded it waits: the load calls it again.
  let opened = "", shownRun = "", loaded = false;
  async function openHash() {
    const key = decodeURIComponent(location.hash.slice(1));
    if (!key || !me) return;
    const c = cards.get(key);
    const view = $("#run-view");
    if (c) {
      if (opened === key) return;
      opened = key;
      view.replaceChildren();
      for (const o of cards.values()) o.card.classList.remove("highlight");
      c.card.hidden = false;
      c.details.open = true;
      c.card.classList.add("highlight");
      c.card.scrollIntoView({block: "start"});
      $("summary", c.card).focus();
      return;
    }
    if (!loaded || shownRun === key) return;
    shownRun = key;
    view.replaceChildren();
    const [run, id] = key.split("/");
    const res = await api("/v1/runs/" + encodeURIComponent(run));
    const box = el("section", {class: "card highlight", "aria-label": "Run " + run});
    if (!res.ok) {
      const out = await res.json().catch(() => ({}));
      box.append(el("h2", {text: "Run " + run}), el("p", {text: out.message || "This run cannot be shown."}));
    } else {
      const {run: rec} = await res.json();
      const st = (rec.interrupts || []).find((i) => i.id === id);
      box.append(el("h2", {text: st && st.message ? st.message : "Run " + run}),
        table("The run", [["Run", rec.runId], ["Agent", rec.agent], ["Status", rec.status],
          ...(st && st.decision ? [["Decision", st.decision.status], ["By", st.decision.approver || (st.withheld ? "not shown to you" : "anonymous")],
            ...(st.decision.comment ? [["Comment", st.decision.comment]] : []),
            ...(st.decision.payload !== undefined ? [["Answer", st.decision.payload]] : [])] : [])]));
    }
    const back = el("a", {href: "#", class: "button secondary", text: "Back to the list"});
    back.onclick = () => { view.replaceChildren(); shownRun = ""; };
    box.append(back);
    view.append(box);
    box.scrollIntoView({block: "start"});
  }

  function signedOut() {
    me = null;
    loaded = false;
    opened = shownRun = "";
    if (source) { source.close(); source = null; }
    for (const key of [...cards.keys()]) remove(key);
    $("#login").hidden = false;
    $("#session").hidden = true;
    $("#controls").hidden = true;
    $("#empty").hidden = true;
    $("#notice").hidden = true;
    $("#live").textContent = "";
  }

  function stream() {
    source = new EventSource("/v1/stream");
    source.onopen = () => { $("#live").textContent = "● live"; };
    source.onerror = () => { $("#live").textContent = "reconnecting…"; };
    source.onmessage = () => refresh();
  }

  async function start() {
    const res = await api("/v1/me");
    if (!res.ok) { signedOut(); return; }
    me = await res.json();
    $("#who").textContent = "Signed in as " + me.identity;
    $("#session").hidden = false;
    if (await refresh()) stream();
  }

  $("#login-form").onsubmit = async (e) => {
    e.preventDefault();
    $("#login-error").textContent = "";
    const res = await fetch("/inbox/login", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Interlock-Request": "1"}, body: JSON.stringify({token: $("#token").value})});
    if (!res.ok) { $("#login-error").textContent = "That token is not valid."; $("#token").focus(); return; }
    $("#token").value = "";
    await start();
  };
  $("#logout").onclick = async () => {
    // Only a logout the server carried out shows the login form: on a
    // failure the session still works, and the page must not say otherwise.
    const res = await api("/inbox/logout", {method: "POST"}).catch(() => null);
    if (!res || !res.ok) {
      const out = res ? await res.json().catch(() => ({})) : {};
      const why = out.message || (res ? "the server answered " + res.status : "the server could not be reached");
      notice("Not logged out: " + why + ". Try again.");
      return;
    }
    signedOut();
    $("#token").focus();
  };
  $("#filter-agent").onchange = order;
  $("#sort").onchange = order;
  window.addEventListener("hashchange", () => { opened = shownRun = ""; openHash(); });
  setInterval(() => { for (const c of cards.values()) c.refreshHeader(); }, 30000);
  start();
})();
