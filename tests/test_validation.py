"""Input validation of the masking and embedding helpers (transformerbook.masking, transformerbook.embeddings):
bad types raise TypeError and bad values or shapes raise ValueError, each naming what was passed."""
import pytest
import torch

from transformerbook.embeddings import Embeddings
from transformerbook.masking import causal_mask, combine_masks, padding_mask


# ---------------------------------------------------------------- padding_mask(lengths, T)

@pytest.mark.parametrize("T", [2.5, 3.0, -1, "3", None, True])
def test_padding_mask_rejects_bad_T(T):
    with pytest.raises(ValueError, match=f"T={T!r} must be a non-negative int"):
        padding_mask([1, 2], T)


def test_padding_mask_accepts_zero_length_batches():
    assert padding_mask([0, 0], 0).shape == (2, 0)
    assert padding_mask(torch.tensor([0]), 3).tolist() == [[False, False, False]]


# ---------------------------------------------------------------- combine_masks(causal, padding_mask)

def test_combine_masks_parameter_is_named_padding_mask():
    pm = padding_mask([2, 3], 3)
    torch.testing.assert_close(combine_masks(causal=causal_mask(3), padding_mask=pm),
                               combine_masks(causal_mask(3), pm))
    with pytest.raises(TypeError):
        combine_masks(causal_mask(3), key_padding=pm)  # the old name is gone


@pytest.mark.parametrize("call,error,text", [
    (lambda: combine_masks(causal_mask(3), [[True] * 3]), TypeError, "padding_mask must be a bool tensor"),
    (lambda: combine_masks(causal_mask(3), padding_mask([1], 3).int()), TypeError, "padding_mask must be a bool"),
    (lambda: combine_masks(causal_mask(3), padding_mask([1], 4)), ValueError, "S=3 keys but padding_mask has S=4"),
    (lambda: combine_masks(None, torch.ones(3, dtype=torch.bool)), ValueError, "padding_mask must have shape (B, S)"),
])
def test_combine_masks_errors_use_the_parameter_name(call, error, text):
    with pytest.raises(error) as err:
        call()
    assert text in str(err.value)


# ---------------------------------------------------------------- Embeddings.forward(token_ids, position_ids)

@pytest.fixture
def emb():
    torch.manual_seed(0)
    return Embeddings(vocab_size=10, context_length=8, d_model=4)


@pytest.mark.parametrize("token_ids,text", [
    ([[1, 2]], "token_ids must be a torch.Tensor of integer ids, got list"),
    ((1, 2), "got tuple"),
    (torch.tensor([[1.0, 2.0]]), "got dtype torch.float32"),
    (torch.tensor([[True, False]]), "got dtype torch.bool"),
    (torch.tensor([[1, 2]], dtype=torch.uint8), "got dtype torch.uint8"),
])
def test_embeddings_type_errors_for_token_ids(emb, token_ids, text):
    with pytest.raises(TypeError) as err:
        emb(token_ids)
    assert text in str(err.value)


@pytest.mark.parametrize("position_ids,text", [
    ([0, 1], "position_ids must be a torch.Tensor of integer ids, got list"),
    (torch.tensor([0.0, 1.0]), "position_ids must have an integer dtype (torch.int64 or torch.int32), got dtype "
                               "torch.float32"),
])
def test_embeddings_type_errors_for_position_ids(emb, position_ids, text):
    with pytest.raises(TypeError) as err:
        emb(torch.tensor([[1, 2]]), position_ids=position_ids)
    assert text in str(err.value)


@pytest.mark.parametrize("shape", [(3, 2), (2, 3), (3,), (2, 2, 2), ()])
def test_embeddings_position_ids_shape_must_match(emb, shape):
    ids = torch.tensor([[1, 2], [3, 4]])  # B = 2, T = 2
    with pytest.raises(ValueError) as err:
        emb(ids, position_ids=torch.zeros(shape, dtype=torch.long))
    assert f"(T,), (1, T) or (B, T) with B=2, T=2, got {tuple(shape)}" in str(err.value)


@pytest.mark.parametrize("shape", [(2,), (1, 2), (2, 2)])
def test_embeddings_accepts_valid_position_shapes(emb, shape):
    ids = torch.tensor([[1, 2], [3, 4]])
    pos = torch.arange(2).expand(shape) if len(shape) == 2 else torch.arange(2)
    torch.testing.assert_close(emb(ids, position_ids=pos), emb(ids))
    torch.testing.assert_close(emb(ids.int(), position_ids=pos.int()), emb(ids))  # int32 works too


def test_embeddings_token_ids_shape_is_a_value_error(emb):
    with pytest.raises(ValueError, match=r"token_ids must be a \(B, T\) integer tensor, got shape \(3,\)"):
        emb(torch.tensor([1, 2, 3]))
