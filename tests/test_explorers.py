"""The in-page explorers (tools/explorers.py, site/_ext/book_explorers.py, site/_static/explorers/) in a real headless
Chromium at a phone's and a desktop's width: every control is a labelled native input that changes what the explorer
shows, and the numbers shown equal the book's own Python functions for the same settings. Also: the figure/explorer
cell options (tools/figures.py) and the diagrams' sources.

The live explorers (07 `sampling`, 11 `inside`: site/_static/explorers/live.js runs `transformerbook.live`'s ONNX
files with ONNX Runtime Web) are typed into: on validation texts their numbers equal the package's with every request
to another host blocked, the seeded sample is `live.sample_text`'s, the page shows the package's checkpoint hash, a
phone-sized page with the CPU throttled 4x still answers, and a blocked WebAssembly file shows the precomputed view.
Each fetches nothing of the runtime or its model until the reader scrolls near it (both are far down their pages).
The keystroke-to-update latency for 200-character texts is printed (run with `-s`).

The site is the whole book's, built once per session (conftest's `book`, shared with test_site.py). Screenshots of each
explorer go to `_build/screenshots/explorers/`.
"""
from __future__ import annotations

import functools
import json
import re
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import nbformat
import pytest
import torch

from transformerbook.multihead import split_heads

from conftest import ROOT
import explorers
import figures
import nb2myst
from test_site import AXE, WITHOUT_CODE_JS

pytestmark = pytest.mark.slow

CHAPTERS = {"sampling": "07_sampling", "attention": "03_multihead", "positional": "05_embeddings",
            "bpe": "05a_tokenization", "moe": "10_moe", "chinchilla": "09_scaling", "inside": "11_inside"}
VIEWPORTS = {"phone": {"width": 400, "height": 850}, "desktop": {"width": 1400, "height": 900}}
SCREENSHOTS = ROOT / "_build" / "screenshots" / "explorers"


# ------------------------------------------------------------------------------------- no browser needed

def test_a_trailing_noqa_is_not_part_of_the_option():
    source = ("#| fig-cap: Loss against steps  # noqa: E501\n#| fig-alt: 'A falling # curve' # noqa: E501\n"
              "#| explorer: sampling\nplot()")
    assert figures.cell_options(source) == {"fig-cap": "Loss against steps", "fig-alt": "A falling # curve",
                                            "explorer": "sampling"}


def test_cell_options_are_parsed_and_applied():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("#| fig-cap: Loss against steps\n#| fig-alt: \"A falling curve\"\nplot()"),
        nbformat.v4.new_code_cell("#| slow\n#| explorer: sampling\ninteract(f)"),
        nbformat.v4.new_code_cell("#| explorer-after: chinchilla\nx = 1"),
        nbformat.v4.new_markdown_cell("![Two blocks side by side](figures/transformer_block.svg)\n\n"
                                      "Figure: Pre-norm and post-norm."),
    ])
    out = figures.translate(nb, nb2myst.translate)
    code = [c for c in out.cells if c.cell_type == "code"]
    assert code[0].metadata["mystnb"] == {"figure": {"caption": "Loss against steps"},
                                          "image": {"alt": "A falling curve"}}
    assert "#|" not in code[0].source
    assert "hide-input" in code[1].metadata["tags"]
    assert "hide-input" not in code[2].metadata.get("tags", [])
    md = [c.source for c in out.cells if c.cell_type == "markdown"]
    assert "```{explorer} sampling\n```" in md and "```{explorer} chinchilla\n```" in md
    fig = next(s for s in md if s.startswith("```{figure}"))
    assert ":alt: Two blocks side by side" in fig and "Pre-norm and post-norm." in fig
    assert figures.image_figure("Some text ![x](y.svg)") is None


