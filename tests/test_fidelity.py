"""Fidelity to the sources: the CS182 polls and Exercise 4.4 graded by checkers (each wrong option rejected for its
own reason), the fully-masked-row convention of torch's SDPA, the GPT-3 and "typical" model sizes counted by the
book's counter, Kaplan's constants, and a re-run slice of the Holtzman et al. experiment (`experiments/holtzman.py`)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformerbook.checks.attention import check_poll_softmax_axis, check_poll_swap
from transformerbook.checks.blocks import check_block_params
from transformerbook.checks.masking import check_poll_causal_mask
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.masking import causal_mask
from transformerbook.scaling import KAPLAN_2020, count_params, fit_power_law, power_law

from conftest import load_experiment


# --- polls and Exercise 4.4 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("checker,right,wrong", [
    (check_poll_softmax_axis, ["B", "row-wise", " b "], {"A": "over the queries", "column-wise": "over the queries",
                                                          "C": "not one of the options"}),
    (check_poll_swap, ["A", [0.1, 0.2, 1.2, 0.1], torch.tensor([0.1, 0.2, 1.2, 0.1])],
     {"B": "POSITION", "C": "0.6 · 2 = 1.2", "D": "not needed", "E": "not one of the options",
      (0.1, 0.6, 0.4, 0.1): "POSITION", (0.1, 0.2, 0.6, 0.1): "0.6 · 2 = 1.2"}),
    (check_poll_causal_mask, ["B", torch.where(causal_mask(4), 0.0, float("-inf"))],
     {"A": "transpose", "C": "bigram", "D": "not one of the options"}),
])
def test_poll_checkers(checker, right, wrong, capsys):
    "Every right form passes; every wrong option fails with its own explanation; `...` and a stub say NOT YET."
    for answer in right:
        assert checker(answer).passed is True
    for answer, why in wrong.items():
        with pytest.raises(AssertionError, match=why.replace("(", r"\(").replace(".", r"\.")):
            checker(list(answer) if isinstance(answer, tuple) else answer)
    capsys.readouterr()
    assert checker(...).passed is False
    assert "no answer yet: replace `...` with your choice" in capsys.readouterr().out  # not "your code raises"
    def stub(): raise NotImplementedError
    assert checker(stub).passed is False and "your code raises NotImplementedError" in capsys.readouterr().out
    assert checker(lambda: right[0]).passed is True  # a function returning the choice is accepted too


def test_poll_causal_mask_matrices_match_the_chapter():
    "The three candidate matrices of Question 2.1: each is graded as its letter."
    inf = float("-inf")
    chapter = {"A": torch.tensor([[0, 0, 0, 0], [inf, 0, 0, 0], [inf, inf, 0, 0], [inf, inf, inf, 0]]),
               "B": torch.tensor([[0, inf, inf, inf], [0, 0, inf, inf], [0, 0, 0, inf], [0, 0, 0, 0]]),
               "C": torch.tensor([[0, inf, inf, inf], [inf, 0, inf, inf], [inf, inf, 0, inf], [inf, inf, inf, 0]])}
    assert check_poll_causal_mask(chapter["B"]).passed is True
    with pytest.raises(AssertionError, match="transpose"): check_poll_causal_mask(chapter["A"])
    with pytest.raises(AssertionError, match="bigram"): check_poll_causal_mask(chapter["C"])


@pytest.mark.parametrize("formula,hint", [
    (lambda d: 12 * d * d + 4 * d, "left out the biases"), (lambda d: 12 * d * d + 9 * d, "LayerNorms"),
    (lambda d: 11 * d * d + 12 * d, "W_O"), (lambda d: 6 * d * d + 10 * d, "d_ff = 4d"),
    (lambda d: 12 * d * d + 11 * d, "one LayerNorm"), (lambda d: 12 * d * d, "count attention"),
    (lambda d: 12 * d * d + 13 * d + 0.5, "expected an int"),
])
def test_block_params_checker(formula, hint):
    assert check_block_params(lambda d: 12 * d * d + 13 * d).passed is True
    assert check_block_params(lambda d: float(12 * d * d + 13 * d)).passed is True  # 7087872.0 is an integer count
    with pytest.raises(AssertionError, match=hint): check_block_params(formula)


# --- fully masked rows ----------------------------------------------------------------------------------------

def test_sdpa_fully_masked_rows_give_zeros_since_torch_2_5():
    "What 02 and the comment in `multihead._fused_attention` say: zeros since torch 2.5 (NaN before); naive -inf: NaN."
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    q, k, v = (torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend nothing
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if version >= (2, 5):
        assert torch.equal(out[..., 1, :], torch.zeros(1, 2, 8))
        assert torch.isfinite(out).all()
    naive = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf")), -1) @ v
    assert torch.isnan(naive[..., 1, :]).all()


# --- sizes and constants ---------------------------------------------------------------------------------------

GPT3 = [  # Brown et al. 2020, Table 2.1: name, published params, n_layers, d_model (13B: 5120 = 40 · 128), d_head
    ("Small", 125e6, 12, 768, 64), ("Medium", 350e6, 24, 1024, 64), ("Large", 760e6, 24, 1536, 96),
    ("XL", 1.3e9, 24, 2048, 128), ("2.7B", 2.7e9, 32, 2560, 80), ("6.7B", 6.7e9, 32, 4096, 128),
    ("13B", 13.0e9, 40, 5120, 128), ("175B", 175e9, 96, 12288, 128)]


@pytest.mark.parametrize("name,published,L,D,Dh", GPT3, ids=[r[0] for r in GPT3])
def test_gpt3_table_counts(name, published, L, D, Dh):
    n = count_params(GPTConfig(vocab_size=50257, context_length=2048, d_model=D, n_heads=D // Dh, n_layers=L))
    assert abs(n / published - 1) < 0.02
    if name != "Medium":  # the one size whose published label is not the count rounded (355.9M is listed as 350M)
        digits = 3 if name in ("Small", "Large", "175B") else 2
        assert float(f"{n:.{digits}g}") == published


def test_typical_hyperparameters():
    "J&M's d = 512, d_k = d_v = 64, h = 8, d_ff = 2048, with MIT's L = 6: counted by formula, counter and model."
    model_cfg = GPTConfig(vocab_size=1000, context_length=512, d_model=512, n_heads=8, n_layers=6, d_ff=2048)
    assert model_cfg.d_head == 64
    n = count_params(model_cfg, non_embedding=True)
    assert n == 6 * (12 * 512**2 + 13 * 512) + 2 * 512 == 18_915_328
    assert GPT(model_cfg).n_params(non_embedding=True) == n
    assert count_params(model_cfg) == n + 1000 * 512 + 512 * 512


def test_kaplan_constants():
    "J&M's footnote: N_c = 8.8e13, α_N = 0.076; D_c = 5.4e13, α_D = 0.095; C_c = 3.1e8 PF-days, α_C = 0.050."
    assert KAPLAN_2020 == {"N": (8.8e13, 0.076), "D": (5.4e13, 0.095), "C": (3.1e8, 0.050)}
    for key, grid in (("D", torch.logspace(7, 12, 9, dtype=torch.float64)),
                      ("C", torch.logspace(-6, 2, 9, dtype=torch.float64))):
        x_c, alpha = fit_power_law(grid, power_law(grid, *KAPLAN_2020[key]))
        assert math.isclose(alpha, KAPLAN_2020[key][1], rel_tol=1e-9)
        assert math.isclose(x_c, KAPLAN_2020[key][0], rel_tol=1e-7)


# --- the Holtzman et al. experiment -----------------------------------------------------------------------------

def _holtzman_module():
    return load_experiment("holtzman")


def test_holtzman_results_cover_every_row():
    from transformerbook.data import load_result
    record = load_result("holtzman")
    assert {"command", "seeds", "created", "results"} <= set(record)
    res = record["results"]
    assert set(res["published_perplexity"]) == set(res["rows"]) == {"Human", *_holtzman_module().METHODS}
    assert len(res["published_perplexity"]) == 10  # the notes' Fig. 19.4 has ten rows
    for row in res["rows"].values():
        assert len(row["perplexity"]) == len(row["repeated_3grams"]) == res["n_prompts"]
        assert 0 <= row["self_bleu4"] <= 1


def test_holtzman_slice_reproduces():
    "Prompt 0 of the committed run, re-decoded and re-scored: the same perplexities (cheap methods and beam search)."
    from transformerbook.data import load_result
    from transformerbook.sampling import perplexity
    from transformerbook.training import shakespeare_model
    h = _holtzman_module()
    res = load_result("holtzman")["results"]
    seed = load_result("holtzman")["seeds"][0]
    from transformerbook.environment import weights_sha256
    lm, tok = shakespeare_model("char", progress=False)
    prompts, humans = h.prompts_and_humans(tok, res["n_prompts"], res["prompt_chars"], res["new_chars"])
    human = perplexity(lm, humans[0], prompt_length=res["prompt_chars"])
    if res.get("weights_sha256") != weights_sha256(lm):
        # a baby GPT trained on this machine is another model (float order): only what holds for any such model
        for method in ("Greedy", "Beam, b=16"):  # maximisation gives text more predictable than the human text
            row = h.decode(lm, method, prompts[0], res["new_chars"], seed * 1000 + 0)
            assert perplexity(lm, row, prompt_length=res["prompt_chars"]) < human, method
        return
    assert human == pytest.approx(res["rows"]["Human"]["perplexity"][0], rel=1e-6)
    for method in ("Greedy", "Beam, b=16", "Nucleus p=0.95"):
        row = h.decode(lm, method, prompts[0], res["new_chars"], seed * 1000 + 0)
        assert tok.decode(row[res["prompt_chars"]:]) == res["first_samples"][method]
        assert perplexity(lm, row, prompt_length=res["prompt_chars"]) == pytest.approx(
            res["rows"][method]["perplexity"][0], rel=1e-6)


# --- cross-attention (MIT 6.390 §11.3.2) -------------------------------------------------------------------------

@pytest.mark.parametrize("T,S,H", [(1, 9, 2), (6, 3, 4), (4, 4, 1), (7, 12, 8)])
def test_cross_attention_with_the_books_attention_equals_torch(T, S, H):
    "Queries from x (T positions), keys/values from memory (S positions), padded memories: as nn.MultiheadAttention."
    from transformerbook.attention import scaled_dot_product_attention
    from transformerbook.masking import make_padding_mask
    torch.manual_seed(T * 100 + S)
    D = 8 * H
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
    x, memory = torch.randn(3, T, D), torch.randn(3, S, D)
    lengths = torch.tensor([S, max(1, S // 2), 1])
    split = lambda t: t.unflatten(-1, (H, D // H)).transpose(1, 2)  # (B, N, D) -> (B, H, N, Dh)
    (W_q, W_k, W_v), (b_q, b_k, b_v) = ref.in_proj_weight.split(D), ref.in_proj_bias.split(D)
    with torch.no_grad():
        q, k, v = split(F.linear(x, W_q, b_q)), split(F.linear(memory, W_k, b_k)), split(F.linear(memory, W_v, b_v))
        mask = make_padding_mask(lengths, S)[:, None, None, :]  # (B, 1, 1, S), True = real memory position
        ours = ref.out_proj(scaled_dot_product_attention(q, k, v, mask).transpose(1, 2).flatten(-2))  # (B, T, D)
        expected, weights = ref(x, memory, memory, key_padding_mask=~make_padding_mask(lengths, S))
    torch.testing.assert_close(ours, expected)
    assert weights.shape == (3, T, S) and torch.equal(weights[2, :, 1:], torch.zeros(T, S - 1))  # row 2 sees 1 key


def test_bits_per_character_quoted_in_the_sampling_chapter():
    "07 quotes the human row of the Holtzman run as 6.29 per character = 1.84 nats = 2.65 bits (Shannon: about 1)."
    from transformerbook.data import load_result
    rows = load_result("holtzman")["results"]["rows"]["Human"]["perplexity"]
    ppl = sum(rows) / len(rows)
    assert round(ppl, 2) == 6.29 and round(math.log(ppl), 2) == 1.84 and round(math.log2(ppl), 2) == 2.65
