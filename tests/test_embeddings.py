"""Embeddings: one-hot selection, the sinusoidal formula and its rotation property, `Embeddings` validation,
cosine similarity and analogies (chapter `nbs/05_embeddings.ipynb`)."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformerbook.embeddings import (Embeddings, analogy, cosine_similarity, position_rotation_matrix,
                                        sinusoidal_positional_encoding)



# ---------------------------------------------------------------- sinusoidal encodings

@pytest.mark.parametrize("T,d_model", [(1, 2), (7, 4), (50, 16), (33, 64)])
def test_sinusoidal_formula(T, d_model):
    pe = sinusoidal_positional_encoding(T, d_model)
    assert pe.shape == (T, d_model) and pe.dtype == torch.float32
    for t in range(T):
        for i in range(d_model // 2):
            angle = t / 10000 ** (2 * i / d_model)  # notes eqs. 19.8-19.9
            assert abs(pe[t, 2 * i].item() - math.sin(angle)) < 1e-5
            assert abs(pe[t, 2 * i + 1].item() - math.cos(angle)) < 1e-5


def test_sinusoidal_first_row_and_base():
    pe = sinusoidal_positional_encoding(3, 8)
    torch.testing.assert_close(pe[0], torch.tensor([0., 1.] * 4))
    torch.testing.assert_close(sinusoidal_positional_encoding(5, 2, base=3.0)[:, 0], torch.sin(torch.arange(5.)))


@settings(max_examples=30, deadline=None)
@given(half=st.integers(1, 16), t=st.integers(0, 500), k=st.integers(-200, 200))
def test_rotation_property(half, t, k):
    d_model = 2 * half
    if t + k < 0:
        k = -t
    pe = sinusoidal_positional_encoding(t + max(k, 0) + 1, d_model)
    M = position_rotation_matrix(k, d_model)
    torch.testing.assert_close(M @ pe[t], pe[t + k], atol=2e-4, rtol=0)  # p_{t+k} = M_k p_t
    torch.testing.assert_close(M @ M.T, torch.eye(d_model), atol=1e-5, rtol=0)  # orthogonal


def test_rotation_depends_only_on_offset_and_composes():
    torch.testing.assert_close(position_rotation_matrix(3, 8) @ position_rotation_matrix(4, 8),
                               position_rotation_matrix(7, 8), atol=1e-6, rtol=0)
    torch.testing.assert_close(position_rotation_matrix(0, 8), torch.eye(8))


def test_dot_products_depend_only_on_offset():
    pe = sinusoidal_positional_encoding(80, 32)
    dots = pe @ pe.T
    for k in range(0, 20):
        diag = torch.diagonal(dots, offset=k)
        assert (diag - diag[0]).abs().max() < 1e-3


def test_sinusoidal_errors_name_the_values():
    with pytest.raises(ValueError, match="d_model=7"):
        sinusoidal_positional_encoding(4, 7)
    with pytest.raises(ValueError, match="T=0"):
        sinusoidal_positional_encoding(0, 8)
    with pytest.raises(ValueError, match="d_model=5"):
        position_rotation_matrix(1, 5)


# ---------------------------------------------------------------- Embeddings

def test_one_hot_times_E_is_row_selection():
    torch.manual_seed(0)
    emb = Embeddings(vocab_size=11, context_length=8, d_model=4)
    ids = torch.tensor([[5, 0, 10], [3, 3, 1]])
    E = emb.token.weight
    one_hot = F.one_hot(ids, 11).float()  # (B, T, V)
    torch.testing.assert_close(emb.token(ids), one_hot @ E)  # the package's token lookup is the one-hot product
    torch.testing.assert_close(emb(ids), one_hot @ E + emb.position.weight[:3])


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_embeddings_sum_and_explicit_positions(positional):
    torch.manual_seed(0)
    emb = Embeddings(20, 10, 8, positional=positional)
    ids = torch.randint(0, 20, (2, 6))
    table = emb.position.weight if positional == "learned" else sinusoidal_positional_encoding(10, 8)
    torch.testing.assert_close(emb(ids), emb.token.weight[ids] + table[:6])
    pos = torch.tensor([[4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 4, 5]])  # (B, T) position ids
    torch.testing.assert_close(emb(ids, position_ids=pos), emb.token.weight[ids] + table[pos])
    step = torch.cat([emb(ids[:, t:t + 1], position_ids=torch.tensor([t])) for t in range(6)], dim=1)
    torch.testing.assert_close(step, emb(ids))


def test_sinusoidal_embeddings_have_no_position_parameters():
    emb = Embeddings(20, 10, 8, positional="sinusoidal")
    assert [n for n, _ in emb.named_parameters()] == ["token.weight"]
    assert "position_table" not in emb.state_dict()


def test_embeddings_errors_name_the_values():
    emb = Embeddings(vocab_size=10, context_length=8, d_model=4)
    with pytest.raises(ValueError, match=r"token id 12 is outside \[0, vocab_size=10\)"):
        emb(torch.tensor([[1, 12]]))
    with pytest.raises(ValueError, match="token id -3"):
        emb(torch.tensor([[-3, 1]]))
    with pytest.raises(ValueError, match="T=9 is beyond context_length=8"):
        emb(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"position 8 is outside \[0, context_length=8\)"):
        emb(torch.tensor([[1, 2]]), position_ids=torch.tensor([7, 8]))
    with pytest.raises(ValueError, match="position -1"):
        emb(torch.tensor([[1, 2]]), position_ids=torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match=r"position_ids must have shape.*T=2.*\(3,\)"):
        emb(torch.tensor([[1, 2]]), position_ids=torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="dtype torch.float32"):  # a wrong type of ids is a TypeError
        emb(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        emb(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="positional='rope'"):
        Embeddings(10, 8, 4, positional="rope")


# ---------------------------------------------------------------- cosine similarity, analogies

@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), d=st.integers(1, 20), scale=st.floats(1e-2, 1e2))
def test_cosine_similarity_matches_torch_and_ignores_length(seed, d, scale):
    g = torch.Generator().manual_seed(seed)
    u, v = torch.randn(4, d, generator=g, dtype=torch.float64), torch.randn(4, d, generator=g, dtype=torch.float64)
    s = cosine_similarity(u, v)
    torch.testing.assert_close(s, F.cosine_similarity(u, v, dim=-1))
    torch.testing.assert_close(cosine_similarity(scale * u, v), s)
    assert (s.abs() <= 1 + 1e-12).all()


def test_cosine_similarity_special_values_and_errors():
    u = torch.tensor([3.0, 4.0])
    assert cosine_similarity(u, u).item() == pytest.approx(1.0)
    assert cosine_similarity(u, -u).item() == pytest.approx(-1.0)
    assert cosine_similarity(u, torch.tensor([-4.0, 3.0])).item() == pytest.approx(0.0)
    assert cosine_similarity(u, torch.zeros(2)).item() == 0.0  # zero vector: no NaN
    with pytest.raises(ValueError, match=r"\(3,\) and \(4,\)"):
        cosine_similarity(torch.ones(3), torch.ones(4))


def test_analogy_on_a_constructed_table():
    # features: capital, France, Italy, Germany; "capital of" is one direction
    E = torch.tensor([[0., 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [1, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 1]])
    france, paris, italy, rome, germany, berlin = range(6)
    assert analogy(E, france, paris, italy).tolist() == [rome]
    assert analogy(E, italy, rome, germany).tolist() == [berlin]
    assert analogy(E, france, paris, italy, k=3).tolist()[0] == rome
    assert not set(analogy(E, france, paris, italy, k=3).tolist()) & {france, paris, italy}
    with pytest.raises(ValueError, match=r"c=6 must be an int in \[0, V=6\)"):
        analogy(E, 0, 1, 6)
    with pytest.raises(ValueError, match="k=4"):
        analogy(E, 0, 1, 2, k=4)
