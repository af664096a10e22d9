/* transformerbook in-page explorers: plain scripts, no library, no network.
 *
 * Each `<div class="tb-explorer" data-explorer="NAME">` placed by the `{explorer}` directive is filled from
 * `window.tbExplorerData[NAME]`, which `_static/explorers/data/NAME.js` sets (data computed at build time by
 * `tools/explorers.py` with the book's own functions). Every control is a native, labelled <input>/<select>;
 * the numbers are text (tables), the bars and heatmaps only repeat them visually.
 */
(function () {
  "use strict";
  let uid = 0;

  // ----------------------------------------------------------------------------------------- helpers
  function el(tag, attrs, ...children) {
    const ns = ["svg", "rect", "circle", "line", "text", "g", "title", "path"].includes(tag)
      ? "http://www.w3.org/2000/svg" : null;
    const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
    return node;
  }
  const fmt = (x, d = 3) => Number(x).toFixed(d);
  const sci = (x, d = 3) => Number(x).toPrecision(d).replace(/e\+?/, "e");
  const show = (s) => s.replace(/ /g, "␣").replace(/\n/g, "⏎");

  /** A labelled control: `<label for>` + input/select + <output> showing its value. */
  function control(root, spec) {
    const id = `tbx-${++uid}`;
    let input;
    if (spec.options) {
      input = el("select", { id, name: spec.name });
      spec.options.forEach(([value, label]) => input.append(el("option", { value, text: label })));
      input.value = String(spec.value);
    } else {
      input = el("input", { id, name: spec.name, type: spec.type || "range", min: spec.min, max: spec.max,
                             step: spec.step, value: spec.value });
    }
    const out = el("output", { for: id, "aria-hidden": spec.options ? "true" : null });
    const wrap = el("div", { class: "tbx-control" }, el("label", { for: id, text: spec.label }), input, out);
    root.querySelector(".tbx-controls").append(wrap);
    const update = () => {
      if (!spec.options) {
        const text = spec.format ? spec.format(Number(input.value)) : input.value;
        out.textContent = text;
        input.setAttribute("aria-valuetext", text);
      }
    };
    input.addEventListener("input", update);
    update();
    return input;
  }

  /** The explorer's parts; returns the view (redrawn on every change). `status(root, text)` announces a short
   *  summary to screen readers (one polite live region, not the whole redrawn view). */
  function frame(root, title, note) {
    root.innerHTML = "";
    root.append(el("p", { class: "tbx-title", text: title }),
                el("div", { class: "tbx-controls" }),
                el("p", { class: "tbx-status", role: "status", "aria-live": "polite" }),
                el("div", { class: "tbx-view" }),
                note ? el("p", { class: "tbx-note", text: note }) : null);
    return root.querySelector(".tbx-view");
  }
  function status(root, text) {
    root.querySelector(".tbx-status").textContent = text;
  }

  function barCell(p, cls) {
    return el("span", { class: `tbx-bar ${cls}`, style: `width:${Math.max(0, Math.min(1, p)) * 100}%` });
  }

  function softmax(xs) {
    const m = Math.max(...xs);
    if (m === -Infinity) return xs.map(() => 0);
    const e = xs.map((x) => (x === -Infinity ? 0 : Math.exp(x - m)));
    const s = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / s);
  }

  // Red-white-blue for [-1, 1] (matplotlib's RdBu, approximately), viridis-like for [0, 1].
  function rdbu(v) {
    const t = Math.max(-1, Math.min(1, v));
    const a = t < 0 ? [178, 24, 43] : [33, 102, 172];
    const f = Math.abs(t);
    return `rgb(${a.map((c) => Math.round(247 + (c - 247) * f)).join(",")})`;
  }
  function heat(v) {
    const t = Math.max(0, Math.min(1, v));
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const x = t * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x)), f = x - i;
    return `rgb(${stops[i].map((c, j) => Math.round(c + (stops[i + 1][j] - c) * f)).join(",")})`;
  }

  // ------------------------------------------------------------ 07: sampling (transformerbook.sampling)
  /** `warp_logits`: temperature, then top-k (ties with the k-th kept), then top-p (Hugging Face's TopPLogitsWarper). */
  function warpLogits(logits, temperature, topK, topP) {
    let l = logits.map((x) => x / temperature);
    if (topK) {
      const k = Math.min(topK, l.length);
      const kth = [...l].sort((a, b) => b - a)[k - 1];
      l = l.map((x) => (x < kth ? -Infinity : x));
    }
    if (topP !== null && topP !== undefined) {
      const order = l.map((x, i) => i).sort((a, b) => l[a] - l[b]); // least probable first
      const probs = softmax(order.map((i) => l[i]));
      let cum = 0;
      const out = [...l];
      order.forEach((idx, j) => {
        cum += probs[j];
        if (cum <= 1 - topP && j < order.length - 1) out[idx] = -Infinity;
      });
      l = out;
    }
    return l;
  }

  function sampling(root, data) {
    const view = frame(root, "Explorer: reshape the next-character distribution",
      `Logits from ${data.model}, computed when the site was built; the page applies temperature, then top-k, ` +
      "then top-p, as transformerbook.sampling.warp_logits does.");
    const prompt = control(root, { name: "prompt", label: "Prompt", value: 0,
      options: data.prompts.map((p, i) => [i, "…" + show(p.prompt.slice(-28))]) });
    const temp = control(root, { name: "temperature", label: "Temperature τ", min: 0.05, max: 3, step: 0.05,
      value: 1, format: (v) => fmt(v, 2) });
    const topk = control(root, { name: "top_k", label: "Top-k (0 = off)", min: 0, max: data.tokens.length, step: 1,
      value: 0, format: (v) => (v ? String(v) : "off") });
    const topp = control(root, { name: "top_p", label: "Top-p", min: 0.01, max: 1, step: 0.01, value: 1,
      format: (v) => fmt(v, 2) });
    const nShow = 20;
    function draw() {
      const logits = data.prompts[Number(prompt.value)].logits;
      const base = softmax(logits);
      const warped = softmax(warpLogits(logits, Number(temp.value), Number(topk.value) || null, Number(topp.value)));
      const idx = base.map((p, i) => i).sort((a, b) => base[b] - base[a]).slice(0, nShow);
      const kept = warped.filter((p) => p > 0).length;
      status(root, `${kept} of ${data.tokens.length} characters can be sampled; the most probable, ` +
        `“${show(data.tokens[idx[0]])}”, has probability ${fmt(warped[idx[0]])}.`);
      const rows = idx.map((i) => el("tr", { "data-token-id": i },
        el("th", { scope: "row", class: "tbx-token", text: show(data.tokens[i]) }),
        el("td", { class: "tbx-num p-model", text: fmt(base[i]) }),
        el("td", { class: "tbx-num p-warped", text: fmt(warped[i]) }),
        el("td", { class: "tbx-bars", "aria-hidden": "true" }, barCell(base[i], "tbx-grey"),
           barCell(warped[i], "tbx-blue"))));
      view.replaceChildren(
        el("p", { class: "tbx-summary" },
           `After “${show(data.prompts[Number(prompt.value)].prompt.slice(-24))}”: `,
           el("strong", { class: "tbx-kept", text: String(kept) }),
           ` of ${data.tokens.length} characters can be sampled.`),
        el("table", { tabindex: 0, class: "tbx-table" },
           el("caption", { text: `The ${nShow} most probable next characters` }),
           el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "character" }),
              el("th", { scope: "col", text: "model (τ = 1)" }), el("th", { scope: "col", text: "after warping" }),
              el("th", { scope: "col", text: "", "aria-hidden": "true" }))),
           el("tbody", {}, rows)));
    }
    [prompt, temp, topk, topp].forEach((c) => c.addEventListener("input", draw));
    draw();
  }

  // ------------------------------------------------------------------------ 03: attention per head
  function attention(root, data) {
    const view = frame(root, "Explorer: one query at a time, in a trained model",
      `Attention weights of ${data.model} on a passage, computed when the site was built.`);
    const T = data.tokens.length;
    const layer = control(root, { name: "layer", label: "Layer", value: 0,
      options: [...Array(data.n_layers).keys()].map((l) => [l, `layer ${l}`]) });
    const head = control(root, { name: "head", label: "Head", value: 0,
      options: [...Array(data.n_heads).keys()].map((h) => [h, `head ${h}`]) });
    const query = control(root, { name: "query", label: "Query position", min: 0, max: T - 1, step: 1,
      value: Math.min(T - 1, 20), format: (v) => `${v} (“${show(data.tokens[v])}”)` });
    function draw() {
      const q = Number(query.value);
      const w = data.weights[Number(layer.value)][Number(head.value)];
      const row = w[q];
      const text = el("p", { class: "tbx-passage" }, data.tokens.map((t, j) => el("span", {
        class: "tbx-char" + (j === q ? " tbx-query" : "") + (j > q ? " tbx-future" : ""),
        style: j <= q ? `background:rgba(31,119,180,${row[j]})` : null,
        title: j <= q ? `${show(t)} (${j}): ${fmt(row[j])}` : `${show(t)} (${j}): future, masked`,
        text: t === "\n" ? "⏎" : t })));
      const top = row.map((p, j) => j).sort((a, b) => row[b] - row[a]).slice(0, 5);
      status(root, `Layer ${layer.value}, head ${head.value}, query ${q} (“${show(data.tokens[q])}”): largest weight ` +
        `${fmt(row[top[0]])} on “${show(data.tokens[top[0]])}” at position ${top[0]}.`);
      const size = 4, svg = el("svg", { class: "tbx-heatmap", viewBox: `0 0 ${T * size} ${T * size}`,
        role: "img", "aria-label": `all ${T} queries of this head (rows) over the keys (columns)` });
      w.forEach((r, i) => r.forEach((p, j) => svg.append(el("rect", { x: j * size, y: i * size, width: size,
        height: size, fill: heat(p) }))));
      svg.append(el("rect", { x: 0, y: q * size, width: T * size, height: size, fill: "none", stroke: "#d62728",
        "stroke-width": 1 }));
      view.replaceChildren(text, el("div", { class: "tbx-row" },
        el("table", { tabindex: 0, class: "tbx-table tbx-top" },
           el("caption", { text: `Largest weights of query ${q} (rows sum to 1 over keys 0…${q})` }),
           el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "key" }),
              el("th", { scope: "col", text: "position" }), el("th", { scope: "col", text: "weight" }))),
           el("tbody", {}, top.map((j) => el("tr", { "data-key": j },
              el("th", { scope: "row", class: "tbx-token", text: show(data.tokens[j]) }),
              el("td", { class: "tbx-num", text: String(j) }),
              el("td", { class: "tbx-num tbx-weight", text: fmt(row[j]) }))))),
        el("figure", { class: "tbx-fig" }, svg, el("figcaption", { text: "the whole head: query rows, key columns" }))));
    }
    [layer, head, query].forEach((c) => c.addEventListener("input", draw));
    draw();
  }

  // ------------------------------------------------------------- 05: sinusoids and their rotation
  function positional(root, data) {
    const view = frame(root, "Explorer: positions on clocks, and the rotation M_k",
      `p_t from sinusoidal_positional_encoding(${data.T}, ${data.d_model}); M_k from position_rotation_matrix(k, ` +
      `${data.d_model}), both computed when the site was built.`);
    const half = data.d_model / 2;
    const t = control(root, { name: "t", label: "Position t", min: 0, max: data.T - 1 - data.max_offset, step: 1,
      value: 10 });
    const k = control(root, { name: "k", label: "Offset k", min: 0, max: data.max_offset, step: 1, value: 5 });
    const pair = control(root, { name: "pair", label: "Dimension pair i", min: 0, max: half - 1, step: 1, value: 0,
      format: (v) => `${v} (columns ${2 * v}, ${2 * v + 1})` });
    // the heatmap does not depend on the controls: draw it once
    const cell = 3, hm = el("canvas", { width: data.T * cell, height: data.d_model * cell, class: "tbx-canvas",
      role: "img", "aria-label": `heatmap of the encodings: ${data.T} positions across, ${data.d_model} dimensions down` });
    const ctx = hm.getContext("2d");
    data.encodings.forEach((p, tt) => p.forEach((v, c) => { ctx.fillStyle = rdbu(v); ctx.fillRect(tt * cell, c * cell, cell, cell); }));
    const marks = el("svg", { class: "tbx-marks", viewBox: `0 0 ${data.T * cell} ${data.d_model * cell}`,
      preserveAspectRatio: "none", "aria-hidden": "true" });
    function draw() {
      const tv = Number(t.value), kv = Number(k.value), i = Number(pair.value);
      const p = data.encodings[tv], target = data.encodings[tv + kv];
      const blocks = data.rotation_blocks[kv];
      const rotated = [];
      blocks.forEach((B, b) => {  // M_k p_t, block by block: [[c, s], [-s, c]] @ [p_2b, p_2b+1]
        rotated.push(B[0][0] * p[2 * b] + B[0][1] * p[2 * b + 1], B[1][0] * p[2 * b] + B[1][1] * p[2 * b + 1]);
      });
      const maxDiff = Math.max(...rotated.map((v, c) => Math.abs(v - target[c])));
      status(root, `t = ${tv}, k = ${kv}, pair ${i}: M_k p_t = (${fmt(rotated[2 * i])}, ${fmt(rotated[2 * i + 1])}), ` +
        `p_(t+k) = (${fmt(target[2 * i])}, ${fmt(target[2 * i + 1])}).`);
      const omega = Math.pow(data.base, -2 * i / data.d_model);
      const R = 60, cx = 75, cy = 75;
      const pt = (x, y) => [cx + R * x, cy - R * y];
      const [ax, ay] = pt(p[2 * i], p[2 * i + 1]), [bx, by] = pt(rotated[2 * i], rotated[2 * i + 1]);
      const [tx, ty] = pt(target[2 * i], target[2 * i + 1]);
      const circle = el("svg", { class: "tbx-circle", viewBox: "0 0 150 150", role: "img",
        "aria-label": `pair ${i} on the unit circle: p_t and p_(t+k) = M_k p_t` },
        el("circle", { cx, cy, r: R, fill: "none", stroke: "#999" }),
        el("line", { x1: cx - R - 5, y1: cy, x2: cx + R + 5, y2: cy, stroke: "#ddd" }),
        el("line", { x1: cx, y1: cy - R - 5, x2: cx, y2: cy + R + 5, stroke: "#ddd" }),
        el("line", { x1: cx, y1: cy, x2: ax, y2: ay, stroke: "#1f77b4", "stroke-width": 2 }),
        el("line", { x1: cx, y1: cy, x2: bx, y2: by, stroke: "#d62728", "stroke-width": 2 }),
        el("circle", { cx: tx, cy: ty, r: 6, fill: "none", stroke: "#2ca02c", "stroke-width": 2 }),
        el("circle", { cx: ax, cy: ay, r: 3, fill: "#1f77b4" }), el("circle", { cx: bx, cy: by, r: 3, fill: "#d62728" }));
      marks.replaceChildren(
        el("rect", { x: tv * cell, y: 0, width: cell, height: data.d_model * cell, fill: "none", stroke: "#1f77b4", "stroke-width": 1.5 }),
        el("rect", { x: (tv + kv) * cell, y: 0, width: cell, height: data.d_model * cell, fill: "none", stroke: "#2ca02c", "stroke-width": 1.5 }),
        el("rect", { x: 0, y: 2 * i * cell, width: data.T * cell, height: 2 * cell, fill: "none", stroke: "#000", "stroke-width": 1 }));
      const row = (label, v, cls) => el("tr", { class: cls }, el("th", { scope: "row", text: label }),
        el("td", { class: "tbx-num", text: fmt(v[2 * i]) }), el("td", { class: "tbx-num", text: fmt(v[2 * i + 1]) }));
      view.replaceChildren(
        el("div", { class: "tbx-heatwrap" }, hm, marks),
        el("div", { class: "tbx-row" },
          el("figure", { class: "tbx-fig" }, circle, el("figcaption", {},
            "blue: p_t, red: M_k p_t, green ring: p_(t+k)")),
          el("div", {},
            el("table", { tabindex: 0, class: "tbx-table tbx-pos" },
              el("caption", { text: `Pair ${i}: ω = ${sci(omega)}, one turn every ${sci(2 * Math.PI / omega)} positions; it turns by ωk = ${fmt(omega * kv)} rad` }),
              el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "vector" }),
                el("th", { scope: "col", text: `sin (column ${2 * i})` }), el("th", { scope: "col", text: `cos (column ${2 * i + 1})` }))),
              el("tbody", {}, row(`p_${tv}`, p, "tbx-pt"), row(`M_${kv} p_${tv}`, rotated, "tbx-rot"),
                row(`p_${tv + kv}`, target, "tbx-target"))),
            el("p", { class: "tbx-summary" }, `Largest |M_k p_t − p_(t+k)| over all ${data.d_model} dimensions: `,
              el("strong", { class: "tbx-maxdiff", text: sci(maxDiff, 2) }), " (float32 rounding)."))));
    }
    [t, k, pair].forEach((c) => c.addEventListener("input", draw));
    draw();
  }

  // -------------------------------------------------------------------------------- 05a: BPE merges
  function bpe(root, data) {
    const view = frame(root, "Explorer: BPE merges, one step at a time",
      `BPETokenizer trained on this passage (${data.merges.length} merges, GPT-2's pre-tokenizer), run when the ` +
      "site was built; each step re-encodes the passage with the first merges only.");
    const steps = control(root, { name: "merges", label: "Merges applied", min: 0, max: data.merges.length, step: 1,
      value: 0 });
    function draw() {
      const s = Number(steps.value), toks = data.steps[s];
      const chips = el("p", { class: "tbx-passage tbx-bpe" }, toks.map((t, j) => el("span", {
        class: `tbx-chip tbx-c${j % 2}` + ([...t].length > 1 ? " tbx-merged" : ""), text: show(t) })));
      const recent = data.merges.slice(Math.max(0, s - 8), s).reverse();
      status(root, `${s} merges: ${toks.length} tokens` + (s ? `; the latest merge makes “${show(data.merges[s - 1].token)}”.` : "."));
      view.replaceChildren(
        el("p", { class: "tbx-summary" }, `After ${s} merge${s === 1 ? "" : "s"}: `,
           el("strong", { class: "tbx-count", text: String(toks.length) }),
           ` tokens for ${data.n_bytes} bytes (${fmt(data.n_bytes / toks.length, 2)} bytes per token).`),
        chips,
        el("table", { tabindex: 0, class: "tbx-table" }, el("caption", { text: s ? "The latest merges (newest first)" : "No merge yet: one token per byte" }),
          el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "step" }), el("th", { scope: "col", text: "pair" }),
             el("th", { scope: "col", text: "new token" }), el("th", { scope: "col", text: "id" }))),
          el("tbody", {}, recent.map((m) => el("tr", {},
            el("td", { class: "tbx-num", text: String(m.id - 255) }),
            el("td", { class: "tbx-token", text: `${show(m.pair[0])} + ${show(m.pair[1])}` }),
            el("td", { class: "tbx-token tbx-newtoken", text: show(m.token) }),
            el("td", { class: "tbx-num", text: String(m.id) }))))));
    }
    steps.addEventListener("input", draw);
    draw();
  }

  // ---------------------------------------------------------------------------------- 10: MoE routing
  const EXPERT_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
  function moe(root, data) {
    const view = frame(root, "Explorer: which experts does each token go to?",
      `Routers of ${data.model}, run on the passage when the site was built (TopKRouter: softmax, top-${data.top_k}, renormalised).`);
    const T = data.tokens.length, E = data.n_experts;
    const layer = control(root, { name: "layer", label: "Layer", value: 0,
      options: data.layers.map((l, i) => [i, `layer ${i}`]) });
    const token = control(root, { name: "token", label: "Token position", min: 0, max: T - 1, step: 1, value: 6,
      format: (v) => `${v} (“${show(data.tokens[v])}”)` });
    function draw() {
      const L = data.layers[Number(layer.value)], q = Number(token.value);
      const load = Array(E).fill(0);
      L.experts.forEach((ks) => ks.forEach((e) => load[e]++));
      const text = el("p", { class: "tbx-passage" }, data.tokens.map((t, j) => el("span", {
        class: "tbx-char" + (j === q ? " tbx-query" : ""),
        style: `border-bottom:4px solid ${EXPERT_COLORS[L.experts[j][0] % 8]}`,
        title: `${show(t)}: experts ${L.experts[j].join(", ")}`, text: t === "\n" ? "⏎" : t })));
      const size = 8, left = 16, svg = el("svg", { class: "tbx-heatmap tbx-wide", viewBox: `${-left} 0 ${T * size + left} ${E * size}`,
        role: "img", "aria-label": `router probabilities: ${T} tokens across, ${E} experts down; dots mark the chosen experts` });
      L.probs.forEach((r, j) => r.forEach((p, e) => svg.append(el("rect", { x: j * size, y: e * size, width: size,
        height: size, fill: heat(p) }))));
      L.experts.forEach((ks, j) => ks.forEach((e) => svg.append(el("circle", { cx: j * size + size / 2,
        cy: e * size + size / 2, r: 1.6, fill: "#fff" }))));
      svg.append(el("rect", { x: q * size, y: 0, width: size, height: E * size, fill: "none", stroke: "#d62728" }));
      for (let e = 0; e < E; e++) svg.append(el("text", { x: -2, y: e * size + size - 2, "text-anchor": "end", class: "tbx-axis", text: `e${e}` }));
      const chosen = new Map(L.experts[q].map((e, r) => [e, L.weights[q][r]]));
      status(root, `Layer ${layer.value}, token ${q} (“${show(data.tokens[q])}”): experts ` +
        L.experts[q].map((e, r) => `${e} (weight ${fmt(L.weights[q][r])})`).join(" and ") + ".");
      view.replaceChildren(text, el("figure", { class: "tbx-fig" }, svg, el("figcaption", {
        text: "router probability of each expert (rows e0–e7) for each character (columns); dots: the chosen experts; " +
              "the colour under each character is its first choice" })), el("div", { class: "tbx-row" },
        el("table", { tabindex: 0, class: "tbx-table tbx-route" },
          el("caption", { text: `Token ${q} (“${show(data.tokens[q])}”) in layer ${layer.value}` }),
          el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "expert" }),
            el("th", { scope: "col", text: "router probability" }), el("th", { scope: "col", text: "mixing weight" }))),
          el("tbody", {}, [...Array(E).keys()].map((e) => el("tr", { "data-expert": e, class: chosen.has(e) ? "tbx-chosen" : null },
            el("th", { scope: "row", text: `expert ${e}` }),
            el("td", { class: "tbx-num tbx-prob", text: fmt(L.probs[q][e]) }),
            el("td", { class: "tbx-num tbx-mix", text: chosen.has(e) ? fmt(chosen.get(e)) : "—" }))))),
        el("table", { tabindex: 0, class: "tbx-table tbx-load" },
          el("caption", { text: `Load: tokens of the passage sent to each expert (top-${data.top_k}, ${T} tokens)` }),
          el("tbody", {}, load.map((n, e) => el("tr", {}, el("th", { scope: "row", text: `expert ${e}` }),
            el("td", { class: "tbx-num", text: String(n) }),
            el("td", { class: "tbx-bars", "aria-hidden": "true" }, barCell(n / T, "tbx-blue"))))))));
    }
    [layer, token].forEach((c) => c.addEventListener("input", draw));
    draw();
  }

  // ----------------------------------------------------------------------- 09: compute-optimal N and D
  /** `ChinchillaLaw.compute_optimal`: N = G (C/6)^a, D = C / (6N), a = β/(α+β), G = (αA/(βB))^(1/(α+β)). */
  function computeOptimal(law, flops) {
    const G = Math.pow(law.alpha * law.A / (law.beta * law.B), 1 / (law.alpha + law.beta));
    const n = G * Math.pow(flops / 6, law.beta / (law.alpha + law.beta));
    return [n, flops / 6 / n];
  }
  const chinchillaLoss = (law, n, d) => law.E + law.A / Math.pow(n, law.alpha) + law.B / Math.pow(d, law.beta);
  const human = (x) => {
    for (const [v, s] of [[1e12, "trillion"], [1e9, "billion"], [1e6, "million"]]) if (x >= v) return `${(x / v).toPrecision(3)} ${s}`;
    return x.toPrecision(3);
  };

  function chinchilla(root, data) {
    const view = frame(root, "Explorer: a compute-optimal calculator",
      "N and D that minimise the fitted loss L(N, D) = E + A/N^α + B/D^β for a budget C = 6ND " +
      "(transformerbook.scaling.ChinchillaLaw.compute_optimal, with the constants exported by the package).");
    const law = control(root, { name: "law", label: "Fitted law", value: 0,
      options: data.laws.map((l, i) => [i, l.label]) });
    const logc = control(root, { name: "log10_flops", label: "Budget: log10 of C (FLOPs)", min: 18, max: 26,
      step: 0.01, value: Math.log10(5.76e23), format: (v) => `C ≈ 10^${fmt(v, 2)} FLOPs` });
    const flops = control(root, { name: "flops", type: "number", label: "Budget C in FLOPs (e.g. 5.76e23)",
      min: 1e15, max: 1e30, step: "any", value: "5.76e23" });  // Chinchilla's and Gopher's budget
    flops.nextSibling.remove();  // the number box shows its own value
    logc.addEventListener("input", () => { flops.value = sci(Math.pow(10, Number(logc.value)), 4); });
    flops.addEventListener("input", () => {
      const typed = flops.value, c = Number(typed);
      if (c > 0 && isFinite(c)) {
        logc.value = String(Math.log10(c));
        logc.dispatchEvent(new Event("input"));  // moves the slider (and rewrites the box: put back what was typed)
        flops.value = typed;
      }
    });
    function draw() {
      const L = data.laws[Number(law.value)], C = Number(flops.value);
      if (!(C > 0 && isFinite(C))) {
        view.replaceChildren(el("p", { class: "tbx-summary", text: "Type a positive budget, e.g. 1e21." }));
        return;
      }
      const [n, d] = computeOptimal(L, C);
      status(root, `C = ${sci(C)} FLOPs: N_opt = ${sci(n)} parameters, D_opt = ${sci(d)} tokens.`);
      const cell = (v, cls) => el("td", { class: `tbx-num ${cls}`, "data-value": String(v), text: sci(v) });
      view.replaceChildren(
        el("table", { tabindex: 0, class: "tbx-table tbx-opt" }, el("caption", { text: `For C = ${sci(C)} FLOPs (${L.label})` }),
          el("tbody", {},
            el("tr", {}, el("th", { scope: "row", text: "parameters N_opt" }), cell(n, "tbx-n"), el("td", { text: human(n) })),
            el("tr", {}, el("th", { scope: "row", text: "tokens D_opt" }), cell(d, "tbx-d"), el("td", { text: human(d) })),
            el("tr", {}, el("th", { scope: "row", text: "tokens per parameter" }), cell(d / n, "tbx-ratio"), el("td")),
            el("tr", {}, el("th", { scope: "row", text: "predicted loss (nats/token)" }),
              el("td", { class: "tbx-num tbx-loss", text: fmt(chinchillaLoss(L, n, d)) }), el("td")))),
        el("table", { tabindex: 0, class: "tbx-table" }, el("caption", { text: "Some trained models: their budget 6ND and its compute-optimal split" }),
          el("thead", {}, el("tr", {}, ["model", "N", "D", "C = 6ND", "N_opt for that C", "D_opt"].map((h) => el("th", { scope: "col", text: h })))),
          el("tbody", {}, data.models.map((m) => {
            const c = 6 * m.N * m.D, [no, dO] = computeOptimal(L, c);
            return el("tr", {}, el("th", { scope: "row", text: m.name }), ...[m.N, m.D, c, no, dO].map((v) => el("td", { class: "tbx-num", text: sci(v) })));
          }))));
    }
    [law, logc, flops].forEach((c) => c.addEventListener("input", draw));
    draw();
  }

  const EXPLORERS = { sampling, attention, positional, bpe, moe, chinchilla };

  // Explorers that run a model in the page (live.js, loaded before this file) start with it and fall back to the
  // precomputed view above (`EXPLORERS[name]`, or their own for a name without one) when it cannot start.
  function init() {
    const live = window.tbLiveExplorers || {};
    document.querySelectorAll(".tb-explorer[data-explorer]").forEach((root) => {
      const name = root.dataset.explorer, data = (window.tbExplorerData || {})[name];
      if (!(EXPLORERS[name] || live[name]) || !data) {
        root.querySelector(".tbx-fallback")?.removeAttribute("hidden");
        return;
      }
      if (live[name]) live[name](root, data, EXPLORERS[name]);
      else EXPLORERS[name](root, data);
      root.dataset.ready = "true";
    });
  }
  window.tbExplorers = { warpLogits, computeOptimal, el, control, frame, status, softmax, show, fmt, barCell, heat };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
