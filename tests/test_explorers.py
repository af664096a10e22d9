"""The in-page explorers (tools/explorers.py, site/_ext/book_explorers.py, site/_static/explorers/) in a real headless
Chromium at a phone's and a desktop's width: every control is a labelled native input that changes what the explorer
shows, and the numbers shown equal the book's own Python functions for the same settings. Also: the figure/explorer
cell options (tools/figures.py) and the diagrams' sources.

The site is built from the six chapters that hold an explorer (saved outputs, no execution). Screenshots of each
explorer go to `_build/screenshots/explorers/`.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import nbformat
import pytest
import torch

from conftest import ROOT
import explorers
import figures
import nb2myst

pytestmark = pytest.mark.slow

CHAPTERS = {"sampling": "07_sampling", "attention": "03_multihead", "positional": "05_embeddings",
            "bpe": "05a_tokenization", "moe": "10_moe", "chinchilla": "09_scaling"}
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


def test_diagrams_are_drawn_from_their_source(tmp_path):
    "The committed SVGs are what nbs/figures/diagrams.py draws now (re-run it after editing a diagram)."
    sys.path.insert(0, str(ROOT / "nbs" / "figures"))
    import diagrams
    import matplotlib.pyplot as plt
    for name, draw in diagrams.DIAGRAMS.items():
        fig = draw()
        fig.savefig(tmp_path / f"{name}.svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        committed = ROOT / "nbs" / "figures" / f"{name}.svg"
        assert committed.is_file(), f"{committed} is missing: run python nbs/figures/diagrams.py"
        assert (tmp_path / f"{name}.svg").read_text() == committed.read_text(), \
            f"{committed.name} is out of date: run python nbs/figures/diagrams.py"


# ------------------------------------------------------------------------------------------ the site

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    "The site built from the six chapters with explorers (explorer data from the book's cache, computed once)."
    tmp = tmp_path_factory.mktemp("explorer-site")
    nbs = tmp / "nbs"
    (nbs / "figures").mkdir(parents=True)
    for stem in CHAPTERS.values():
        shutil.copy2(ROOT / "nbs" / f"{stem}.ipynb", nbs)
    for svg in (ROOT / "nbs" / "figures").glob("*.svg"):
        shutil.copy2(svg, nbs / "figures")
    out = tmp / "_site"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--nbs", str(nbs), "--out", str(out),
                           "--build", str(tmp / "_build")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"site build failed:\n{done.stdout}\n{done.stderr}"
    return out


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base_url(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(params=list(VIEWPORTS))
def page(request, chrome):
    "A page at a phone's or a desktop's size that records requests and console errors."
    context = chrome.new_context(viewport=VIEWPORTS[request.param])
    page = context.new_page()
    page.viewport_name = request.param
    page.requested, page.errors = [], []
    page.on("request", lambda r: page.requested.append(r.url))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def open_explorer(page, base_url, name):
    "Load the chapter page of explorer `name`; return the explorer's root element, scrolled into view."
    page.goto(f"{base_url}/{CHAPTERS[name]}.html", wait_until="load")
    root = page.locator(f'.tb-explorer[data-explorer="{name}"]')
    assert root.count() == 1, f"{CHAPTERS[name]} has no {name} explorer"
    root.wait_for(state="visible")
    assert root.get_attribute("data-ready") == "true", f"the {name} explorer did not start (its data is missing?)"
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


def test_sampling_explorer(page, base_url):
    from transformerbook.sampling import warp_logits
    root = open_explorer(page, base_url, "sampling")
    lm, tok = char_model()
    for control, value in [("temperature", 0.7), ("top_p", 0.9), ("top_k", 2), ("top_k", 0),
                           ("prompt", 1), ("prompt", 0)]:
        assert_responds(root, control, value)
    # keyboard: the arrow key moves the focused slider and the view follows
    before = view_text(root)
    root.locator('[name="temperature"]').focus()
    page.keyboard.press("ArrowRight")
    assert view_text(root) != before and root.locator('[name="temperature"]').input_value() == "0.75"
    root.locator('[name="temperature"]').fill("0.7")
    prompt = explorers.SAMPLING_PROMPTS[0]
    with torch.no_grad():
        logits = lm(torch.tensor([tok.encode(prompt)[-lm.config.context_length:]]))[0, -1]
    for temperature, top_k, top_p in [(0.7, 0, 0.9), (1.5, 10, 1.0), (0.3, 3, 0.5)]:
        root.locator('[name="temperature"]').fill(str(temperature))
        root.locator('[name="top_k"]').fill(str(top_k))
        root.locator('[name="top_p"]').fill(str(top_p))
        want = torch.softmax(warp_logits(logits, temperature, top_k or None, top_p), -1)
        rows = root.locator("tbody tr")
        assert rows.count() == 20
        for i in range(rows.count()):
            row = rows.nth(i)
            token_id = int(row.get_attribute("data-token-id"))
            assert row.locator(".p-warped").inner_text() == f"{want[token_id].item():.3f}", \
                (temperature, top_k, top_p, tok.decode([token_id]))
        assert int(root.locator(".tbx-kept").inner_text()) == int((want > 0).sum())
    finish(page, root, "sampling", base_url)


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
            q, k = a.split_heads(a.q_proj(h)), a.split_heads(a.k_proj(h))
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


def test_figures_are_numbered_with_captions_and_alt_text(site, chrome, base_url):
    """On the built pages every image in the text is a figure numbered by its chapter (Figure 7.2) whose alt text is
    not a file name."""
    page = chrome.new_page()
    for stem in CHAPTERS.values():
        page.goto(f"{base_url}/{stem}.html", wait_until="load")
        images = page.evaluate("""() => [...document.querySelectorAll('article img')].map(i => ({
            alt: i.alt, src: i.getAttribute('src'),
            number: i.closest('figure')?.querySelector('.caption-number')?.textContent}))""")
        assert images, stem
        for img in images:
            assert img["alt"] and "/" not in img["alt"] and not img["alt"].endswith((".png", ".svg")), (stem, img)
            chapter = f"{int(stem[:2])}{stem[2] if stem[2].isalpha() else ''}"  # 05a_tokenization -> 5a
            assert re.fullmatch(rf"Figure {chapter}\.\d+\s*", img["number"] or ""), (stem, img)
    page.close()


def test_explorers_work_from_file_urls(site, chrome):
    "Opened straight from disk, every explorer starts (its data comes in a script, not a fetch) and announces changes."
    page = chrome.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for name, stem in CHAPTERS.items():
        page.goto((site / f"{stem}.html").as_uri(), wait_until="load")
        root = page.locator(f'.tb-explorer[data-explorer="{name}"]')
        assert root.get_attribute("data-ready") == "true", f"{name} does not start from file://"
        status = root.locator('[role="status"]')
        before = status.inner_text()
        control = root.locator("input[type=range]").first
        control.focus()
        page.keyboard.press("End")  # the keyboard alone moves a slider to its maximum
        assert control.input_value() == control.get_attribute("max")
        assert status.inner_text() and status.inner_text() != before, f"{name}: the live region did not change"
    assert not errors, errors
    page.close()
