"""The book's diagrams, drawn with matplotlib into SVG files next to this script (they are committed; the site copies
them). Re-draw after editing:

    python nbs/figures/diagrams.py            # writes nbs/figures/*.svg

Each diagram is a function returning a figure; the SVGs keep text as text (`svg.fonttype: none`) and carry no date,
so re-drawing an unchanged diagram gives the same file.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

HERE = Path(__file__).resolve().parent
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "transformerbook", "font.size": 10,
                     "font.family": "DejaVu Sans"})
COLORS = {"norm": "#fde0c5", "attn": "#dbe9f6", "mlp": "#d9f0d3", "io": "#eeeeee", "add": "#ffffff",
          "cache": "#e8dff5", "new": "#fbd5d5", "router": "#fff3b0"}


def box(ax, x, y, w, h, text, kind="io", fontsize=10, **kw):
    "A rounded box centred at (x, y) with `text`; returns its (x, y, w, h)."
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=COLORS[kind], ec="#333333", lw=1.2, **kw))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    return x, y, w, h


def arrow(ax, p, q, color="#333333", style="-|>", lw=1.3, rad=0.0):
    ax.add_patch(FancyArrowPatch(p, q, arrowstyle=style, mutation_scale=12, color=color, lw=lw,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))


def circle_plus(ax, x, y, r=0.16):
    ax.add_patch(plt.Circle((x, y), r, fc="white", ec="#333333", lw=1.2))
    ax.text(x, y - 0.01, "+", ha="center", va="center", fontsize=13)


def canvas(w, h):
    fig, ax = plt.subplots(figsize=(w, h))
    ax.set_xlim(0, w)
    ax.set_ylim(0, h)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


# ------------------------------------------------------------------------------------ transformer block
def transformer_block():
    "Pre-norm (GPT-2, J&M eqs. 10.38-10.43) and post-norm (Vaswani et al., J&M eqs. 10.24-10.31) blocks side by side."
    fig, ax = canvas(8.4, 6.6)
    for x0, title, pre in ((2.1, "pre-norm (GPT-2, most LLMs)", True),
                           (6.3, "post-norm (original transformer)", False)):
        ax.text(x0, 6.35, title, ha="center", fontsize=11, fontweight="bold")
        ax.text(x0, 0.2, "x  (B, T, D)", ha="center", fontsize=10)
        spine = x0 - 1.1  # the residual stream runs up on the left
        ax.plot([spine, spine], [0.45, 5.85], color="#1f77b4", lw=3, zorder=0)
        ax.text(spine - 0.12, 1.3, "residual stream", rotation=90, ha="right", va="center", color="#1f77b4", fontsize=9)
        ys = [(1.0, 1.6, 2.35), (3.35, 3.95, 4.7)]  # (norm, sublayer, add) heights of the two halves
        for (y_norm, y_sub, y_add), (name, kind, ln) in zip(ys, (("multi-head attention", "attn", "ln_1"),
                                                               ("feed-forward (MLP)", "mlp", "ln_2"))):
            if pre:
                arrow(ax, (spine, y_norm - 0.3), (x0 + 0.2, y_norm - 0.3), style="-")
                arrow(ax, (x0 + 0.2, y_norm - 0.3), (x0 + 0.2, y_norm - 0.2))
                box(ax, x0 + 0.2, y_norm, 1.9, 0.38, f"LayerNorm ({ln})", "norm", 9)
                arrow(ax, (x0 + 0.2, y_norm + 0.19), (x0 + 0.2, y_sub - 0.22))
                box(ax, x0 + 0.2, y_sub, 2.3, 0.44, name, kind, 9)
                arrow(ax, (x0 + 0.2, y_sub + 0.22), (x0 + 0.2, y_add), style="-")
                arrow(ax, (x0 + 0.2, y_add), (spine + 0.16, y_add))
                circle_plus(ax, spine, y_add)
            else:
                arrow(ax, (spine, y_norm - 0.3), (x0 + 0.2, y_norm - 0.3), style="-")
                arrow(ax, (x0 + 0.2, y_norm - 0.3), (x0 + 0.2, y_sub - 0.22))
                box(ax, x0 + 0.2, y_sub, 2.3, 0.44, name, kind, 9)
                arrow(ax, (x0 + 0.2, y_sub + 0.22), (x0 + 0.2, y_sub + 0.45), style="-")
                arrow(ax, (x0 + 0.2, y_sub + 0.45), (spine + 0.16, y_sub + 0.45))
                circle_plus(ax, spine, y_sub + 0.45)
                box(ax, spine, y_add + 0.2, 1.5, 0.36, f"LayerNorm ({ln})", "norm", 9, zorder=2)
        if pre:
            box(ax, spine, 5.5, 1.5, 0.5, "final LayerNorm\n(last block only)", "norm", 8.5, zorder=2)
        ax.text(x0, 5.95, "to the next block / lm_head", ha="center", fontsize=8.5, color="#555555")
    ax.text(4.2, -0.25, "Each block maps (B, T, D) to (B, T, D). Pre-norm normalises each sublayer's input and keeps "
            "the residual stream un-normalised; post-norm normalises after each addition.",
            ha="center", fontsize=8.5, wrap=True, color="#333333")
    return fig


# ------------------------------------------------------------------------------- attention with shapes
def attention_shapes():
    "Scaled dot-product attention for one head, with the shape of every tensor (J&M eqs. 10.14-10.16)."
    fig, ax = canvas(9.6, 4.6)
    box(ax, 0.9, 2.3, 1.3, 0.6, "x\n(B, T, D)")
    for y, name, w in ((3.7, "q = x W_Q", "(B, T, Dh)"), (2.3, "k = x W_K", "(B, S, Dh)"),
                       (0.9, "v = x W_V", "(B, S, Dh)")):
        arrow(ax, (1.55, 2.3), (2.45, y), rad=0.0)
        box(ax, 3.2, y, 1.5, 0.62, f"{name}\n{w}", "attn", 9)
    box(ax, 5.0, 3.0, 1.7, 0.7, "scores = q kᵀ / √Dh\n(B, T, S)", "io", 9)
    arrow(ax, (3.95, 3.7), (4.15, 3.2))
    arrow(ax, (3.95, 2.3), (4.15, 2.8))
    box(ax, 6.9, 3.0, 1.6, 0.7, "mask: −∞ where\nnot allowed", "new", 9)
    arrow(ax, (5.85, 3.0), (6.1, 3.0))
    box(ax, 8.6, 3.0, 1.5, 0.7, "weights =\nsoftmax over S\n(B, T, S)", "norm", 8.5)
    arrow(ax, (7.7, 3.0), (7.85, 3.0))
    box(ax, 7.6, 1.0, 2.0, 0.7, "out = weights v\n(B, T, Dh)", "mlp", 9)
    arrow(ax, (8.6, 2.65), (8.1, 1.35))
    arrow(ax, (3.95, 0.9), (6.6, 0.95))
    ax.text(4.8, 4.35, "one head; B batch, T queries, S keys (S = T without a cache), Dh = D / n_heads",
            ha="center", fontsize=9, color="#333333")
    ax.text(5.0, 0.25, "each row of weights sums to 1: query t's output is a weighted average of the value vectors",
            ha="center", fontsize=8.5, color="#555555")
    return fig


# ------------------------------------------------------------------------------------------- KV cache
def kv_cache():
    "Generation with a KV cache: each step computes q, k, v for the new token only and reads the cached keys/values."
    fig, ax = canvas(9.6, 4.4)
    tokens = ["The", "cat", "sat", "on", "the"]
    for step, y in ((0, 3.3), (1, 1.4)):
        n_cached = 3 + step
        ax.text(0.1, y + 0.75, f"step {step + 1}: {n_cached} positions cached, the new token “{tokens[n_cached]}”",
                fontsize=10, fontweight="bold")
        for j in range(n_cached):
            box(ax, 1.0 + 0.85 * j, y + 0.2, 0.75, 0.42, f"k{j}", "cache", 9)
            box(ax, 1.0 + 0.85 * j, y - 0.3, 0.75, 0.42, f"v{j}", "cache", 9)
        xn = 1.0 + 0.85 * n_cached
        box(ax, xn, y + 0.2, 0.75, 0.42, f"k{n_cached}", "new", 9)
        box(ax, xn, y - 0.3, 0.75, 0.42, f"v{n_cached}", "new", 9)
        box(ax, xn + 1.6, y - 0.05, 1.2, 0.55, f"q{n_cached}\n(B, 1, Dh)", "new", 9)
        arrow(ax, (xn + 1.0, y - 0.05), (xn + 0.45, y - 0.05))
        box(ax, xn + 3.7, y - 0.05, 2.2, 0.7, f"weights (B, 1, {n_cached + 1})\nout (B, 1, Dh)", "norm", 9)
        arrow(ax, (xn + 2.2, y - 0.05), (xn + 2.6, y - 0.05))
        ax.text(1.0 + 0.85 * (n_cached - 1) / 2, y - 0.75, "read from the cache", ha="center", fontsize=8.5,
                color="#555555")
    ax.text(3.1, 2.45, "red: computed this step, then kept in the cache for the next", fontsize=8.5, color="#d62728")
    ax.text(4.8, 0.2, "cache size per sequence: 2 · n_layers · T · D numbers; each step costs one query, not T",
            ha="center", fontsize=9, color="#333333")
    return fig


# ------------------------------------------------------------------------------------------ MoE routing
def moe_routing():
    "A mixture-of-experts layer: a router scores E experts per token, the top-k run and their outputs are mixed."
    fig, ax = canvas(9.6, 4.8)
    tokens = ["K", "I", "N", "G"]
    routes = [(0, 2, 0.7), (3, 1, 0.6), (0, 3, 0.55), (2, 1, 0.8)]  # (first, second, weight of the first): illustrative
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    for j, t in enumerate(tokens):
        box(ax, 0.8, 4.0 - j * 1.0, 0.7, 0.5, f"x{j}\n“{t}”", "io", 9)
        arrow(ax, (1.15, 4.0 - j * 1.0), (1.95, 4.0 - j * 1.0))
        box(ax, 2.75, 4.0 - j * 1.0, 1.5, 0.55, "router\nsoftmax(x W_g)", "router", 8)
    for e in range(4):
        box(ax, 6.0, 4.1 - e * 1.05, 1.3, 0.6, f"expert {e}\n(FFN)", "mlp", 9)
    for j, (a, b, w) in enumerate(routes):
        y = 4.0 - j * 1.0
        arrow(ax, (3.5, y + 0.05), (5.35, 4.1 - a * 1.05), color=colors[j], lw=2.2)
        arrow(ax, (3.5, y - 0.05), (5.35, 4.1 - b * 1.05), color=colors[j], lw=1.0)
        ax.text(3.55, y + 0.32, f"weights {w:.2f}, {1 - w:.2f}", fontsize=7.5, color=colors[j])
    box(ax, 8.4, 2.5, 1.8, 1.0, "y = Σ over top-k\nweight · expert(x)", "norm", 9)
    for e in range(4):
        arrow(ax, (6.65, 4.1 - e * 1.05), (7.5, 2.5 + (1.5 - e) * 0.2), color="#777777", lw=0.8)
    ax.text(4.8, 0.05, "top-2 of 4 experts per token (weights renormalised); "
            "the other experts do not run for that token", ha="center", fontsize=8.5, color="#333333")
    return fig


DIAGRAMS = {"transformer_block": transformer_block, "attention_shapes": attention_shapes, "kv_cache": kv_cache,
            "moe_routing": moe_routing}


def main() -> None:
    for name, draw in DIAGRAMS.items():
        fig = draw()
        fig.savefig(HERE / f"{name}.svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        print(f"wrote {HERE / f'{name}.svg'}")


if __name__ == "__main__":
    main()
