"""Data for the website's in-page explorers, computed at build time with the book's own exported functions.

Each explorer (drawn by `site/_static/explorers/explorers.js`, placed in a page by the `{explorer}` directive of
`site/_ext/book_explorers.py`) reads one data set, written by `write_data` as `<name>.json` and as `<name>.js` (the same
JSON, assigned to `window.tbExplorerData[name]`, so that a page opened from `file://` can load it with a script tag):

- `sampling` (07): the trained character model's next-character logits after three prompts
  (`training.shakespeare_model("char")`); the page applies `sampling.warp_logits`'s steps itself. With the model
  running in the page (`site/_static/explorers/live.js`, `tools/live_assets.py`), these are what it shows when
  WebAssembly cannot start; `live` holds the model's alphabet, sizes and checkpoint SHA-256 (`live.live_info`).
- `inside` (11): the induction model (`interpret.induction_model()`) on `INSIDE_TEXT` repeated: every head's attention
  weights and the logit lens's top prediction after each block (`live.model_outputs`), shown when the live model
  cannot start; `live` as for `sampling`.
- `attention` (03): that model's attention weights, per layer, head and query, on a Shakespeare passage.
- `positional` (05): `embeddings.sinusoidal_positional_encoding` and the 2x2 blocks of `position_rotation_matrix`.
- `bpe` (05a): `tokenization.BPETokenizer` trained on a short text; the text's tokens after each merge.
- `moe` (10): the routers of a small MoE GPT (`moe.use_moe`, trained briefly here, cached) on a passage.
- `chinchilla` (09): the constants of `scaling.HOFFMANN_2022` and `scaling.BESIROGLU_2024`; the page solves
  `ChinchillaLaw.compute_optimal`'s closed form.

Computing everything takes about 15 s of CPU time the first time (mostly the MoE model's 200 training steps and
loading the cached Shakespeare model); the result is cached in the book's cache folder (`explorers/` beside the
trained models), keyed by a hash of this file and of the package's sources, so later builds copy it.

    python tools/explorers.py _site/_static/explorers/data
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("sampling", "attention", "positional", "bpe", "moe", "chinchilla", "inside")
DIGITS = 5  # decimals kept in the JSON (the page shows 3)

SAMPLING_PROMPTS = ["ROMEO:\nBut soft, what light through yonder w",  # 07's `explore_prompt`
                    "KING RICHARD III:\nNow is the winter of our disc",
                    "First Citizen:\nBefore we proceed any further, hear me sp"]
ATTENTION_PASSAGE = "ROMEO:\nBut soft, what light through yonder window breaks?"
INSIDE_TEXT = "ROMEO:\nBut soft, what light"  # 11's default text; the page's "repeat" doubles it
BPE_TEXT = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and "
            "arrows of outrageous fortune, or to take arms against a sea of troubles, and by opposing end them. "
            "To die, to sleep, no more; and by a sleep to say we end the heart-ache and the thousand natural shocks "
            "that flesh is heir to: 'tis a consummation devoutly to be wish'd. To die, to sleep; to sleep, perchance "
            "to dream.")
BPE_MERGES = 60
MOE_PASSAGE = "KING HENRY VI:\nWhat, shall we to the field and fight?"
MOE_STEPS = 200


def _round(x, digits: int = DIGITS):
    "Nested lists of floats rounded to `digits` decimals (a tensor is converted first)."
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return round(float(x), digits) if isinstance(x, float) else x


def sampling_data() -> dict:
    "The char model's next-character logits (float32, as the model computes them) after each of `SAMPLING_PROMPTS`."
    import torch
    from transformerbook.training import shakespeare_model
    lm, tok = shakespeare_model("char", progress=False)
    prompts = []
    with torch.no_grad():
        for prompt in SAMPLING_PROMPTS:
            ids = torch.tensor([tok.encode(prompt)[-lm.config.context_length:]])
            prompts.append({"prompt": prompt, "logits": _round(lm(ids)[0, -1], 6)})
    return {"model": f"the character-level Shakespeare model of chapter 8 ({lm.n_params():,} parameters)",
            "tokens": [tok.decode([i]) for i in range(tok.vocab_size)], "prompts": prompts,
            "live": _live_info("shakespeare-char"), "default_text": SAMPLING_PROMPTS[0]}


def _live_info(name: str) -> dict:
    "`live.live_info(name)`: what the page shows of the model (alphabet, sizes, SHA-256) even without WebAssembly."
    from transformerbook.live import live_info
    return live_info(name)


def inside_data() -> dict:
    """The induction model on `INSIDE_TEXT` twice: attention weights (L, H, T, T) and, after each block, the logit
    lens's top character and its probability at every position (the page computes the same live)."""
    import torch
    from transformerbook.live import model_outputs
    text = INSIDE_TEXT * 2
    out = model_outputs("induction", text)
    probs = torch.softmax(torch.from_numpy(out["logit_lens"]).double(), -1)  # (L+1, T, V)
    top = probs.max(-1)
    return {"live": _live_info("induction"), "default_text": INSIDE_TEXT, "text": text,
            "attention": _round(torch.from_numpy(out["attention"]), 4),
            "lens_top": top.indices.tolist(), "lens_prob": _round(top.values, 4)}