def test_stand_in_pages_are_reported(tmp_path, capsys):
    "A page whose saved output has a `Stand-in:` line is listed by the build's report; others are not."
    used, plain = tmp_path / "07_sampling.ipynb", tmp_path / "01_attention.ipynb"
    out = nbformat.v4.new_output("stream", name="stdout", text="Stand-in: GPT-2's weights are not available ...\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[out])]), used)
    quoted = nbformat.v4.new_output("stream", name="stdout", text="the word Stand-in: inside a line\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[quoted])]), plain)
    assert figures.stand_in_pages([used, plain]) == ["07_sampling"]
    figures.report_stand_ins([used, plain])
    assert "stand-in model (GPT-2's weights unavailable) on: 07_sampling" in capsys.readouterr().out


def test_gpt2_demos_fall_back_to_the_stand_in():
    "The GPT-2 demo cells of 05, 06 and 07 announce a stand-in with the `Stand-in:` line the build reports."
    for stem in ("05_embeddings", "06_lm_head", "07_sampling"):
        nb = nbformat.read(ROOT / "nbs" / f"{stem}.ipynb", as_version=4)
        assert any('print("Stand-in:' in c.source or 'print(f"Stand-in:' in c.source for c in nb.cells
                   if c.cell_type == "code"), stem


def test_every_explorer_is_placed_in_its_chapter():
    for name, stem in CHAPTERS.items():
        nb = nbformat.read(ROOT / "nbs" / f"{stem}.ipynb", as_version=4)
        placed = [o for c in nb.cells if c.cell_type == "code" for o in figures.cell_options(c.source).items()
                  if o[0] in ("explorer", "explorer-after")]
        assert (placed[0][1] if placed else None) == name, f"{stem} does not place the {name} explorer"


DIAGRAMS = {"01_attention": "attention_shapes", "04_blocks": "transformer_block", "07_sampling": "kv_cache",
            "10_moe": "moe_routing"}


def test_diagrams_are_placed_as_numbered_figures_with_alt_text():
    for stem, name in DIAGRAMS.items():
        nb = figures.translate(nbformat.read(ROOT / "nbs" / f"{stem}.ipynb", as_version=4), nb2myst.translate)
        figs = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("```{figure}")]
        fig = next((f for f in figs if f"figures/{name}.svg" in f), None)
        assert fig, f"{stem} does not show the {name} diagram as a figure"
        alt = re.search(r"^:alt: (.+)$", fig, re.M)
        assert alt and len(alt.group(1)) > 80 and ".svg" not in alt.group(1), \
            f"{name}: the alt text does not describe it"
        assert fig.rstrip("`\n").strip().split("\n")[-1].strip(), f"{name} has no caption"


def test_every_saved_plot_has_a_caption_and_alt_text():
    "Every code cell with a saved plot in the chapters carries `#| fig-cap:` and a describing `#| fig-alt:`."
    plots = 0
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or not any({"image/png", "image/svg+xml"} & set(o.get("data", {}))
                                                   for o in cell.get("outputs", [])):
                continue
            plots += 1
            o = figures.cell_options(cell.source)
            assert o.get("fig-cap") and len(o.get("fig-alt", "")) > 40, f"{path.name} cell {cell.get('id')}: {o}"
    assert plots >= 30, f"only {plots} saved plots found: are the notebooks executed?"


def svg_texts(svg: str) -> list[str]:
    "The text a diagram shows, in drawing order (matplotlib writes each label as an SVG <text> element)."
    return re.findall(r"<text[^>]*>([^<]*)", svg)


def test_diagrams_are_drawn_from_their_source(tmp_path):
    """The committed SVGs are what nbs/figures/diagrams.py draws now (re-run it after editing a diagram): byte for byte
    with the matplotlib that drew them (named in each SVG), and the same labels in the same order with any other
    (layout and path data change between matplotlib releases)."""
    sys.path.insert(0, str(ROOT / "nbs" / "figures"))
    import diagrams
    import matplotlib
    import matplotlib.pyplot as plt
    for name, draw in diagrams.DIAGRAMS.items():
        fig = draw()
        fig.savefig(tmp_path / f"{name}.svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        committed = ROOT / "nbs" / "figures" / f"{name}.svg"
        assert committed.is_file(), f"{committed} is missing: run python nbs/figures/diagrams.py"
        drawn, saved = (tmp_path / f"{name}.svg").read_text(), committed.read_text()
        assert svg_texts(saved), f"{committed.name} has no <text> labels to compare"
        if f"Matplotlib v{matplotlib.__version__}," in saved:
            assert drawn == saved, f"{committed.name} is out of date: run python nbs/figures/diagrams.py"
        else:
            assert svg_texts(drawn) == svg_texts(saved), \
                f"{committed.name}'s labels are out of date (drawn with another matplotlib than " \
                f"{matplotlib.__version__}): run python nbs/figures/diagrams.py"


# ------------------------------------------------------------------------------------------ the site

@pytest.fixture(scope="module")
def site(book):
    "The book's site (conftest's session build, shared with test_site.py), which holds the chapters with explorers."
    return book[0]


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        "A page closed during a download (the 14 MB runtime) resets the connection: not an error of the site."
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def base_url(site):
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tabs(chrome):
    """One tab per viewport for the module's explorer tests, each test going to its chapter in it as a reader moves
    from page to page. A fresh context and tab per test, as before, is a new renderer process with an empty cache that
    parses the theme's scripts and styles again: 3.5-4 CPU-seconds more per test (this file alone, one process:
    286 -> 241 CPU-s, 201 -> 175 s, 2026-11-28, unloaded)."""
    made = {}

    def tab(viewport: str):
        if viewport not in made:
            page = chrome.new_context(viewport=VIEWPORTS[viewport]).new_page()
            page.viewport_name, page.requested, page.errors = viewport, [], []
            page.on("request", lambda r: page.requested.append(r.url))
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            made[viewport] = page
        return made[viewport]
    yield tab
    for page in made.values(): page.context.close()


@pytest.fixture(params=list(VIEWPORTS))
def page(request, tabs):
    "The tab at a phone's or a desktop's size (`tabs`), recording the requests and console errors of this test only."
    page = tabs(request.param)
    page.goto("about:blank")  # the last test's chapter unloaded before this test's records start
    page.requested.clear()
    page.errors.clear()
    return page


LIVE = ("sampling", "inside")  # the explorers that run a model in the page (live.js)
# What a page has fetched so far, from the site's own folders of the live explorers (runtime and models)
LIVE_FILES_JS = """() => performance.getEntriesByType("resource").map(r => new URL(r.name).pathname)
  .filter(p => p.includes("/_static/ort/") || p.includes("/_static/live/"))"""


def open_explorer(page, base_url, name):
    """Load the chapter page of explorer `name`; return the explorer's root element, scrolled into view. A live
    explorer, far down its chapter, must wait there until then (`data-live` "waiting", nothing of the runtime or the
    model fetched)."""
    page.goto(f"{base_url}/{CHAPTERS[name]}.html", wait_until="load")
    root = page.locator(f'.tb-explorer[data-explorer="{name}"]')
    assert root.count() == 1, f"{CHAPTERS[name]} has no {name} explorer"
    root.wait_for(state="visible")
    assert root.get_attribute("data-ready") == "true", f"the {name} explorer did not start (its data is missing?)"
    if name in LIVE:
        assert root.evaluate("r => r.getBoundingClientRect().top > 3 * innerHeight")  # beyond whenNear's margin
        assert root.get_attribute("data-live") == "waiting", root.get_attribute("data-live")
        assert not page.evaluate(LIVE_FILES_JS), page.evaluate(LIVE_FILES_JS)
    root.scroll_into_view_if_needed()
    return root


def finish(page, root, name, base_url):
    "Common checks after an explorer test: accessible controls, fits the width, no console error, no remote request."
    unlabeled = root.evaluate("r => [...r.querySelectorAll('input, select')].filter(c => !c.labels.length).length")
    assert unlabeled == 0, f"{name}: {unlabeled} controls without a <label>"
    right = root.evaluate("r => r.getBoundingClientRect().right")
    assert right <= VIEWPORTS[page.viewport_name]["width"] + 0.5, f"{name} is wider than the {page.viewport_name}"
    assert root.evaluate("r => r.scrollWidth <= r.clientWidth + 1"), f"{name} overflows its box"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    root.screenshot(path=SCREENSHOTS / f"{name}-{page.viewport_name}.png")
    assert not page.errors, f"console errors on {name}'s page: {page.errors}"
    host = urlparse(base_url).netloc
    remote = [u for u in page.requested if urlparse(u).scheme in ("http", "https") and urlparse(u).netloc != host]
    assert not remote, f"requests that leave the site: {remote}"


# axe-core on a started live explorer (its text box, sliders, buttons and head canvases exist only then; the site test
# reads each page before a reader scrolls there): WCAG 2.1 A/AA rules, serious or critical, with the page's code
# blocks and formulas out of the document while it runs (test_site's WITHOUT_CODE_JS; axe builds its tree of the
# whole page: 4.4-5.0 s on 07 with them).
LIVE_AXE_JS = "async (root) => (" + WITHOUT_CODE_JS + """)(async () => {
  const tags = {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]};
  const result = await axe.run(root, {runOnly: tags, resultTypes: ["violations"]});
  return result.violations.filter(v => v.impact === "serious" || v.impact === "critical")
    .map(v => ({id: v.id, n: v.nodes.length, first: v.nodes[0].target.join(" ")}));
})"""


def live_accessibility(page, root) -> list[dict]:
    "The serious and critical axe-core violations inside a started live explorer (`LIVE_AXE_JS`)."
    page.add_script_tag(path=str(AXE))
    return root.evaluate(LIVE_AXE_JS)


def view_text(root) -> str:
    return root.locator(".tbx-view").inner_text()


def set_value(root, name, value):
    "Set a control as a reader would (fill fires `input`); returns the view's text before, to compare."
    before = view_text(root)
    control = root.locator(f'[name="{name}"]')
    if control.evaluate("c => c.tagName") == "SELECT":
        control.select_option(str(value))
    else:
        control.fill(str(value))
    return before


def assert_responds(root, name, value):
    before = set_value(root, name, value)
    assert view_text(root) != before, f"changing {name} to {value} did not change the explorer"


@functools.lru_cache(maxsize=1)
def char_model():
    from transformerbook.training import shakespeare_model
    return shakespeare_model("char", progress=False)


def wait_live(page, root, text=None, timeout=30_000):
    """Wait until a live explorer has started (`data-live` true or false) and, with `text`, until the numbers it shows
    are for that text (`data-text`). Returns `data-live`."""
    name = root.get_attribute("data-explorer")
    sel = f'.tb-explorer[data-explorer="{name}"]'
    page.wait_for_function("s => !['waiting', 'starting'].includes(document.querySelector(s).dataset.live)", arg=sel,
                           timeout=timeout)
    if text is not None:
        page.wait_for_function("([s, t]) => document.querySelector(s).dataset.text === t", arg=[sel, text],
                               timeout=timeout)
    return root.get_attribute("data-live")


def type_text(page, root, text, timeout=30_000):
    "Put `text` in the explorer's text box (an `input` event, as typing gives) and wait for the numbers of that text."
    root.locator('textarea[name="text"]').fill(text)
    wait_live(page, root, text, timeout)


PAGE_ARRAYS_JS = """(r, keys) => Object.fromEntries(keys.map(k => {
  const bytes = new Uint8Array(Float64Array.from(r.tbResult[k]).buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 32768) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
  return [k, btoa(s)];
}))"""


def page_result(root, *keys) -> dict[str, torch.Tensor]:
    """The arrays behind the explorer's view (`root.tbResult`, set by live.js), as float64 tensors: every number as the
    page holds it (a float32 from the runtime is exact in float64), sent as bytes (a list of numbers is much slower)."""
    import base64
    import numpy as np
    got = root.evaluate(PAGE_ARRAYS_JS, list(keys))
    return {k: torch.from_numpy(np.frombuffer(base64.b64decode(v), dtype=np.float64).copy()) for k, v in got.items()}


# Many texts in one call: for each, put it in the box with an `input` event (what `fill` and a keystroke give) and,
# once the view shows that text, read the arrays behind it as bytes (float32 as the runtime gave them; float64 for the
# page's own arithmetic): a round trip per text through Playwright's `fill` costs more than the model run itself.
TEXTS_JS = """async (r, [texts, keys]) => {
  const box = r.querySelector('textarea[name="text"]'), out = [];
  const shown = (t) => new Promise((ok) => { const f = () => (r.dataset.text === t ? ok() : setTimeout(f, 1)); f(); });
  const encode = (a) => {
    const typed = a instanceof Float32Array ? a : Float64Array.from(a);
    const bytes = new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
    let s = "";
    for (let i = 0; i < bytes.length; i += 32768) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
    return [typed instanceof Float32Array ? "float32" : "float64", btoa(s)];
  };
  for (const text of texts) {
    box.value = text; box.dispatchEvent(new Event("input")); await shown(text);
    out.push(Object.fromEntries(keys.map((k) => [k, encode(r.tbResult[k])])));
  }
  return out;
}"""


def page_results(root, texts, keys, chunk=25) -> list[dict[str, torch.Tensor]]:
    "For each text, typed into the explorer's box, the arrays `keys` of the page's result, as float64 tensors."
    import base64
    import numpy as np
    results = []
    for i in range(0, len(texts), chunk):
        for item in root.evaluate(TEXTS_JS, [texts[i:i + chunk], list(keys)]):
            results.append({k: torch.from_numpy(np.frombuffer(base64.b64decode(b), dtype=dtype).astype(np.float64))
                            for k, (dtype, b) in item.items()})
    return results


@functools.lru_cache(maxsize=1)
def char_dataset():
    from transformerbook.training import load_dataset
    return load_dataset("tinyshakespeare", tokenizer="char")


def validation_texts(n, max_len, seed, min_len=1):
    "n windows of the validation split, random start and length in [min_len, max_len] (as tests/test_live.py)."
    tok, _, val_ids = char_dataset()
    gen = torch.Generator().manual_seed(seed)
    texts = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=gen))
        start = int(torch.randint(0, len(val_ids) - length, (1,), generator=gen))
        texts.append(tok.decode(val_ids[start:start + length].tolist()))
    return texts


