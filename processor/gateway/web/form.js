// The answer form of the inbox and of the decision-link pages: one
// implementation, built from an interrupt's responseSchema. Choices keep
// their JSON types, numbers carry min/max, required fields are marked and
// required, fields start from the tool's arguments where names match, and a
// refusal from the server is shown next to the field it concerns, keeping
// what was typed.
"use strict";
window.InterlockForm = (() => {
  function el(tag, attrs = {}, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k) e.append(k);
    return e;
  }

  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  function kindOf(p) {
    if (Array.isArray(p.enum) && p.enum.length) return "enum";
    const t = Array.isArray(p.type) ? p.type.find((x) => x !== "null") : p.type;
    return ["number", "integer", "boolean", "string"].includes(t) ? t : "json";
  }

  // fits reports whether v suits p: the rule the notifier's example
  // payloads follow too (processor/notifier/render.go).
  function fits(p, v) {
    if (v === undefined) return false;
    switch (kindOf(p)) {
      case "enum": return p.enum.some((e) => same(e, v));
      case "number": return typeof v === "number";
      case "integer": return Number.isInteger(v);
      case "boolean": return typeof v === "boolean";
      case "string": return typeof v === "string";
    }
    const t = Array.isArray(p.type) ? p.type.find((x) => x !== "null") : p.type;
    if (t === "object") return v !== null && typeof v === "object" && !Array.isArray(v);
    if (t === "array") return Array.isArray(v);
    return true;
  }

  function initial(p) {
    switch (kindOf(p)) {
      case "enum": return p.enum[0];
      case "number": case "integer": return typeof p.minimum === "number" ? p.minimum : 0;
      case "boolean": return false;
      case "string": return "";
    }
    return p.type === "array" ? [] : {};
  }

  function describe(p) {
    const parts = [];
    if (p.description) parts.push(p.description);
    const k = kindOf(p);
    if (k === "number" || k === "integer") {
      const what = k === "integer" ? "A whole number" : "A number";
      if (typeof p.minimum === "number" && typeof p.maximum === "number") parts.push(`${what} from ${p.minimum} to ${p.maximum}.`);
      else if (typeof p.minimum === "number") parts.push(`${what}, at least ${p.minimum}.`);
      else if (typeof p.maximum === "number") parts.push(`${what}, at most ${p.maximum}.`);
    }
    if (k === "json") parts.push("As JSON.");
    return parts.join(" ");
  }

  const rules = {
    type: "has the wrong type", enum: "is not one of the choices", const: "is not the allowed value",
    minimum: "is below the minimum", maximum: "is above the maximum", exclusiveMinimum: "is too small",
    exclusiveMaximum: "is too large", minLength: "is too short", maxLength: "is too long",
    pattern: "does not have the expected form", required: "is missing a required field",
    additionalProperties: "has a field that is not allowed", multipleOf: "is not a multiple of the allowed step", format: "does not have the expected format",
  };

  // problems turns a refusal's detail ("at /amount the payload fails
  // "maximum" (schema ...)") into [{field, text}]; field null for the whole
  // answer.
  function problems(detail) {
    const out = [];
    for (const m of String(detail).matchAll(/at (\/\S*) the payload fails "(\w+)"/g)) {
      const seg = m[1].split("/")[1];
      const field = seg ? seg.replace(/~1/g, "/").replace(/~0/g, "~") : null;
      out.push({field, text: (field ? "This value " : "The answer ") + (rules[m[2]] || `fails "${m[2]}"`) + "."});
    }
    return out;
  }

  // build fills box with the fields of schema, starting from values, and
  // returns the form's controls. opts: idPrefix, disabled.
  function build(box, schema, values, opts = {}) {
    const prefix = opts.idPrefix || "answer";
    const fields = [];
    const general = el("p", {class: "error", id: prefix + "-error", role: "alert"});
    box.replaceChildren();
    if (!schema || typeof schema !== "object") {
      box.append(general);
      return controls(fields, general, () => undefined);
    }
    const isObject = schema.type === "object" && schema.properties && typeof schema.properties === "object";
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const entries = isObject ? Object.entries(schema.properties) : [[null, schema]];
    const given = isObject ? (values && typeof values === "object" ? values : {}) : {[""]: values};
    for (const [name, raw] of entries) {
      const p = raw && typeof raw === "object" ? raw : {};
      const req = isObject ? required.has(name) : true;
      const id = prefix + "-" + (name === null ? "answer" : name).replace(/[^A-Za-z0-9_-]/g, "_");
      const v = given[name === null ? "" : name];
      const start = fits(p, v) ? v : (req ? initial(p) : undefined);
      fields.push(field(box, {name, p, req, id, start, disabled: opts.disabled}));
    }
    if (fields.some((f) => f.req) && isObject) box.append(el("p", {class: "muted", text: "* required"}));
    box.append(general);
    return controls(fields, general, () => {
      if (!isObject) return fields[0].read();
      const out = {};
      for (const f of fields) {
        const v = f.read();
        if (v !== undefined) out[f.name] = v;
      }
      return out;
    });
  }

  function field(box, {name, p, req, id, start, disabled}) {
    const kind = kindOf(p);
    const wrap = el("div", {class: "field", "data-name": name === null ? "" : name});
    const labelText = p.title || (name === null ? "Answer" : name);
    const label = el("label", {for: id}, document.createTextNode(labelText));
    if (req) label.append(el("span", {class: "req", "aria-hidden": "true", text: " *"}));
    const hintText = describe(p);
    const hint = hintText ? el("p", {class: "hint", id: id + "-hint", text: hintText}) : null;
    const error = el("p", {class: "error", id: id + "-error"});
    const describedBy = [hint && hint.id, error.id].filter(Boolean).join(" ");
    let input;
    switch (kind) {
      case "enum":
        input = el("select", {id, required: req, "aria-describedby": describedBy});
        if (!req) input.append(el("option", {value: "", text: "(none)"}));
        p.enum.forEach((v, i) => input.append(el("option", {value: String(i), text: typeof v === "string" ? v : JSON.stringify(v)})));
        input.value = start === undefined ? "" : String(p.enum.findIndex((e) => same(e, start)));
        break;
      case "boolean":
        input = el("input", {id, type: "checkbox", "aria-describedby": describedBy});
        input.checked = start === true;
        break;
      case "number": case "integer":
        input = el("input", {id, type: "number", required: req, inputmode: kind === "integer" ? "numeric" : "decimal",
          step: kind === "integer" ? "1" : "any", min: typeof p.minimum === "number" ? p.minimum : undefined,
          max: typeof p.maximum === "number" ? p.maximum : undefined, "aria-describedby": describedBy});
        input.value = start === undefined ? "" : String(start);
        break;
      case "string":
        input = el(p.maxLength > 200 || !p.maxLength && p.format === "textarea" ? "textarea" : "input",
          {id, required: req, minlength: p.minLength, maxlength: p.maxLength,
            pattern: p.pattern, "aria-describedby": describedBy});
        if (input.tagName === "INPUT") input.type = "text";
        input.value = start === undefined ? "" : start;
        break;
      default:
        input = el("textarea", {id, rows: "3", required: req, spellcheck: "false", "aria-describedby": describedBy});
        input.value = start === undefined ? "" : JSON.stringify(start, null, 2);
    }
    input.disabled = !!disabled;
    if (kind === "boolean") {
      label.prepend(input);
      label.classList.add("check");
      wrap.append(label);
    } else {
      wrap.append(label, input);
    }
    if (hint) wrap.append(hint);
    wrap.append(error);
    box.append(wrap);
    const f = {name, req, input, error, kind};
    f.read = () => {
      switch (kind) {
        case "enum": return input.value === "" ? undefined : p.enum[Number(input.value)];
        case "boolean": return input.checked;
        case "number": case "integer": return input.value === "" ? undefined : Number(input.value);
        case "string": return input.value === "" && !req ? undefined : input.value;
      }
      if (input.value.trim() === "") return undefined;
      try { return JSON.parse(input.value); } catch (e) {
        throw Object.assign(new Error("This is not JSON: " + e.message), {field: f});
      }
    };
    return f;
  }

  function controls(fields, general, collect) {
    const show = (f, text) => {
      const target = f ? f.error : general;
      target.textContent = text;
      if (f) {
        f.input.setAttribute("aria-invalid", "true");
      }
    };
    return {
      fields,
      // value returns the answer, or throws after showing why not.
      value() {
        this.clear();
        let first = null;
        for (const f of fields) {
          if (!f.input.checkValidity()) {
            show(f, f.input.validationMessage);
            first = first || f;
          }
        }
        if (first) { first.input.focus(); throw new Error("Correct the marked fields."); }
        try { return collect(); } catch (e) {
          if (e.field) { show(e.field, e.message); e.field.input.focus(); }
          throw e;
        }
      },
      // peek returns the answer as it stands, without checks or messages.
      peek() { try { return collect(); } catch { return undefined; } },
      clear() {
        general.textContent = "";
        for (const f of fields) { f.error.textContent = ""; f.input.removeAttribute("aria-invalid"); }
      },
      // refuse shows a refusal's message: next to each field it names, and
      // in words above the buttons.
      refuse(message) {
        this.clear();
        let focused = false;
        for (const pr of problems(message)) {
          const f = fields.find((x) => (x.name === null && pr.field === null) || x.name === pr.field);
          if (!f) continue;
          show(f, pr.text);
          if (!focused) { f.input.focus(); focused = true; }
        }
        // The fields say what is wrong; without one, the message does.
        general.textContent = focused ? "Not accepted: correct the marked fields." : message;
      },
      disable(on) { for (const f of fields) f.input.disabled = on; },
    };
  }

  // Link pages: a form marked data-answer sends its answer as the payload
  // field.
  function enhance() {
    for (const form of document.querySelectorAll("form[data-answer]")) {
      const box = form.querySelector("[data-fields]");
      const parse = (s) => { try { return s ? JSON.parse(s) : undefined; } catch { return undefined; } };
      const ctl = build(box, parse(box.dataset.schema), parse(box.dataset.values), {idPrefix: "answer"});
      if (box.dataset.error) ctl.refuse(box.dataset.error);
      form.noValidate = true;
      form.addEventListener("submit", (e) => {
        let v;
        try { v = ctl.value(); } catch { e.preventDefault(); return; }
        form.querySelector("input[name=payload]").value = v === undefined ? "" : JSON.stringify(v);
      });
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", enhance); else enhance();

  return {build, problems, el};
})();
