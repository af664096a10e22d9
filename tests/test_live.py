"""The website's live models (`transformerbook.live`): the exported ONNX files, run by ONNX Runtime in Python, equal the
package's PyTorch functions on 100 windows of the validation split per model (the page is compared on a subset of these
texts in tests/test_explorers.py, where every text costs a browser round trip); the checkpoint's SHA-256 travels with
the file; the seeded sampler is the one the page implements.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
import torch

from conftest import ROOT
from transformerbook import live
from transformerbook.training import load_dataset

N_TEXTS = 100
PROB_ATOL, ARRAY_ATOL = 1e-5, 1e-4  # probabilities; attention weights and logit lens


def validation_texts(n: int, max_len: int, seed: int) -> list[str]:
    "n windows of the validation split, of random start and random length 1..max_len (seeded)."
    tok, _, val_ids = load_dataset("tinyshakespeare", tokenizer="char")
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(n):
        length = int(rng.integers(1, max_len + 1))
        start = int(rng.integers(0, len(val_ids) - length))
        texts.append(tok.decode(val_ids[start:start + length].tolist()))
    return texts


def softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", list(live.LIVE_MODELS))
def test_onnx_runtime_equals_the_package(name):
    path = live.live_file(name)
    info = live.live_info(name)
    worst = {"probs": 0.0, "attention": 0.0, "logit_lens": 0.0}
    texts = validation_texts(N_TEXTS, info["context_length"], seed=list(live.LIVE_MODELS).index(name))
    assert len(texts) == N_TEXTS and len({len(t) for t in texts}) > 20  # short and long windows
    for text in texts:
        ours, theirs = live.onnx_outputs(path, text), live.model_outputs(name, text)
        T = len(text)
        assert ours["logits"].shape == (T, info["vocab_size"])
        assert ours["attention"].shape == (info["n_layers"], info["n_heads"], T, T)
        assert ours["logit_lens"].shape == (info["n_layers"] + 1, T, info["vocab_size"])
        p, q = softmax(ours["logits"]), softmax(theirs["logits"])
        worst["probs"] = max(worst["probs"], float(np.abs(p - q).max()))
        assert (ours["logits"].argmax(-1) == theirs["logits"].argmax(-1)).all(), repr(text)
        for key in ("attention", "logit_lens"):
            worst[key] = max(worst[key], float(np.abs(ours[key] - theirs[key]).max()))
    print(f"\n{name}: {N_TEXTS} validation texts, max |ONNX Runtime - PyTorch|: "
          + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert worst["probs"] <= PROB_ATOL, worst
    assert worst["attention"] <= ARRAY_ATOL and worst["logit_lens"] <= ARRAY_ATOL, worst


def test_padding_leaves_the_text_positions_unchanged():
    "The graph has a fixed length: the page pads; the causal mask keeps the padding out of the text's positions."
    path = live.live_file("shakespeare-char")
    short = live.onnx_outputs(path, "ROMEO:\nBut soft")
    longer = live.onnx_outputs(path, "ROMEO:\nBut soft, what light through yonder window breaks?")
    T = short["logits"].shape[0]
    np.testing.assert_allclose(short["logits"], longer["logits"][:T], atol=1e-5, rtol=0)
    np.testing.assert_allclose(short["attention"], longer["attention"][:, :, :T, :T], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", list(live.LIVE_MODELS))
def test_the_file_names_its_checkpoint(name, capsys):
    path = live.live_file(name)
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    info = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    hashes = live.print_live_hashes()
    assert meta["weights_sha256"] == info["weights_sha256"] == hashes[name]
    assert hashes[name] in capsys.readouterr().out
    assert info["alphabet"] == live.live_model(name)[1].chars and info["onnx_bytes"] == path.stat().st_size


def test_bad_text_is_named():
    info = live.live_info("shakespeare-char")
    with pytest.raises(ValueError, match=r"\['é', '☺'\]"):
        live.encode_window(info, "Café ☺")
    with pytest.raises(ValueError, match="at least one"):
        live.encode_window(info, "")
    assert len(live.encode_window(info, "a" * 200)) == info["context_length"]  # the last context_length characters


def test_mulberry32_equals_the_pages_generator():
    "The page's `mulberry32` (explorers/live.js) run by Node gives the Python generator's numbers."
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (the browser test in test_explorers.py compares the samples anyway)")
    js = (ROOT / "site" / "_static" / "explorers" / "live.js").read_text(encoding="utf-8")
    start = js.index("function mulberry32")
    body = js[start:js.index("\n  }\n", start) + 4]
    script = body + "\nconst r = mulberry32(%d); const out = []; for (let i = 0; i < 1000; i++) out.push(r());" \
                    "\nconsole.log(JSON.stringify(out));"
    for seed in (0, 42, 2**32 - 1):
        got = json.loads(subprocess.run([node, "-e", script % seed], capture_output=True, text=True,
                                        check=True).stdout)
        rng = live.Mulberry32(seed)
        assert got == [rng.random() for _ in range(1000)], seed


def test_sample_text_is_seeded():
    a = live.sample_text("shakespeare-char", "ROMEO:\n", 40, seed=3, temperature=0.9, top_p=0.95)
    assert a == live.sample_text("shakespeare-char", "ROMEO:\n", 40, seed=3, temperature=0.9, top_p=0.95)
    assert a != live.sample_text("shakespeare-char", "ROMEO:\n", 40, seed=4, temperature=0.9, top_p=0.95)
    greedy = live.sample_text("shakespeare-char", "ROMEO:\n", 10, seed=0, top_k=1)
    model, tok = live.live_model("shakespeare-char")
    text = "ROMEO:\n"
    with torch.no_grad():
        for _ in range(10):
            text += tok.decode([int(model(torch.tensor([tok.encode(text[-64:])]))[0, -1].argmax())])
    assert greedy == text[len("ROMEO:\n"):]  # top-k = 1 is greedy decoding whatever u is
