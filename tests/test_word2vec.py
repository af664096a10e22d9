"""Skip-gram (MIT 6.390 eqs. 11.3–11.5) and negative sampling: pairs, both losses against hand computations, the
noise distribution, cosine neighbours, and the checker of Exercise 5b.1 against known-wrong losses."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from transformerbook.checks.word2vec import META_CASES, check_negative_sampling_loss
from transformerbook.word2vec import (SkipGram, draw_negatives, drop_speaker_headings, most_similar,
                                      negative_sampling_loss, noise_distribution, skipgram_pairs, skipgram_softmax_loss,
                                      words_of)


@pytest.mark.parametrize("T,c", [(2, 1), (10, 3), (31, 5)])
def test_pairs_are_every_skip_within_the_window(T, c):
    centers, contexts = skipgram_pairs(torch.arange(T) * 7, c)
    pairs = sorted(zip(centers.tolist(), contexts.tolist()))
    expected = sorted((7 * t, 7 * (t + j)) for t in range(T) for j in range(-c, c + 1) if j and 0 <= t + j < T)
    assert pairs == expected and len(pairs) == 2 * c * T - c * (c + 1)


def test_softmax_loss_is_eq_11_4():
    torch.manual_seed(0)
    m = SkipGram(20, 5)
    with torch.no_grad(): m.context.weight.normal_()
    c, o = torch.tensor([3, 7, 7]), torch.tensor([1, 2, 19])
    W, U = m.center.weight, m.context.weight
    by_hand = -sum(math.log(torch.softmax(U @ W[ci], 0)[oi].item()) for ci, oi in zip(c.tolist(), o.tolist())) / 3
    assert skipgram_softmax_loss(m, c, o).item() == pytest.approx(by_hand, rel=1e-5)


def test_negative_sampling_loss_by_hand():
    torch.manual_seed(1)
    m = SkipGram(20, 5)
    with torch.no_grad(): m.context.weight.normal_()
    c, o, n = torch.tensor([4]), torch.tensor([9]), torch.tensor([[1, 2, 2]])
    v, U = m.center.weight[4], m.context.weight
    sig = lambda x: 1 / (1 + math.exp(-x))
    by_hand = -(math.log(sig((U[9] @ v).item())) + sum(math.log(sig(-(U[k] @ v).item())) for k in (1, 2, 2)))
    assert negative_sampling_loss(m, c, o, n).item() == pytest.approx(by_hand, rel=1e-5)


def test_noise_distribution_and_draws():
    p = noise_distribution(torch.tensor([0.0, 1.0, 81.0]))
    assert torch.allclose(p, torch.tensor([0.0, 1.0, 27.0]) / 28)  # 81^0.75 = 27
    draws = draw_negatives(p, 2000, 3, torch.Generator().manual_seed(0))
    assert draws.shape == (2000, 3) and (draws != 0).all()  # a word of frequency 0 is never drawn
    assert abs((draws == 2).float().mean().item() - 27 / 28) < 0.02


def test_most_similar_and_words():
    vectors = torch.tensor([[1.0, 0.0], [10.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    idx, cos = most_similar(vectors, torch.tensor([1.0, 0.0]), k=2, exclude=(0,))
    assert idx.tolist() == [1, 2] and cos[0] == pytest.approx(10 / math.sqrt(101))  # length does not matter
    assert words_of("O Romeo, Romeo! wherefore art thou") == ["o", "romeo", "romeo", "wherefore", "art", "thou"]
    with pytest.raises(ValueError, match="window=0"): skipgram_pairs(torch.arange(3), 0)


def test_checker_accepts_reference_and_names_each_mistake(capsys):
    case = META_CASES[0]
    assert check_negative_sampling_loss(case.reference).passed is True
    for name, wrong in case.wrong.items():
        with pytest.raises(AssertionError, match=case.hints[name]): check_negative_sampling_loss(wrong)
    def mean_of_noise(model, c, o, n):
        v = model.center(c)
        return -(F.logsigmoid((model.context(o) * v).sum(-1))
                 + F.logsigmoid(-(model.context(n) * v[:, None]).sum(-1)).mean(-1)).mean()
    with pytest.raises(AssertionError, match="summed over the K words"): check_negative_sampling_loss(mean_of_noise)


def test_pair_count_checker():
    from transformerbook.checks.word2vec import check_pair_count
    assert check_pair_count(lambda T, c: 2 * c * T - c * (c + 1)).passed is True
    with pytest.raises(AssertionError, match="cut off"): check_pair_count(lambda T, c: 2 * c * T)
    with pytest.raises(AssertionError, match="counts twice"): check_pair_count(lambda T, c: c * T - c * (c + 1) // 2)
    with pytest.raises(AssertionError, match="not T - c"): check_pair_count(lambda T, c: 2 * c * (T - c))
    with pytest.raises(AssertionError, match="both directions"): check_pair_count(lambda T, c: T)


def test_noise_shares_checker():
    "Exercise 5b.3: the reference passes; each known slip fails with its own hint."
    from transformerbook.checks.word2vec import check_noise_shares
    from transformerbook.word2vec import noise_distribution

    def reference(counts):
        top = counts.argmax()
        return noise_distribution(counts, 1.0)[top].item(), noise_distribution(counts, 0.75)[top].item()
    assert check_noise_shares(reference).passed is True
    assert check_noise_shares(lambda counts: torch.tensor(reference(counts))).passed is True  # a tensor pair is fine
    def not_renormalised(counts):
        p = counts / counts.sum()
        return p.max().item(), p.max().item() ** 0.75
    def rarest(counts):
        low = counts.argmin()
        return noise_distribution(counts, 1.0)[low].item(), noise_distribution(counts, 0.75)[low].item()
    wrong = {"normalise again": not_renormalised, "in that order": lambda counts: reference(counts)[::-1],
             "exponent is 3/4": lambda counts: (reference(counts)[0], noise_distribution(counts, 4 / 3).max().item()),
             "MOST frequent": rarest, "return two numbers": lambda counts: "the"}
    for hint, fn in wrong.items():
        with pytest.raises(AssertionError, match=hint): check_noise_shares(fn)
    def stub(counts): raise NotImplementedError
    assert check_noise_shares(stub).passed is False


def test_speaker_headings_are_dropped_and_only_they():
    "Chapter 5b: the first line of every speech block ('NAME:') goes; colons and lines inside a speech stay."
    from transformerbook.data import load_tinyshakespeare
    script = "First Citizen:\nBefore we proceed:\nhear me.\n\nKING RICHARD III:\nA horse!\n\nAll:\n\nTITUS:\nSpeak.\n"
    assert drop_speaker_headings(script) == "Before we proceed:\nhear me.\n\nA horse!\n\n\nSpeak.\n"
    text = load_tinyshakespeare()
    kept = drop_speaker_headings(text)
    blocks = re.split(r"\n{2,}", text)  # speeches (two places have two blank lines)
    assert all(b.split("\n")[0].endswith(":") for b in blocks)  # TinyShakespeare's layout: a heading opens every block
    speeches = [b.partition("\n")[2] for b in blocks]  # a few headings have an empty speech
    assert re.split(r"\n{2,}", kept) == [s for s in speeches if s]  # exactly the first lines removed
    assert words_of(text).count("king") > words_of(kept).count("king") > 0


def test_bad_inputs_are_named():
    E = torch.eye(4)
    assert most_similar(E, E[0], k=1, exclude=0)[0].tolist() != [0]  # an int is one excluded id
    assert most_similar(E, E[0] + E[2], k=1, exclude=2)[0].tolist() == [0]
    assert most_similar(E, E[0], k=3, exclude=torch.tensor([0]))[0].tolist()[0] != 0
    with pytest.raises(ValueError, match=r"k=4 must be an int in \[1, 3\]"):
        most_similar(E, E[0], k=4, exclude=5 - 5)
    with pytest.raises(ValueError, match="excluded id=5"):
        most_similar(E, E[0], k=1, exclude=5)
    with pytest.raises(ValueError, match=r"query must have shape \(d,\) = \(4,\), got \(1, 4\)"):
        most_similar(E, E[:1])
    with pytest.raises(TypeError, match="dtype torch.float32"):
        skipgram_pairs(torch.arange(5.0), 1)
    with pytest.raises(ValueError, match=r"got shape \(1, 5\)"):
        skipgram_pairs(torch.arange(5)[None], 1)
    m = SkipGram(10, 3)
    with pytest.raises(ValueError, match=r"\(2,\), \(1,\) and \(2, 3\)"):
        negative_sampling_loss(m, torch.tensor([1, 2]), torch.tensor([3]), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(2,\), \(2,\) and \(1, 3\)"):
        negative_sampling_loss(m, torch.tensor([1, 2]), torch.tensor([3, 4]), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="K=0 must be a positive int"):
        draw_negatives(noise_distribution(torch.ones(10)), 4, 0)
    with pytest.raises(ValueError, match="d=0 must be a positive int"):
        SkipGram(10, 0)


def test_words_of_keeps_ascii_letters_only():
    assert words_of("Naïve Café, it's") == ["na", "ve", "caf", "it's"]
