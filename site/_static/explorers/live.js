/* transformerbook live explorers: the book's own trained models, run in the page by ONNX Runtime Web (WebAssembly,
 * one thread), on whatever the reader types. No network: the runtime (`_static/ort/`) and the models
 * (`_static/live/<name>.onnx.gz` + `.json`) are the site's own files, written by `tools/live_assets.py` (the binary
 * runtime and the models gzip-compressed, decompressed here by the browser's DecompressionStream); the models are
 * `transformerbook.live.export_onnx`'s graphs of the package's own functions (logits, `interpret.attention_patterns`,
 * `lm_head.logit_lens`), checked against them in tests/test_live.py (ONNX Runtime in Python) and
 * tests/test_explorers.py (this page in Chromium).
 *
 * Loaded before explorers.js, which calls `window.tbLiveExplorers[name](root, data, precomputed)`; the explorer
 * loads the runtime and its model only when a reader scrolls near it (`whenNear`). When WebAssembly cannot start,
 * the explorer says why and shows the numbers computed when the site was built (`data`).
 * For tests and curious readers, every result is in the DOM: `root.dataset.text` (the text the shown numbers are
 * for), `root.dataset.latencyMs` (input event to updated view), `root.tbResult` (the arrays themselves).
 */
(function () {
  "use strict";
  const SCRIPT = document.currentScript;
  const STATIC = new URL("../", SCRIPT ? SCRIPT.src : location.href).href;  // .../_static/
  const H = () => window.tbExplorers;  // explorers.js's helpers (el, control, frame, ...), defined before init runs

  // ------------------------------------------------------------------ seeded sampling (transformerbook.live)
  /** Mulberry32: the generator `transformerbook.live.Mulberry32` implements too (same seed, same numbers). */
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6D2B79F5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  /** The first token whose running sum of probabilities exceeds u (as `transformerbook.live.sample_text`). */
  function pick(probs, u) {
    let cum = 0;
    for (let i = 0; i < probs.length; i++) {
      cum += probs[i];
      if (cum > u) return i;
    }
    return probs.length - 1;
  }

  // ------------------------------------------------------------------------------- the runtime and a model
  /** The bytes of one of the site's gzip-compressed files (`_static/<path>.gz`), decompressed by the browser's own
   * DecompressionStream: the runtime and the models travel compressed from any server, or none (`make serve`). */
  async function fetchGzipped(path) {
    if (typeof DecompressionStream !== "function") throw new Error("this browser has no DecompressionStream");
    const response = await fetch(STATIC + path + ".gz");
    if (!response.ok) throw new Error(`the file _static/${path}.gz could not be loaded (HTTP ${response.status})`);
    return new Uint8Array(await new Response(response.body.pipeThrough(new DecompressionStream("gzip"))).arrayBuffer());
  }

  let ortPromise = null;
  function loadRuntime() {
    if (!ortPromise) {
      ortPromise = new Promise((resolve, reject) => {
        if (typeof WebAssembly !== "object") {
          reject(new Error("this browser has no WebAssembly"));
          return;
        }
        if (window.ort) { resolve(window.ort); return; }
        const s = document.createElement("script");
        s.src = STATIC + "ort/ort.wasm.min.js";
        s.onload = () => (window.ort ? resolve(window.ort) : reject(new Error("ONNX Runtime Web did not start")));
        s.onerror = () => reject(new Error("the runtime's file _static/ort/ort.wasm.min.js could not be loaded"));
        document.head.append(s);
      }).then(async (ort) => {
        ort.env.logLevel = "error";  // the runtime's optimiser notes (e.g. a node it could not pre-compute) are not errors
        ort.env.wasm.numThreads = 1;  // no SharedArrayBuffer needed; the same arithmetic on every machine
        ort.env.wasm.proxy = false;
        ort.env.wasm.wasmPaths = STATIC + "ort/";  // where the .mjs that instantiates the binary is
        ort.env.wasm.wasmBinary = await fetchGzipped("ort/ort-wasm-simd-threaded.wasm");
        return ort;
      });
    }
    return ortPromise;
  }

  async function openModel(name) {
    const ort = await loadRuntime();
    const response = await fetch(STATIC + `live/${name}.json`);
    if (!response.ok) throw new Error(`the model's file live/${name}.json is missing (HTTP ${response.status})`);
    const info = await response.json();
    const session = await ort.InferenceSession.create(await fetchGzipped(`live/${info.onnx}`),
      { executionProviders: ["wasm"], graphOptimizationLevel: "all", logSeverityLevel: 3 });  // 3: errors only
    const stoi = new Map(info.alphabet.map((c, i) => [c, i]));
    let queue = Promise.resolve();
    /** logits (T, V), attention (L, H, T, T), lens (L+1, T, V) for ids (T <= context_length), Float32Arrays. */
    function run(ids) {
      const job = queue.then(async () => {
        const C = info.context_length, T = ids.length, V = info.vocab_size, L = info.n_layers, Hh = info.n_heads;
        const padded = new BigInt64Array(C).fill(BigInt(info.pad_token_id));
        ids.forEach((id, i) => { padded[i] = BigInt(id); });
        const out = await session.run({ token_ids: new ort.Tensor("int64", padded, [1, C]) });
        const attention = new Float32Array(L * Hh * T * T), a = out.attention.data;
        for (let lh = 0; lh < L * Hh; lh++)
          for (let i = 0; i < T; i++)
            attention.set(a.subarray((lh * C + i) * C, (lh * C + i) * C + T), (lh * T + i) * T);
        const lens = new Float32Array((L + 1) * T * V), l = out.logit_lens.data;
        for (let k = 0; k <= L; k++) lens.set(l.subarray(k * C * V, k * C * V + T * V), k * T * V);
        return { logits: out.logits.data.slice(0, T * V), attention, lens, T };
      });
      queue = job.catch(() => {});  // one run at a time: a session is not re-entrant
      return job;
    }
    return { info, run, stoi };
  }

  /** Ids of the text's last context_length characters, or the characters outside the alphabet. */
  function encode(model, text) {
    const chars = Array.from(text);
    const bad = [...new Set(chars.filter((c) => !model.stoi.has(c)))];
    if (bad.length) return { bad };
    if (!chars.length) return { empty: true };
    return { ids: chars.slice(-model.info.context_length).map((c) => model.stoi.get(c)) };
  }

  function badMessage(enc) {
    if (enc.empty) return "Type at least one character.";
    const named = enc.bad.map((c) => `“${c === "\n" ? "⏎" : c}” (U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")})`);
    return `Not in the model's alphabet of 65 characters: ${named.join(", ")}. Remove ${enc.bad.length > 1 ? "them" : "it"} to see the model's answer.`;
  }

  function showBad(root, message, text, enc) {
    // A text the model cannot read: say why, and record it on the explorer for the tests.
    message.textContent = badMessage(enc);
    root.dataset.text = text;
    root.dataset.error = message.textContent;
  }

  function whyNot(err) {
    if (location.protocol === "file:") {
      return "The model does not run in a page opened from a file: browsers do not start WebAssembly modules from " +
        "disk. Serve the site (make serve, then open http://127.0.0.1:8000) to run it on your own text. " +
        "Below: the numbers computed when the site was built.";
    }
    return `The model could not start in this browser (${(err && err.message) || err}). ` +
      "Below: the numbers computed when the site was built.";
  }

  /** Each text input runs the model; a newer text replaces one still waiting. Calls render(text, result, t0). */
  function follower(model, onResult, onBad) {
    let pending = null, busy = false;
    async function next() {
      if (busy || !pending) return;
      busy = true;
      const { text, t0 } = pending;
      pending = null;
      const enc = encode(model, text);
      try {
        if (enc.ids) onResult(text, enc.ids, await model.run(enc.ids), t0);
        else onBad(text, enc);
      } finally {
        busy = false;
        next();
      }
    }
    return (text, t0) => { pending = { text, t0 }; next(); };
  }

  function modelLine(info, live) {
    const { el } = H();
    return el("p", { class: "tbx-model" },
      `${live ? "Running live in this page" : "Computed when the site was built"}: ${info.description} ` +
      `(${info.n_params.toLocaleString("en")} parameters), checkpoint SHA-256 `,
      el("code", { class: "tbx-sha", text: info.weights_sha256 }),
      " (the package prints it: transformerbook.live.print_live_hashes()).");
  }

  function textBox(root, label, value) {
    const { el } = H();
    const id = `tbx-text-${root.dataset.explorer}`;
    const box = el("textarea", { id, name: "text", rows: 3, spellcheck: "false", autocomplete: "off",
                                 class: "tbx-text" });
    box.value = value;
    root.querySelector(".tbx-controls").before(el("div", { class: "tbx-textbox" },
      el("label", { for: id, text: label }), box));
    return box;
  }

  function fallback(root, err, draw) {
    const { el } = H();
    root.dataset.live = "false";
    draw();
    root.querySelector(".tbx-title").after(el("p", { class: "tbx-why", role: "note", text: whyNot(err) }));
  }

  /** Calls `start` once, when the explorer comes within two screen heights of the view (`data-live` is "waiting"
   * until then, "starting" after): a reader who never scrolls down to it downloads neither the runtime nor the model
   * (about 6.7 MB on 07's page, 5.2 MB on 11's, both far down their chapters) and a phone spends no CPU starting them.
   * Without IntersectionObserver it starts at once. */
  function whenNear(root, start) {
    const go = () => { root.dataset.live = "starting"; start(); };
    if (typeof IntersectionObserver !== "function") { go(); return; }
    root.dataset.live = "waiting";
    const near = new IntersectionObserver((entries) => {
      if (!entries.some((e) => e.isIntersecting)) return;
      near.disconnect();
      go();
    }, { rootMargin: "200% 0px" });
    near.observe(root);
  }

  // ----------------------------------------------------- 07: the next-character distribution, live, and a sampler
  function sampling(root, data, precomputed) {
    const { el, control, frame, status, softmax, show, fmt, barCell, warpLogits } = H();
    const info = data.live;
    const view = frame(root, "Explorer: the model's next character after your text",
      "The page applies temperature, then top-k, then top-p, as transformerbook.sampling.warp_logits does.");
    view.append(el("p", { class: "tbx-summary", text: "Starting the model…" }));
    whenNear(root, () => openModel(info.name).then((model) => start(model)).catch((err) => fallback(root, err, () => {
      precomputed(root, data);
      root.querySelector(".tbx-note").after(modelLine(info, false));
    })));

    function start(model) {
      const V = model.info.vocab_size;
      const box = textBox(root, `Your text (the model reads its last ${model.info.context_length} characters)`,
                          data.default_text);
      const temp = control(root, { name: "temperature", label: "Temperature τ", min: 0.05, max: 3, step: 0.05,
        value: 1, format: (v) => fmt(v, 2) });
      const topk = control(root, { name: "top_k", label: "Top-k (0 = off)", min: 0, max: V, step: 1, value: 0,
        format: (v) => (v ? String(v) : "off") });
      const topp = control(root, { name: "top_p", label: "Top-p", min: 0.01, max: 1, step: 0.01, value: 1,
        format: (v) => fmt(v, 2) });
      const message = el("p", { class: "tbx-message", "aria-live": "polite" });
      const seed = el("input", { id: "tbx-seed", name: "seed", type: "number", min: 0, max: 4294967295, step: 1,
                                  value: 1 });
      const nChars = el("input", { id: "tbx-nchars", name: "n_chars", type: "number", min: 1, max: 400, step: 1,
                                    value: 100 });
      const button = el("button", { type: "button", class: "tbx-button", name: "sample", text: "Sample" });
      const sample = el("p", { class: "tbx-sample", "aria-live": "polite" });
      const sampler = el("div", { class: "tbx-sampler" },
        el("div", { class: "tbx-controls" },
          el("div", { class: "tbx-control" }, el("label", { for: "tbx-seed", text: "Seed" }), seed),
          el("div", { class: "tbx-control" }, el("label", { for: "tbx-nchars", text: "Characters" }), nChars),
          button),
        sample);
      root.querySelector(".tbx-status").before(message);
      root.querySelector(".tbx-note").before(sampler);
      root.querySelector(".tbx-note").after(modelLine(model.info, true));
      let last = null;  // { text, logits (V,) of the last position }

      function draw() {
        if (!last) return;
        const logits = Array.from(last.logits), nShow = 20;
        const base = softmax(logits);
        const warped = softmax(warpLogits(logits, Number(temp.value), Number(topk.value) || null, Number(topp.value)));
        const idx = base.map((p, i) => i).sort((a, b) => base[b] - base[a]).slice(0, nShow);
        const kept = warped.filter((p) => p > 0).length;
        status(root, `${kept} of ${V} characters can be sampled; the most probable, ` +
          `“${show(model.info.alphabet[idx[0]])}”, has probability ${fmt(warped[idx[0]])}.`);
        root.tbResult = { text: last.text, ids: last.ids, logits: logits, probs: base, warped };
        view.replaceChildren(
          el("p", { class: "tbx-summary" }, `After “${show(last.text.slice(-24))}”: `,
             el("strong", { class: "tbx-kept", text: String(kept) }), ` of ${V} characters can be sampled.`),
          el("table", { tabindex: 0, class: "tbx-table" },
             el("caption", { text: `The ${nShow} most probable next characters` }),
             el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "character" }),
                el("th", { scope: "col", text: "model (τ = 1)" }), el("th", { scope: "col", text: "after warping" }),
                el("th", { scope: "col", text: "", "aria-hidden": "true" }))),
             el("tbody", {}, idx.map((i) => el("tr", { "data-token-id": i },
                el("th", { scope: "row", class: "tbx-token", text: show(model.info.alphabet[i]) }),
                el("td", { class: "tbx-num p-model", text: fmt(base[i]) }),
                el("td", { class: "tbx-num p-warped", text: fmt(warped[i]) }),
                el("td", { class: "tbx-bars", "aria-hidden": "true" }, barCell(base[i], "tbx-grey"),
                   barCell(warped[i], "tbx-blue")))))));
      }

      const follow = follower(model, (text, ids, out, t0) => {
        const V0 = (out.T - 1) * V;
        last = { text, ids, logits: out.logits.slice(V0, V0 + V) };
        message.textContent = "";
        draw();
        root.dataset.text = text;
        root.dataset.latencyMs = (performance.now() - t0).toFixed(2);
      }, (text, enc) => showBad(root, message, text, enc));
      box.addEventListener("input", (e) => { delete root.dataset.error; follow(box.value, e.timeStamp || performance.now()); });
      [temp, topk, topp].forEach((c) => c.addEventListener("input", draw));

      button.addEventListener("click", async () => {
        const s = Math.floor(Number(seed.value)) >>> 0, n = Math.max(1, Math.min(400, Math.floor(Number(nChars.value))));
        const enc = encode(model, box.value);
        if (!enc.ids) { message.textContent = badMessage(enc); return; }
        button.disabled = true;
        sample.textContent = "Sampling…";
        const rng = mulberry32(s), t = Number(temp.value), k = Number(topk.value) || null, p = Number(topp.value);
        let text = box.value, out = "";
        for (let step = 0; step < n; step++) {
          const r = await model.run(encode(model, text).ids);
          const logits = Array.from(r.logits.slice((r.T - 1) * V, r.T * V));
          const next = model.info.alphabet[pick(softmax(warpLogits(logits, t, k, p)), rng())];
          text += next;
          out += next;
        }
        sample.replaceChildren(el("span", { class: "tbx-sample-prompt", text: box.value.slice(-40) }),
                               el("strong", { class: "tbx-sample-text", text: out }));
        sample.dataset.seed = String(s);
        sample.dataset.text = out;
        button.disabled = false;
        status(root, `Sampled ${n} characters with seed ${s}.`);
      });
      root.dataset.live = "true";
      follow(box.value, performance.now());
    }
  }

  /** Viridis-like colour for a weight in [0, 1], as [r, g, b] (explorers.js's `heat`, for an ImageData). */
  const VIRIDIS = [...Array(256).keys()].map((k) => {
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const x = (k / 255) * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x)), f = x - i;
    return stops[i].map((c, j) => Math.round(c + (stops[i + 1][j] - c) * f));
  });
  const viridis = (v) => VIRIDIS[Math.round(255 * Math.max(0, Math.min(1, v)))];

  // ------------------------------------------- 11: every head's attention, head scores and the logit lens, live
  function insideView(root, info, view) {
    const { el, show, fmt, heat, status } = H();
    const L = info.n_layers, Hh = info.n_heads;
    const readout = el("p", { class: "tbx-readout", "aria-live": "polite" });
    /** Draw one result: { text, T, attention (L·H·T·T), lensTop (L+1)·T ids, lensProb (L+1)·T }. */
    return function render(r) {
      const chars = Array.from(r.text).slice(-r.T), T = r.T;
      const w = (l, h, i, j) => r.attention[((l * Hh + h) * T + i) * T + j];
      const grid = el("div", { class: "tbx-heads" });
      const cursor = { i: T - 1, j: Math.max(0, T - 2) };
      const say = (l, h, i, j) => {
        readout.textContent = `Layer ${l}, head ${h}: query ${i} “${show(chars[i])}” → key ${j} “${show(chars[j])}”: ` +
          `weight ${fmt(w(l, h, i, j), 4)}.`;
      };
      for (let l = 0; l < L; l++) {
        for (let h = 0; h < Hh; h++) {
          const canvas = el("canvas", { width: T, height: T, class: "tbx-head", tabindex: 0,
            role: "img", "data-layer": l, "data-head": h,
            "aria-label": `Layer ${l}, head ${h}: attention of ${T} queries (rows) over keys (columns). ` +
                          "Arrow keys move between cells; the weight is read out below." });
          const ctx = canvas.getContext("2d");
          const image = ctx.createImageData(T, T);  // one pixel per (query, key); CSS scales it up
          for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
            const rgb = j <= i ? viridis(w(l, h, i, j)) : [242, 242, 242], o = 4 * (i * T + j);
            image.data[o] = rgb[0]; image.data[o + 1] = rgb[1]; image.data[o + 2] = rgb[2]; image.data[o + 3] = 255;
          }
          const paint = (mark) => {
            ctx.putImageData(image, 0, 0);
            if (mark) {
              ctx.fillStyle = "#ff2020";
              ctx.fillRect(cursor.j, cursor.i, 1, 1);
            }
          };
          paint(false);
          const at = (e) => {
            const box = canvas.getBoundingClientRect();
            const i = Math.min(T - 1, Math.floor((e.clientY - box.top) / box.height * T));
            const j = Math.min(i, Math.floor((e.clientX - box.left) / box.width * T));
            return [i, Math.max(0, j)];
          };
          canvas.addEventListener("mousemove", (e) => { const [i, j] = at(e); say(l, h, i, j); });
          canvas.addEventListener("focus", () => { paint(true); say(l, h, cursor.i, cursor.j); });
          canvas.addEventListener("blur", () => paint(false));
          canvas.addEventListener("keydown", (e) => {
            const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
            if (!moves[e.key]) return;
            e.preventDefault();
            cursor.i = Math.max(0, Math.min(T - 1, cursor.i + moves[e.key][0]));
            cursor.j = Math.max(0, Math.min(cursor.i, cursor.j + moves[e.key][1]));
            paint(true);
            say(l, h, cursor.i, cursor.j);
          });
          grid.append(el("figure", { class: "tbx-fig tbx-headfig" }, canvas,
                         el("figcaption", { text: `layer ${l}, head ${h}` })));
        }
      }
      // Head scores (transformerbook.interpret): previous-token, and induction when the text is one string twice
      const half = T % 2 === 0 && T >= 4 && chars.slice(0, T / 2).join("") === chars.slice(T / 2).join("") ? T / 2 : 0;
      const prev = [], ind = [];
      for (let l = 0; l < L; l++) for (let h = 0; h < Hh; h++) {
        let s = 0;
        for (let i = 1; i < T; i++) s += w(l, h, i, i - 1);
        prev.push(T > 1 ? s / (T - 1) : NaN);
        let t = 0;
        for (let i = half; i < T; i++) t += w(l, h, i, i - half + 1);
        ind.push(half ? t / (T - half) : NaN);
      }
      const scoreTable = (name, cls, values, caption) => el("table", { tabindex: 0, class: `tbx-table tbx-scores ${cls}` },
        el("caption", { text: caption }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: name }),
          [...Array(Hh).keys()].map((h) => el("th", { scope: "col", text: `head ${h}` })))),
        el("tbody", {}, [...Array(L).keys()].map((l) => el("tr", {}, el("th", { scope: "row", text: `layer ${l}` }),
          [...Array(Hh).keys()].map((h) => {
            const v = values[l * Hh + h];
            return el("td", { class: "tbx-num", "data-layer": l, "data-head": h, "data-value": String(v),
                              text: Number.isNaN(v) ? "—" : fmt(v, 3) });
          })))));
      // Logit lens: the top guess for the next character after each block, at the last positions
      const nPos = Math.min(T, 16), first = T - nPos;
      // its caption is a paragraph above the table: a <caption> is as wide as its table and scrolls away with it
      const lensCaption = el("p", { class: "tbx-caption", id: "tbx-lens-caption",
        text: "Logit lens: the top guess for the next character read after each block (rows), " +
              `at the last ${nPos} positions (columns); the top row is the model's own answer` });
      const lens = el("table", { tabindex: 0, class: "tbx-table tbx-lens", "aria-labelledby": "tbx-lens-caption" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "input" }),
          chars.slice(first).map((c) => el("th", { scope: "col", class: "tbx-token", text: show(c) })))),
        el("tbody", {}, [...Array(L + 1).keys()].reverse().map((k) => el("tr", { "data-block": k },
          el("th", { scope: "row", text: k === 0 ? "embeddings" : `after block ${k}` }),
          [...Array(nPos).keys()].map((q) => {
            const pos = first + q, id = r.lensTop[k * T + pos], p = r.lensProb[k * T + pos];
            return el("td", { class: "tbx-token tbx-guess", "data-id": id, "data-prob": String(p),
                              title: `p = ${fmt(p)}`, text: show(info.alphabet[id]) });
          })))));
      const best = prev.indexOf(Math.max(...prev.filter((v) => !Number.isNaN(v))));
      status(root, `${T} characters. Strongest previous-token head: layer ${Math.floor(best / Hh)}, head ${best % Hh} ` +
        `(${fmt(prev[best])}).` + (half ? ` Largest induction score ${fmt(Math.max(...ind))}.` : ""));
      view.replaceChildren(grid, readout,
        el("div", { class: "tbx-row" },
          scoreTable("previous-token", "tbx-prev", prev, "Previous-token score: mean weight on the character just before"),
          scoreTable("induction", "tbx-ind", ind, half ? `Induction score (the text is one string of ${half} characters twice)`
                                                      : "Induction score: press “Repeat my text” (needs a text written twice)")),
        lensCaption, lens);
      root.tbResult = Object.assign(root.tbResult || {}, { text: r.text, T, attention: r.attention, prev, ind, period: half });
    };
  }

  function inside(root, data) {
    const { el, frame } = H();
    const info = data.live;
    const view = frame(root, "Explorer: your text, inside the induction model",
      "Hover over a head or focus it (Tab) and use the arrow keys to read one weight and its two characters.");
    view.append(el("p", { class: "tbx-summary", text: "Starting the model…" }));
    const render = insideView(root, info, view);
    whenNear(root, () => openModel(info.name).then(start).catch((err) => fallback(root, err, () => {
      const T = Array.from(data.text).length;
      render({ text: data.text, T, attention: data.attention.flat(3), lensTop: data.lens_top.flat(),
               lensProb: data.lens_prob.flat() });
      root.querySelector(".tbx-note").after(modelLine(info, false));
    })));

    function start(model) {
      const box = textBox(root, `Your text (the model reads its last ${model.info.context_length} characters)`,
                          data.default_text);
      const repeat = el("button", { type: "button", class: "tbx-button", name: "repeat", text: "Repeat my text" });
      const message = el("p", { class: "tbx-message", "aria-live": "polite" });
      root.querySelector(".tbx-controls").append(repeat);
      root.querySelector(".tbx-status").before(message);
      root.querySelector(".tbx-note").after(modelLine(model.info, true));
      const V = model.info.vocab_size, L = model.info.n_layers;
      const follow = follower(model, (text, ids, out, t0) => {
        const T = out.T, lensTop = new Int32Array((L + 1) * T), lensProb = new Float64Array((L + 1) * T);
        for (let k = 0; k <= L; k++) for (let pos = 0; pos < T; pos++) {
          const row = out.lens.subarray((k * T + pos) * V, (k * T + pos + 1) * V);
          let m = -Infinity, arg = 0, s = 0;
          for (let v = 0; v < V; v++) if (row[v] > m) { m = row[v]; arg = v; }
          for (let v = 0; v < V; v++) s += Math.exp(row[v] - m);
          lensTop[k * T + pos] = arg;
          lensProb[k * T + pos] = 1 / s;
        }
        message.textContent = "";
        root.tbResult = { ids, lens: out.lens, logits: out.logits };
        render({ text: Array.from(text).slice(-model.info.context_length).join(""), T, attention: out.attention,
                 lensTop, lensProb });
        root.dataset.text = text;
        root.dataset.latencyMs = (performance.now() - t0).toFixed(2);
      }, (text, enc) => showBad(root, message, text, enc));
      box.addEventListener("input", (e) => { delete root.dataset.error; follow(box.value, e.timeStamp || performance.now()); });
      repeat.addEventListener("click", () => {
        const chars = Array.from(box.value).slice(-Math.floor(model.info.context_length / 2));
        box.value = chars.join("") + chars.join("");
        box.dispatchEvent(new Event("input"));
      });
      root.dataset.live = "true";
      follow(box.value, performance.now());
    }
  }

  window.tbLiveExplorers = { sampling, inside };
  window.tbLive = { mulberry32, pick };
})();