# The sampling explorer's table as the reader sees it: each row's token id and shown warped probability, and the count
# of tokens kept.
ROWS_JS = """r => [[...r.querySelectorAll("tbody tr")].map(row => [row.dataset.tokenId,
                                                              row.querySelector(".p-warped").innerText]),
              r.querySelector(".tbx-kept").innerText]"""


def test_sampling_explorer(page, base_url):
    from transformerbook import live
    from transformerbook.sampling import warp_logits
    root = open_explorer(page, base_url, "sampling")
    assert wait_live(page, root, explorers.SAMPLING_PROMPTS[0]) == "true", root.inner_text()
    for control, value in [("temperature", 0.7), ("top_p", 0.9), ("top_k", 2), ("top_k", 0)]:
        assert_responds(root, control, value)
    # keyboard: the arrow key moves the focused slider and the view follows
    before = view_text(root)
    root.locator('[name="temperature"]').focus()
    page.keyboard.press("ArrowRight")
    assert view_text(root) != before and root.locator('[name="temperature"]').input_value() == "0.75"
    prompt = "KING RICHARD III:\nNow is the winter of our disc"
    type_text(page, root, prompt)
    logits = torch.from_numpy(live.model_outputs("shakespeare-char", prompt)["logits"][-1]).double()
    for temperature, top_k, top_p in [(0.7, 0, 0.9), (1.5, 10, 1.0), (0.3, 3, 0.5)]:
        root.locator('[name="temperature"]').fill(str(temperature))
        root.locator('[name="top_k"]').fill(str(top_k))
        root.locator('[name="top_p"]').fill(str(top_p))
        want = torch.softmax(warp_logits(logits, temperature, top_k or None, top_p), -1)
        got = page_result(root, "warped")["warped"]
        assert (got - want).abs().max() <= 1e-5, (temperature, top_k, top_p)
        rows, kept = root.evaluate(ROWS_JS)  # one round trip (a locator call per row: 2.4-2.7 s a page)
        assert len(rows) == 20
        for token_id, shown in rows:
            assert abs(float(shown) - want[int(token_id)].item()) <= 5e-4 + 1e-5, (token_id, shown)
        assert int(kept) == int((want > 0).sum())
    shown = root.locator(".tbx-sha").inner_text()
    assert shown == live.live_info("shakespeare-char")["weights_sha256"]
    assert not live_accessibility(page, root), live_accessibility(page, root)
    finish(page, root, "sampling", base_url)