def attention_weights_per_head(lm, token_ids):
    "(L, H, T, T) attention weights of every layer and head of a GPT on `token_ids` (1, T), as its layers formed them."
    from transformerbook.interpret import attention_patterns
    return attention_patterns(lm, token_ids)[:, 0]  # (L, 1, H, T, T) -> (L, H, T, T)


def attention_data() -> dict:
    "Per-layer, per-head causal attention weights of the trained char model on `ATTENTION_PASSAGE` (rows j <= i only)."
    import torch
    from transformerbook.training import shakespeare_model
    lm, tok = shakespeare_model("char", progress=False)
    ids = torch.tensor([tok.encode(ATTENTION_PASSAGE)])
    w = attention_weights_per_head(lm, ids)
    L, H, T, _ = w.shape
    return {"model": f"the character-level Shakespeare model of chapter 8 ({L} layers x {H} heads)",
            "passage": ATTENTION_PASSAGE, "tokens": [tok.decode([i]) for i in ids[0].tolist()],
            "n_layers": L, "n_heads": H,
            "weights": [[[_round(w[l, h, i, :i + 1], 4) for i in range(T)] for h in range(H)] for l in range(L)]}


def positional_data(T: int = 128, d_model: int = 64, max_offset: int = 32) -> dict:
    "The (T, d_model) sinusoidal encodings and, for k = 0..max_offset, the 2x2 blocks of M_k."
    from transformerbook.embeddings import position_rotation_matrix, sinusoidal_positional_encoding
    pe = sinusoidal_positional_encoding(T, d_model)
    blocks = []
    for k in range(max_offset + 1):
        M = position_rotation_matrix(k, d_model)
        blocks.append([_round(M[2 * i:2 * i + 2, 2 * i:2 * i + 2], 6) for i in range(d_model // 2)])
    return {"T": T, "d_model": d_model, "max_offset": max_offset, "base": 10000.0,
            "encodings": _round(pe, 6), "rotation_blocks": blocks}


def bpe_data() -> dict:
    "`BPETokenizer` trained on `BPE_TEXT` (`BPE_MERGES` merges) and the text's tokens after 0, 1, ... merges."
    from transformerbook.tokenization import BPETokenizer, tokenizer_from_dict
    tok = BPETokenizer().train(BPE_TEXT, 256 + BPE_MERGES)
    merges = list(tok.merges.items())  # learning order
    steps, pieces = [], lambda t, ids: [t.decode_bytes([i]).decode("utf-8", errors="replace") for i in ids]
    for s in range(len(merges) + 1):
        part = tokenizer_from_dict({"kind": "bpe", "pattern": tok.pattern,
                                    "merges": [[a, b] for (a, b), _ in merges[:s]], "special_tokens": {}})
        steps.append(pieces(part, part.encode(BPE_TEXT)))
    return {"text": BPE_TEXT, "n_bytes": len(BPE_TEXT.encode("utf-8")),
            "merges": [{"pair": pieces(tok, pair), "id": new, "token": pieces(tok, [new])[0]}
                       for pair, new in merges],
            "steps": steps}


def _moe_model():
    "A 2-layer char GPT with 8 GELU experts (top-2) per layer, trained `MOE_STEPS` steps with the balancing loss."
    import torch
    import torch.nn.functional as F
    from transformerbook.lm_head import GPT, GPTConfig
    from transformerbook.moe import collect_router_logits, load_balancing_loss, use_moe
    from transformerbook.training import get_batch, load_dataset
    tok, train_ids, _ = load_dataset("tinyshakespeare", tokenizer="char")
    torch.manual_seed(0)  # chapter 10's recipe (`train_moe_gpt` with α = 0.01), shorter
    config = GPTConfig(vocab_size=tok.vocab_size, context_length=64, d_model=64, n_heads=4, n_layers=2, d_ff=128)
    model = use_moe(GPT(config), n_experts=8, top_k=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode(False):
        for _ in range(MOE_STEPS):
            token_ids, targets = get_batch(train_ids, 16, config.context_length, gen)  # (16, 64), (16, 64)
            loss = F.cross_entropy(model(token_ids).flatten(0, 1), targets.flatten())
            loss = loss + 0.01 * load_balancing_loss(collect_router_logits(model), 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval(), tok


def moe_data() -> dict:
    "Each layer's router probabilities (softmax over 8 experts) and top-2 choices for the tokens of `MOE_PASSAGE`."
    import torch
    from transformerbook.moe import MoEFeedForward
    model, tok = _moe_model()
    ids = torch.tensor([tok.encode(MOE_PASSAGE)])
    moes = [m for m in model.modules() if isinstance(m, MoEFeedForward)]
    inputs = {}  # each MoE layer's input (1, T, D), caught on the way through
    hooks = [m.register_forward_pre_hook(lambda m, args: inputs.__setitem__(m, args[0])) for m in moes]
    with torch.no_grad():
        model(ids)
        layers = []
        for m in moes:
            logits, weights, indices = m.router(inputs[m][0])  # (T, E), (T, K) renormalised, (T, K): `TopKRouter`
            layers.append({"probs": _round(logits.float().softmax(-1), 4), "experts": indices.tolist(),
                           "weights": _round(weights, 4)})
    for h in hooks:
        h.remove()
    return {"model": f"a 2-layer character GPT with {model.blocks[0].mlp.n_experts} experts per layer, top-2, "
                     f"trained {MOE_STEPS} steps with the balancing loss (α = 0.01)",
            "passage": MOE_PASSAGE, "tokens": [tok.decode([i]) for i in ids[0].tolist()],
            "n_experts": model.blocks[0].mlp.n_experts, "top_k": model.blocks[0].mlp.top_k, "layers": layers}


def chinchilla_data() -> dict:
    "The two fitted laws' constants, and a few reference models' budgets (C = 6 N D)."
    from transformerbook.scaling import BESIROGLU_2024, HOFFMANN_2022
    laws = {"HOFFMANN_2022": ("Hoffmann et al. 2022, approach 3", HOFFMANN_2022),
            "BESIROGLU_2024": ("Besiroglu et al. 2024, refit", BESIROGLU_2024)}
    return {"laws": [{"key": k, "label": label, "E": law.E, "A": law.A, "B": law.B, "alpha": law.alpha,
                      "beta": law.beta} for k, (label, law) in laws.items()],
            "models": [{"name": "Chinchilla", "N": 70e9, "D": 1.4e12}, {"name": "Gopher", "N": 280e9, "D": 300e9},
                       {"name": "GPT-3", "N": 175e9, "D": 300e9}, {"name": "LLaMA 65B", "N": 65.2e9, "D": 1.4e12}]}


BUILDERS = {"sampling": sampling_data, "attention": attention_data, "positional": positional_data, "bpe": bpe_data,
            "moe": moe_data, "chinchilla": chinchilla_data, "inside": inside_data}


def cache_key() -> str:
    """A hash of this file, of the package's sources, of torch's version and of whether chapter 11's induction model
    is trained (until it is, `inside` shows a stand-in): the data change only when one of them does. Two environments
    sharing one cache (the lock's and `make test-oldest`'s) train different models, so each keeps its own data."""
    import torch
    from transformerbook.live import induction_trained
    h = hashlib.sha256(Path(__file__).read_bytes() + str(induction_trained()).encode() + torch.__version__.encode())
    for p in sorted((ROOT / "transformerbook").glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; a web server must read it
    os.replace(tmp, path)


def compute(names=NAMES) -> dict[str, dict]:
    "{name: data} for each explorer, freshly computed."
    import torch
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    return {name: BUILDERS[name]() for name in names}


def default_cache() -> Path:
    "The per-user cache of the book (`transformerbook.data.cache_dir()`, `$TRANSFORMERBOOK_CACHE`), `explorers/`."
    from transformerbook.data import cache_dir
    return cache_dir() / "explorers"


def write_data(out: Path | str, cache: Path | str | None = None, verbose: bool = True) -> float:
    """Write `<name>.json` and `<name>.js` for every explorer into `out`, from `cache` (a folder, default
    `default_cache()`; filled on a miss, keyed by `cache_key()`). Returns the seconds spent."""
    start, out = time.perf_counter(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(cache or default_cache()) / cache_key()
    if not all((src / f"{n}.json").is_file() for n in NAMES):
        data = compute()
        src.mkdir(parents=True, exist_ok=True)
        for name, d in data.items():
            text = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
            for folder in (src, out):
                _write_atomic(folder / f"{name}.json", text)
    elif src != out:
        for name in NAMES:
            shutil.copy2(src / f"{name}.json", out / f"{name}.json")
    for name in NAMES:  # the script form, loadable from file:// pages
        text = (out / f"{name}.json").read_text(encoding="utf-8")
        _write_atomic(out / f"{name}.js", "(window.tbExplorerData = window.tbExplorerData || {})"
                                          f"[{json.dumps(name)}] = {text};\n")
    seconds = time.perf_counter() - start
    if verbose:
        print(f"Explorer data ({', '.join(NAMES)}) written to {out} in {seconds:.1f} s", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder for the data files (the site's _static/explorers/data)")
    ap.add_argument("--cache", type=Path, default=None, help="cache folder (default: the book's cache, explorers/)")
    args = ap.parse_args(argv)
    write_data(args.out, args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