@pytest.mark.parametrize("page", ["phone"], indirect=True)  # the desktop page: test_live_explorer_equals_...
def test_inside_explorer(page, base_url):
    from transformerbook import live
    from transformerbook.interpret import induction_score, previous_token_score
    root = open_explorer(page, base_url, "inside")
    assert wait_live(page, root, explorers.INSIDE_TEXT) == "true", root.inner_text()
    info = live.live_info("induction")
    assert root.locator(".tbx-sha").inner_text() == info["weights_sha256"]
    heads = root.locator("canvas.tbx-head")
    assert heads.count() == info["n_layers"] * info["n_heads"]
    assert root.locator(".tbx-ind td").first.inner_text() == "—"  # no repeat yet: no induction score
    root.locator('button[name="repeat"]').click()
    text = explorers.INSIDE_TEXT * 2
    wait_live(page, root, text)
    weights = torch.from_numpy(live.model_outputs("induction", text)["attention"])  # (L, H, T, T)
    want = {"prev": previous_token_score(weights), "ind": induction_score(weights, len(text) // 2)}
    got = root.evaluate("r => ({prev: r.tbResult.prev, ind: r.tbResult.ind})")
    for key in want:
        torch.testing.assert_close(torch.tensor(got[key], dtype=torch.float64).reshape(want[key].shape),
                                   want[key].double(), atol=1e-4, rtol=0)
    # keyboard: focus a head, move with the arrows, the weight and its two characters are read out
    heads.nth(info["n_heads"]).focus()  # layer 1, head 0
    page.keyboard.press("ArrowLeft")
    readout = root.locator(".tbx-readout").inner_text()
    T = len(text)
    assert readout.startswith(f"Layer 1, head 0: query {T - 1} ") and f"key {T - 3} " in readout, readout
    assert readout.endswith(f"weight {weights[1, 0, T - 1, T - 3].item():.4f}.")
    heads.nth(0).hover()
    assert root.locator(".tbx-readout").inner_text().startswith("Layer 0, head 0: query ")
    # the logit lens's caption wraps inside the phone's width (a <caption> would scroll away with its wide table)
    assert root.locator(".tbx-caption").evaluate(
        "c => c.scrollWidth <= c.clientWidth + 1 && c.getBoundingClientRect().right <= window.innerWidth")
    assert not live_accessibility(page, root), live_accessibility(page, root)
    finish(page, root, "inside", base_url)


@pytest.fixture(scope="module")
def offline(chrome, base_url):
    "A desktop page that may fetch only the site's own files: any other request is aborted (and recorded)."
    context = chrome.new_context(viewport=VIEWPORTS["desktop"])
    host, blocked = urlparse(base_url).netloc, []

    def only_the_site(route):
        if urlparse(route.request.url).netloc == host:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()
    context.route("**/*", only_the_site)
    page = context.new_page()
    page.blocked = blocked
    yield page
    context.close()


N_PAGE_TEXTS = 50  # per model and kind (short, 200 characters): 100 texts per model, as tests/test_live.py's
N_LATENCY_TEXTS = 20
# In the page: for each 200-character text, put all but its last character in the box (an input event), wait for the
# view, then add the last character (an input event, as a keystroke gives) and read the page's own measurement.
LATENCY_JS = """async (r, texts) => {
  const box = r.querySelector('textarea[name="text"]'), out = [];
  const shown = (t) => new Promise((ok) => { const f = () => (r.dataset.text === t ? ok() : setTimeout(f, 1)); f(); });
  for (const text of texts) {
    box.value = text.slice(0, -1); box.dispatchEvent(new Event("input")); await shown(box.value);
    box.value = text; box.dispatchEvent(new Event("input")); await shown(text);
    out.push(Number(r.dataset.latencyMs));
  }
  return out;
}"""


@pytest.mark.parametrize("name", ["sampling", "inside"])
def test_live_explorer_equals_the_package_offline(offline, base_url, name):
    """Typed into the page, with every request to another host blocked: validation texts give the package's numbers
    (probabilities 1e-5 and the same argmax; attention weights and the logit lens 1e-4). Half the texts are shorter
    than the model's window (the page pads them), half are 200 characters (the page reads the last window). Then
    the time from a keystroke to the updated view for 200-character texts is printed (median and 95th percentile)."""
    from transformerbook import live
    model = {"sampling": "shakespeare-char", "inside": "induction"}[name]
    root = open_explorer(offline, base_url, name)
    assert wait_live(offline, root) == "true", root.inner_text()
    info = live.live_info(model)
    L, H, V = info["n_layers"], info["n_heads"], info["vocab_size"]
    worst = {"probs": 0.0, "attention": 0.0, "logit_lens": 0.0}
    texts = validation_texts(N_PAGE_TEXTS, info["context_length"], seed=3)
    long_texts = validation_texts(N_PAGE_TEXTS + N_LATENCY_TEXTS, 200, seed=4, min_len=200)
    texts += long_texts[:N_PAGE_TEXTS]
    for text in texts[:2]:  # typed by Playwright as a reader types (the rest: one input event each, in TEXTS_JS)
        type_text(offline, root, text)
    keys = ["probs"] if name == "sampling" else ["attention", "lens"]
    for text, got in zip(texts, page_results(root, texts, keys), strict=True):
        want = {k: torch.from_numpy(v).double() for k, v in live.model_outputs(model, text).items()}
        T = want["logits"].shape[0]
        if name == "sampling":
            probs, got = torch.softmax(want["logits"][-1], -1), got["probs"]
            worst["probs"] = max(worst["probs"], (got - probs).abs().max().item())
            assert int(got.argmax()) == int(probs.argmax()), repr(text)
        else:
            attention, lens = got["attention"].reshape(L, H, T, T), got["lens"].reshape(L + 1, T, V)
            worst["attention"] = max(worst["attention"], (attention - want["attention"]).abs().max().item())
            worst["logit_lens"] = max(worst["logit_lens"], (lens - want["logit_lens"]).abs().max().item())
            assert (lens.argmax(-1) == want["logit_lens"].argmax(-1)).all(), repr(text)
    latency = sorted(root.evaluate(LATENCY_JS, long_texts[N_PAGE_TEXTS:]))
    print(f"\n{name} in Chromium vs the package, {len(texts)} validation texts: max |difference| "
          + ", ".join(f"{k} {v:.1e}" for k, v in worst.items() if v)
          + f"; keystroke to updated view, {len(latency)} texts of 200 characters (one-thread WebAssembly): median "
            f"{latency[len(latency) // 2]:.1f} ms, p95 {latency[round(0.95 * (len(latency) - 1))]:.1f} ms")
    assert worst["probs"] <= 1e-5 and worst["attention"] <= 1e-4 and worst["logit_lens"] <= 1e-4, worst
    assert not offline.blocked, f"the page asked other hosts: {offline.blocked}"
    if name == "sampling":
        check_sampler(offline, root)


def check_sampler(page, root):
    "07's sampler and bad-text message (on the offline page of the test above)."
    from transformerbook import live
    # a character outside the alphabet is named; the numbers wait for a text the model can read
    root.locator('textarea[name="text"]').fill("Café ☺")
    page.wait_for_function("r => r.dataset.error", arg=root.element_handle())
    message = root.locator(".tbx-message").inner_text()
    assert "“é”" in message and "“☺”" in message and "U+00E9" in message, message
    # the seeded sampler writes what transformerbook.live.sample_text writes for the same seed
    type_text(page, root, "ROMEO:\n")
    root.locator('[name="temperature"]').fill("0.8")
    root.locator('[name="top_k"]').fill("20")
    root.locator('[name="top_p"]').fill("1")
    root.locator('[name="seed"]').fill("7")
    root.locator('[name="n_chars"]').fill("30")
    root.locator('button[name="sample"]').click()
    page.wait_for_function("r => r.querySelector('.tbx-sample').dataset.seed === '7' && "
                           "!r.querySelector('button[name=sample]').disabled", arg=root.element_handle())
    want = live.sample_text("shakespeare-char", "ROMEO:\n", 30, seed=7, temperature=0.8, top_k=20, top_p=1.0)
    assert root.locator(".tbx-sample").get_attribute("data-text") == want


def test_live_explorer_on_a_throttled_phone(offline, base_url):
    """At 400 px with the CPU slowed 4x (Chrome DevTools' throttling) from before the page loads, the runtime starts
    once the reader is at the explorer and the real model answers the reader's keystrokes, equal to the package.
    Prints how long the start took."""
    from transformerbook import live
    offline.set_viewport_size(VIEWPORTS["phone"])
    cdp = offline.context.new_cdp_session(offline)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
    try:
        start = time.perf_counter()
        root = open_explorer(offline, base_url, "sampling")  # loaded, then scrolled to the explorer
        jumped = time.perf_counter()
        assert wait_live(offline, root, explorers.SAMPLING_PROMPTS[0], timeout=120_000) == "true"
        loaded, started = jumped - start, time.perf_counter() - jumped
        root.locator('textarea[name="text"]').press("Control+End")
        offline.keyboard.type("ind")  # key by key, after the prompt
        text = explorers.SAMPLING_PROMPTS[0] + "ind"
        wait_live(offline, root, text)
        ms = float(root.get_attribute("data-latency-ms"))
        assert root.evaluate("r => r.getBoundingClientRect().right") <= VIEWPORTS["phone"]["width"] + 0.5
    finally:
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
        offline.set_viewport_size(VIEWPORTS["desktop"])
    probs = torch.softmax(torch.from_numpy(live.model_outputs("shakespeare-char", text)["logits"][-1]).double(), -1)
    assert (page_result(root, "probs")["probs"] - probs).abs().max() <= 1e-5
    print(f"\n400 px, CPU throttled 4x: page load {loaded:.1f} s, then from the jump to the explorer to the model's "
          f"first answer {started:.1f} s; keystroke to updated "
          f"view {ms:.0f} ms")
    assert not offline.blocked


def test_live_files_are_the_sites_own(site):
    """The build put the runtime and both models into the site (the binary files gzip-compressed, as the page fetches
    them), each model's JSON naming the package's checkpoint; what they add to a reader's download is under 15 MB."""
    import gzip
    from transformerbook import live
    import live_assets
    for f in live_assets.RUNTIME_FILES:
        assert (site / "_static" / "ort" / (f + ".gz" if f.endswith(live_assets.GZIPPED) else f)).is_file(), f
    for name in live.LIVE_MODELS:
        info = json.loads((site / "_static" / "live" / f"{name}.json").read_text(encoding="utf-8"))
        assert info["weights_sha256"] == live.live_info(name)["weights_sha256"]
        packed = (site / "_static" / "live" / f"{info['onnx']}.gz").read_bytes()
        assert len(gzip.decompress(packed)) == info["onnx_bytes"]
    download = sum(f.stat().st_size for folder in ("ort", "live") for f in (site / "_static" / folder).iterdir())
    assert download <= live_assets.BUDGET_BYTES, f"the live explorers add {download / 1e6:.1f} MB to the download"


def test_live_explorers_fall_back_without_webassembly(chrome, base_url):
    """When the runtime cannot start (its .wasm.gz blocked), the live explorer says why and shows the precomputed
    numbers (11's fallback is the same code's; test_explorers_work_from_file_urls sees it)."""
    context = chrome.new_context(viewport=VIEWPORTS["desktop"])
    context.route("**/*.wasm.gz", lambda route: route.abort())
    page = context.new_page()
    for name in ("sampling",):
        root = open_explorer(page, base_url, name)
        assert wait_live(page, root) == "false"
        why = root.locator(".tbx-why").inner_text()
        assert why.startswith("The model could not start in this browser (") and "computed when the site was built" \
            in why, why
        assert root.locator(".tbx-sha").inner_text()  # which checkpoint the numbers are from
        assert root.locator("tbody tr").count() >= 2 and "Starting" not in root.inner_text()
        if name == "inside":
            assert root.locator("canvas.tbx-head").count() == 8
    context.close()


def test_attention_explorer(page, base_url):
    import torch.nn.functional as F
    root = open_explorer(page, base_url, "attention")
    lm, tok = char_model()
    for control, value in [("layer", 2), ("head", 3), ("query", 40)]:
        assert_responds(root, control, value)
    ids = torch.tensor([tok.encode(explorers.ATTENTION_PASSAGE)])
    T = ids.shape[1]
    with torch.no_grad():  # independently of tools/explorers.py: SDPA with v = I returns the weights themselves
        states = lm.residual_stream(ids)
        for layer, head, query in [(0, 0, 10), (2, 3, 40), (lm.config.n_layers - 1, 1, T - 1)]:
            block = lm.blocks[layer]
            a, h = block.attn, block.ln_1(states[layer])
            q, k = split_heads(a.q_proj(h), a.d_head), split_heads(a.k_proj(h), a.d_head)
            eye = torch.eye(T).expand(1, a.n_heads, T, T)
            weights = F.scaled_dot_product_attention(q, k, eye, is_causal=True)[0, head, query]  # (T,)
            set_value(root, "layer", layer)
            set_value(root, "head", head)
            set_value(root, "query", query)
            rows = root.locator("table.tbx-top tbody tr")
            assert rows.count() == min(5, query + 1)
            for i in range(rows.count()):
                key = int(rows.nth(i).get_attribute("data-key"))
                assert rows.nth(i).locator(".tbx-weight").inner_text() == f"{weights[key].item():.3f}", \
                    (layer, head, query, key)
            top = torch.topk(weights[:query + 1], rows.count()).values
            assert float(rows.nth(0).locator(".tbx-weight").inner_text()) == pytest.approx(top[0].item(), abs=6e-4)
    finish(page, root, "attention", base_url)


def test_positional_explorer(page, base_url):
    from transformerbook.embeddings import position_rotation_matrix, sinusoidal_positional_encoding
    root = open_explorer(page, base_url, "positional")
    for control, value in [("t", 30), ("k", 12), ("pair", 3)]:
        assert_responds(root, control, value)
    pe = sinusoidal_positional_encoding(128, 64)
    for t, k, i in [(30, 12, 3), (0, 0, 0), (95, 32, 31), (7, 1, 10)]:
        set_value(root, "t", t)
        set_value(root, "k", k)
        set_value(root, "pair", i)
        rotated = position_rotation_matrix(k, 64) @ pe[t]
        for cls, vec in (("tbx-pt", pe[t]), ("tbx-rot", rotated), ("tbx-target", pe[t + k])):
            cells = root.locator(f"tr.{cls} td")
            assert [cells.nth(j).inner_text() for j in range(2)] == [f"{vec[2 * i].item():.3f}",
                                                                      f"{vec[2 * i + 1].item():.3f}"], (cls, t, k, i)
        assert float(root.locator(".tbx-maxdiff").inner_text()) < 1e-4  # p_{t+k} = M_k p_t
    finish(page, root, "positional", base_url)


def test_bpe_explorer(page, base_url):
    from transformerbook.tokenization import BPETokenizer, tokenizer_from_dict
    root = open_explorer(page, base_url, "bpe")
    assert_responds(root, "merges", 10)
    tok = BPETokenizer().train(explorers.BPE_TEXT, 256 + explorers.BPE_MERGES)
    merges = [[a, b] for a, b in tok.merges]
    assert int(root.locator('[name="merges"]').get_attribute("max")) == len(merges)
    for s in (0, 1, 10, len(merges)):
        set_value(root, "merges", s)
        part = tokenizer_from_dict({"kind": "bpe", "pattern": tok.pattern, "merges": merges[:s], "special_tokens": {}})
        ids = part.encode(explorers.BPE_TEXT)
        assert int(root.locator(".tbx-count").inner_text()) == len(ids)
        chips = root.locator(".tbx-chip").all_inner_texts()
        assert chips == [part.decode([i]).replace(" ", "␣").replace("\n", "⏎") for i in ids]
        if s:
            a, b = merges[s - 1]
            assert root.locator(".tbx-newtoken").first.inner_text() == part.decode([a, b]).replace(" ", "␣")
    finish(page, root, "bpe", base_url)


def test_moe_explorer(page, base_url):
    root = open_explorer(page, base_url, "moe")
    for control, value in [("layer", 1), ("token", 20)]:
        assert_responds(root, control, value)
    data = json.loads((page.request.get(f"{base_url}/_static/explorers/data/moe.json")).text())
    assert data["passage"] == explorers.MOE_PASSAGE and len(data["tokens"]) == len(explorers.MOE_PASSAGE)
    for layer, token in [(0, 0), (1, 20), (1, len(data["tokens"]) - 1)]:
        set_value(root, "layer", layer)
        set_value(root, "token", token)
        probs = torch.tensor(data["layers"][layer]["probs"][token])
        shown = [float(x) for x in root.locator(".tbx-prob").all_inner_texts()]
        assert shown == pytest.approx(probs.tolist(), abs=6e-4)
        top = probs.topk(2)  # TopKRouter: top-2 of the softmax, renormalised
        chosen = [int(r.get_attribute("data-expert")) for r in root.locator("tr.tbx-chosen").all()]
        assert sorted(chosen) == sorted(top.indices.tolist())
        mix = {int(r.get_attribute("data-expert")): float(r.locator(".tbx-mix").inner_text())
               for r in root.locator("tr.tbx-chosen").all()}
        for e, w in zip(top.indices.tolist(), (top.values / top.values.sum()).tolist()):
            assert mix[e] == pytest.approx(w, abs=1.5e-3)
        assert sum(probs.tolist()) == pytest.approx(1, abs=1e-3)
    finish(page, root, "moe", base_url)


def test_moe_explorer_data_is_the_routers_output(tmp_path):
    "The shipped routing equals the trained model's `TopKRouter` run again on the passage."
    from transformerbook.moe import MoEFeedForward
    explorers.write_data(tmp_path, verbose=False)
    data = json.loads((tmp_path / "moe.json").read_text(encoding="utf-8"))
    model, tok = explorers._moe_model()
    layers = [m for m in model.modules() if isinstance(m, MoEFeedForward)]
    x, seen = torch.tensor([tok.encode(explorers.MOE_PASSAGE)]), []
    hooks = [m.router.register_forward_hook(lambda mod, args, out: seen.append(out)) for m in layers]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    for layer, (logits, weights, indices) in zip(data["layers"], seen):
        assert layer["experts"] == indices.tolist()
        torch.testing.assert_close(torch.tensor(layer["weights"]), weights, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(layer["probs"]), logits.softmax(-1), atol=1e-4, rtol=0)


def test_explorer_cache_is_kept_per_torch_version(monkeypatch):
    "Two environments sharing one cache (the lock's, `make test-oldest`'s) train different models: each keys its own."
    key = explorers.cache_key()
    assert explorers.cache_key() == key  # stable within one environment
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".other")
    assert explorers.cache_key() != key


def test_chinchilla_explorer(page, base_url):
    from transformerbook.scaling import BESIROGLU_2024, HOFFMANN_2022
    root = open_explorer(page, base_url, "chinchilla")
    for control, value in [("log10_flops", 21), ("law", 1), ("flops", "5.76e23")]:
        assert_responds(root, control, value)
    for law_index, law in enumerate((HOFFMANN_2022, BESIROGLU_2024)):
        set_value(root, "law", law_index)
        for flops in ("1e18", "5.76e23", "3.14e25"):
            set_value(root, "flops", flops)
            n_opt, d_opt = law.compute_optimal(float(flops))
            n_cell, d_cell = root.locator(".tbx-n"), root.locator(".tbx-d")
            assert float(n_cell.get_attribute("data-value")) == pytest.approx(n_opt, rel=1e-9)
            assert float(d_cell.get_attribute("data-value")) == pytest.approx(d_opt, rel=1e-9)
            assert (float(n_cell.inner_text()) == float(f"{n_opt:.3g}")
                    and float(d_cell.inner_text()) == float(f"{d_opt:.3g}"))
            assert float(root.locator(".tbx-loss").inner_text()) == pytest.approx(law.loss(n_opt, d_opt), abs=6e-4)
        set_value(root, "log10_flops", 22)  # the slider: C = 10^22
        n_opt, _ = law.compute_optimal(1e22)
        assert float(root.locator(".tbx-n").get_attribute("data-value")) == pytest.approx(n_opt, rel=1e-3)
        assert float(root.locator('[name="flops"]').input_value()) == pytest.approx(1e22, rel=1e-3)
    finish(page, root, "chinchilla", base_url)


def test_widget_code_is_folded_on_the_site(site):
    "The ipywidgets cells of 03, 05 and 07 are behind a toggle; the in-page explorer follows them."
    for name in ("attention", "positional", "sampling"):
        html = (site / f"{CHAPTERS[name]}.html").read_text(encoding="utf-8")
        at = html.index(f'data-explorer="{name}"')
        folded = html[:at].rindex("tag_hide-input")  # myst-nb's class for a cell whose code sits behind a toggle
        cell = html[folded:at]
        assert "interact" in cell and "<details" in cell, f"{name}: the widget cell is not folded before the explorer"


def test_explorers_work_from_file_urls(site, chrome):
    "Opened straight from disk, every explorer starts (its data comes in a script, not a fetch) and announces changes."
    page = chrome.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for name, stem in CHAPTERS.items():
        page.goto((site / f"{stem}.html").as_uri(), wait_until="load")
        root = page.locator(f'.tb-explorer[data-explorer="{name}"]')
        assert root.get_attribute("data-ready") == "true", f"{name} does not start from file://"
        if name in LIVE:  # live: no WebAssembly from disk; the precomputed view instead, once the reader is there
            root.scroll_into_view_if_needed()
            assert wait_live(page, root) == "false"
            assert "opened from a file" in root.locator(".tbx-why").inner_text()
            assert "make serve" in root.locator(".tbx-why").inner_text()
        if name == "inside":
            assert root.locator("canvas.tbx-head").count() == 8 and root.locator(".tbx-lens tbody tr").count() == 3
            continue
        status = root.locator('[role="status"]')
        before = status.inner_text()
        control = root.locator("input[type=range]").first
        control.focus()
        page.keyboard.press("End")  # the keyboard alone moves a slider to its maximum
        assert control.input_value() == control.get_attribute("max")
        assert status.inner_text() and status.inner_text() != before, f"{name}: the live region did not change"
    assert not errors, errors
    page.close()
