"""Tokenizers: BPE on a hand-derivable example, GPT-2's BPE against tiktoken on all of TinyShakespeare and on random
Unicode, round trips, the fast trainer against the plain one, special tokens, serialisation and bad input."""
from __future__ import annotations

import inspect
import json
import shutil
import warnings
from collections import Counter

import pytest
import regex
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformerbook.data import (END_OF_TEXT, END_OF_TEXT_ID, GPT2_PAT_STR, MIRROR_ENV, ChecksumError, data_path,
                                  gpt2_encoding, load_tinyshakespeare, train_val_split)
from transformerbook.tokenization import (BasicBPETokenizer, BPETokenizer, CharTokenizer, TiktokenGPT2,
                                          TokenizerProtocol, bytes_to_unicode, get_pair_counts, merge,
                                          most_frequent_pair, tokenizer_from_dict)

IMPLEMENTATIONS = [BasicBPETokenizer, BPETokenizer]
SMALL_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
              "naïve café — 東京 🤗 3.14159 it's we'll   spaces\ttabs\n") * 3
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def gpt2_ours():
    return BPETokenizer.from_gpt2()


@pytest.fixture(scope="module")
def shakespeare():
    return load_tinyshakespeare()


@pytest.fixture(scope="module")
def small_bpe():
    return BPETokenizer().train(SMALL_TEXT, 256 + 60, special_tokens=[END_OF_TEXT])


# --- the building blocks -------------------------------------------------------------------------------------------

def test_pair_counts_count_overlaps():
    assert get_pair_counts([97, 97, 97]) == {(97, 97): 2}
    assert get_pair_counts(list(b"aaabdaaabac"))[(97, 97)] == 4
    assert get_pair_counts([1, 2], {(1, 2): 3}, weight=5) == {(1, 2): 8}
    assert get_pair_counts([]) == {}


@pytest.mark.parametrize("ids,pair,expected", [
    ([97, 97, 97], (97, 97), [256, 97]), ([97] * 4, (97, 97), [256, 256]), ([1, 2, 3, 1, 2], (1, 2), [256, 3, 256]),
    ([3, 1, 2], (1, 2), [3, 256]), ([2, 1], (1, 2), [2, 1]), ([], (1, 2), [])])
def test_merge(ids, pair, expected):
    before = list(ids)
    assert merge(ids, pair, 256) == expected
    assert ids == before  # not modified in place


def test_most_frequent_pair_breaks_ties_by_smallest_pair():
    assert most_frequent_pair({(256, 97): 2, (97, 98): 2, (1, 1): 1}) == (97, 98)
    with pytest.raises(ValueError, match="no pairs"):
        most_frequent_pair({})


# --- Wikipedia's aaabdaaabac, for every implementation -------------------------------------------------------------

@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
def test_wikipedia_example(cls):
    tok = cls()
    assert tok.train("aaabdaaabac", 256 + 3) is tok
    # Z = aa, Y = ab, X = ZY as byte-level ids
    assert list(tok.merges.items()) == [((97, 97), 256), ((97, 98), 257), ((256, 257), 258)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert [tok.vocab[i] for i in (256, 257, 258)] == [b"aa", b"ab", b"aaab"]
    assert tok.decode([258, 100, 258, 97, 99]) == "aaabdaaabac"
    assert tok.vocab_size == 259


@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
def test_training_stops_when_no_pairs_are_left(cls):
    tok = cls().train("ab", 1000)
    assert tok.merges == {(97, 98): 256} and tok.vocab_size == 257
    tok = cls().train("ab", 1000, special_tokens=[END_OF_TEXT])
    assert tok.special_tokens == {END_OF_TEXT: 257}


@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
@pytest.mark.parametrize("text", ["", "a", "hello world", "ünïcödé 東京 🤗", "\x00\xff", SMALL_TEXT],
                         ids=["empty", "a", "hello", "unicode", "bytes", "small_text"])  # same ids on pytest 8 and 9
def test_round_trip_small(cls, text):
    tok = cls().train(SMALL_TEXT, 300)
    assert tok.decode(tok.encode(text)) == text


def _chunk_trainer_reference(text: str, vocab_size: int, pattern: str = GPT2_PAT_STR) -> dict:
    "Plain BPE within regex chunks: recount all pairs of all chunks after every merge."
    words = [list(c.encode("utf-8")) for c in regex.findall(pattern, text)]
    merges = {}
    for new_id in range(256, vocab_size):
        counts = Counter()
        for ids in words:
            counts.update(zip(ids, ids[1:]))
        if not counts: break
        pair = most_frequent_pair(counts)
        words = [merge(ids, pair, new_id) for ids in words]
        merges[pair] = new_id
    return merges


@FUZZ
@given(st.text(alphabet=st.sampled_from("ab c\né汉"), max_size=60), st.integers(256, 290))
def test_fast_trainer_equals_plain_recount(text, vocab_size):
    assert BPETokenizer().train(text, vocab_size).merges == _chunk_trainer_reference(text, vocab_size)
    # One chunk for the whole text: the same merges as the minbpe-style BasicBPETokenizer.
    assert (BPETokenizer(pattern=r"[\s\S]+").train(text, vocab_size).merges
            == BasicBPETokenizer().train(text, vocab_size).merges)


@FUZZ
@given(st.text(alphabet=st.sampled_from("aab"), max_size=40), st.integers(257, 270))
def test_each_merge_is_a_most_frequent_pair(text, vocab_size):
    tok = BasicBPETokenizer().train(text, vocab_size)
    ids = list(text.encode())
    for pair, new_id in tok.merges.items():
        counts = get_pair_counts(ids)
        best = max(counts.values())
        assert counts[pair] == best
        assert pair == min(p for p, c in counts.items() if c == best)
        ids = merge(ids, pair, new_id)


def test_merges_are_prefix_consistent(shakespeare):
    text = shakespeare[:100_000]
    small, big = BPETokenizer().train(text, 300), BPETokenizer().train(text, 400)
    assert list(small.merges.items()) == list(big.merges.items())[:44]


# --- round trips on arbitrary Unicode ------------------------------------------------------------------------------

@FUZZ
@given(st.text())
def test_trained_bpe_round_trips_any_unicode(small_bpe, text):
    ids = small_bpe.encode(text)
    assert all(0 <= i < small_bpe.vocab_size for i in ids)
    assert small_bpe.decode(ids) == text
    assert small_bpe.decode(small_bpe.encode(text, allow_special=True)) == text


@FUZZ
@given(st.text())
def test_gpt2_bpe_round_trips_and_matches_tiktoken(gpt2_ours, text):
    ids = gpt2_ours.encode(text)
    assert ids == gpt2_encoding().encode_ordinary(text)
    assert gpt2_ours.decode(ids) == text


@FUZZ
@given(st.lists(st.sampled_from(["Hello", " world", END_OF_TEXT, "<|", "endoftext", "|>", "\n", " 🤗", "  "]),
                max_size=12).map("".join))
def test_gpt2_special_tokens_match_tiktoken(gpt2_ours, text):
    assert gpt2_ours.encode(text, allow_special=True) == gpt2_encoding().encode(text, allowed_special="all")
    assert gpt2_ours.encode(text) == gpt2_encoding().encode_ordinary(text)


# --- GPT-2 against tiktoken on all of TinyShakespeare --------------------------------------------------------------

def test_gpt2_whole_tinyshakespeare_matches_tiktoken(gpt2_ours, shakespeare):
    ours = gpt2_ours.encode_ordinary(shakespeare)
    reference = gpt2_encoding().encode_ordinary(shakespeare)
    assert ours == reference
    assert len(ours) == 338_025  # derived with tiktoken; the whole 1,115,394-character file
    assert gpt2_ours.decode(ours) == shakespeare
    train, val = train_val_split(shakespeare)
    assert (len(gpt2_ours.encode(train)), len(gpt2_ours.encode(val))) == (301_966, 36_059)  # nanoGPT's split


def test_gpt2_vocabulary_matches_tiktoken(gpt2_ours):
    enc = gpt2_encoding()
    assert gpt2_ours.vocab_size == enc.n_vocab == 50257
    assert all(gpt2_ours.vocab[i] == enc.decode_single_token_bytes(i) for i in range(enc.n_vocab))
    assert gpt2_ours.special_tokens == {END_OF_TEXT: END_OF_TEXT_ID}
    assert gpt2_ours.encode("Hello world") == [15496, 995]
    assert sorted(gpt2_ours.byte_ids) == list(range(256)) and gpt2_ours.byte_ids[32] == 220


def test_bytes_to_unicode():
    table = bytes_to_unicode()
    assert list(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert (table[32], table[10], table[ord("A")], table[0]) == ("Ġ", "Ċ", "A", "Ā")
    assert all(c.isprintable() and not c.isspace() for c in table.values())


def test_corrupt_gpt2_file_raises_checksum_error(tmp_path, monkeypatch):
    (tmp_path / "gpt2").mkdir()
    for name in ("gpt2/vocab.bpe", "gpt2/encoder.json"):
        shutil.copy(data_path(name), tmp_path / name)
    with open(tmp_path / "gpt2/vocab.bpe", "a", encoding="utf-8") as f:
        f.write("Ġ x\n")  # one extra merge: a different file
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path))
    with pytest.raises(ChecksumError, match="vocab.bpe has sha256"):
        BPETokenizer.from_gpt2()


# --- special tokens, serialisation, bad input ----------------------------------------------------------------------

def test_special_tokens():
    tok = BPETokenizer().train(SMALL_TEXT, 300, special_tokens=[END_OF_TEXT, "<|pad|>"])
    assert tok.special_tokens == {END_OF_TEXT: 298, "<|pad|>": 299} and tok.vocab_size == 300
    text = f"Speak{END_OF_TEXT}<|pad|>hear"
    ids = tok.encode(text, allow_special=True)
    assert ids == tok.encode("Speak") + [298, 299] + tok.encode("hear")
    assert 298 not in tok.encode(text) and 299 not in tok.encode(text)
    assert tok.decode(ids) == text


def test_longest_special_token_wins():
    tok = BPETokenizer().train("abc", 260, special_tokens=["<a>", "<a><b>"])
    assert tok.encode("<a><b><a>", allow_special=True) == [tok.special_tokens["<a><b>"], tok.special_tokens["<a>"]]


@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
def test_to_dict_round_trip(cls):
    tok = cls().train(SMALL_TEXT, 290, special_tokens=[END_OF_TEXT])
    again = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert type(again) is cls
    assert (again.merges, again.special_tokens, again.vocab) == (tok.merges, tok.special_tokens, tok.vocab)
    assert again.encode(SMALL_TEXT) == tok.encode(SMALL_TEXT)


def test_from_dict_other_kinds(gpt2_ours):
    assert gpt2_ours.to_dict() == {"kind": "bpe", "preset": "gpt2"}
    assert tokenizer_from_dict(gpt2_ours.to_dict()).encode("Hello world") == [15496, 995]
    assert isinstance(tokenizer_from_dict({"kind": "gpt2"}), TiktokenGPT2)
    assert tokenizer_from_dict(CharTokenizer().train("abc").to_dict()).chars == ["a", "b", "c"]
    with pytest.raises(ValueError, match="'llama'"):
        tokenizer_from_dict({"kind": "bpe", "preset": "llama"})
    with pytest.raises(ValueError, match="'wordpiece'"):
        tokenizer_from_dict({"kind": "wordpiece"})


def test_training_a_loaded_gpt2_tokenizer_forgets_the_preset():
    tok = BPETokenizer.from_gpt2().train("hello hello", 260)
    assert "preset" not in tok.to_dict() and tok.vocab_size == 260 and tok.byte_ids == list(range(256))


def test_decode_accepts_tensors_and_rejects_unknown_ids(small_bpe):
    ids = small_bpe.encode("Speak, speak.")
    assert small_bpe.decode(torch.tensor(ids)) == "Speak, speak."
    with pytest.raises(ValueError, match=f"token id {small_bpe.vocab_size} is outside"):
        small_bpe.decode([small_bpe.vocab_size])
    assert small_bpe.decode([0xFF]) == "\ufffd"  # invalid UTF-8 is replaced, not an error


@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
def test_bad_training_arguments(cls):
    with pytest.raises(ValueError, match="vocab_size=255"):
        cls().train("abc", 255)
    with pytest.raises(ValueError, match=r"vocab_size=256 must be an int >= 257 \(256 bytes \+ 1 special token"):
        cls().train("abc", 256, special_tokens=[END_OF_TEXT])
    with pytest.raises(ValueError, match="vocab_size=300.0"):
        cls().train("abc", 300.0)
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        cls().train(b"abc", 300)
    with pytest.raises(ValueError, match="distinct non-empty"):
        cls().train("abc", 300, special_tokens=["<x>", "<x>"])
    with pytest.raises(TypeError, match="text must be a str"):
        cls().encode(b"abc")


def test_char_and_gpt2_tokenizers():
    tok = CharTokenizer().train("hello")
    assert tok.decode(tok.encode("hole")) == "hole"
    with pytest.raises(ValueError, match="character 'z'"):
        tok.encode("z")
    gpt2 = TiktokenGPT2()
    assert gpt2.encode(f"a{END_OF_TEXT}", allow_special=True)[-1] == END_OF_TEXT_ID == gpt2.eos_token_id
    with pytest.raises(ValueError, match="token id 50257"):
        gpt2.decode([50257])


# --- one protocol for every tokenizer -----------------------------------------------------------------------------

PROTOCOL_TEXT = "the cat sat on the mat; naïve café. " * 3
EVERY_TOKENIZER = {
    "char": lambda: CharTokenizer().train(PROTOCOL_TEXT),
    "basic-bpe": lambda: BasicBPETokenizer().train(PROTOCOL_TEXT, 270),
    "bpe": lambda: BPETokenizer().train(PROTOCOL_TEXT, 270, special_tokens=[END_OF_TEXT]),
    "bpe-from-gpt2": BPETokenizer.from_gpt2,
    "tiktoken-gpt2": TiktokenGPT2,
}


@pytest.mark.parametrize("name", EVERY_TOKENIZER)
def test_every_tokenizer_meets_the_protocol(name):
    tok = EVERY_TOKENIZER[name]()
    assert isinstance(tok, TokenizerProtocol)
    ids = tok.encode(PROTOCOL_TEXT)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == tok.decode(torch.tensor(ids)) == PROTOCOL_TEXT
    pieces = [PROTOCOL_TEXT[:5], PROTOCOL_TEXT[5:41], PROTOCOL_TEXT[41:]]
    assert list(tok.encode_iterable(iter(pieces))) == ids
    assert tokenizer_from_dict(json.loads(json.dumps(tok.to_dict()))).encode(PROTOCOL_TEXT) == ids


@pytest.mark.parametrize("name", EVERY_TOKENIZER)
def test_train_has_one_shape(name):
    "`tok.train(text, vocab_size)`: the same two leading parameters, training in place and returning the tokenizer."
    tok = EVERY_TOKENIZER[name]()
    assert list(inspect.signature(tok.train).parameters)[:2] == ["text", "vocab_size"]
    if isinstance(tok, TiktokenGPT2):
        with pytest.raises(NotImplementedError, match="cannot be trained"):
            tok.train(PROTOCOL_TEXT, 300)
        return
    n = len(set(PROTOCOL_TEXT)) if isinstance(tok, CharTokenizer) else 265
    assert tok.train("abc " + PROTOCOL_TEXT, n + (1 if isinstance(tok, CharTokenizer) else 0)) is tok
    assert tok.vocab_size == n + (1 if isinstance(tok, CharTokenizer) else 0)


def test_char_tokenizer_train_on_the_class_is_a_fresh_instance():
    assert CharTokenizer.train("hello").chars == CharTokenizer().train("hello").chars == list("ehlo")
    with pytest.raises(ValueError, match="vocab_size=3, but the text has 4 distinct characters"):
        CharTokenizer().train("hello", 3)
    with pytest.raises(ValueError, match="empty text"):
        CharTokenizer().train("")


def test_gpt2_tokenizer_is_a_deprecated_alias_of_tiktoken_gpt2():
    import transformerbook.tokenization as T
    with pytest.warns(DeprecationWarning, match="TiktokenGPT2"):
        old = T.GPT2Tokenizer
    assert old is TiktokenGPT2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = {n: getattr(T, n) for n in T.__all__}  # what `import *` takes: the alias is not in it
    assert "GPT2Tokenizer" not in names and names["TiktokenGPT2"] is TiktokenGPT2


# --- bad input and chunk boundaries (audit) ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bpe-from-gpt2", "tiktoken-gpt2"])
@pytest.mark.parametrize("cut", [["we'l", "l"], ["you'r", "e"], ["I'v", "e"], ["it'", "s ok"], ["we'll", " go'll"]])
def test_encode_iterable_cut_inside_a_contraction(name, cut):
    tok = EVERY_TOKENIZER[name]()
    assert list(tok.encode_iterable(cut)) == tok.encode("".join(cut))


@pytest.mark.parametrize("name", ["bpe-from-gpt2", "tiktoken-gpt2"])
def test_encode_iterable_random_cuts(name):
    import random
    rng, tok = random.Random(0), EVERY_TOKENIZER[name]()
    alphabet = "ab 'lrvesdtm\n\t.,1é"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(3, len(text) + 1)))
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
        assert list(tok.encode_iterable(pieces)) == tok.encode(text), pieces


def test_pair_counts_and_merges_take_tensors_and_reject_bad_ids():
    from transformerbook.tokenization import apply_merges, learn_chunk_merges, learn_merges
    ids = list(b"aaabdaaabac")
    assert get_pair_counts(torch.tensor(ids)) == get_pair_counts(ids)
    assert learn_merges(torch.tensor(ids), 3) == learn_merges(ids, 3)
    assert apply_merges(torch.tensor(ids), learn_merges(ids, 3)) == [258, 100, 258, 97, 99]
    with pytest.raises(TypeError, match=r"got 2.5 \(float\) at position 1"):
        get_pair_counts([1, 2.5])
    with pytest.raises(TypeError, match="dtype torch.float32"):
        learn_merges(torch.tensor([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match="n_merges=-1 must be a non-negative int"):
        learn_merges(ids, -1)
    with pytest.raises(ValueError, match="n_merges=-1 must be a non-negative int"):
        learn_chunk_merges(Counter(["ab"]), -1)


@pytest.mark.parametrize("name", EVERY_TOKENIZER)
def test_decode_rejects_2d_and_float_ids(name):
    tok = EVERY_TOKENIZER[name]()
    with pytest.raises(ValueError, match=r"ids must be 1-D, got shape \(1, 2\): decode one row, e.g. out\[0\]"):
        tok.decode(torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match=r"ids must be 1-D, got shape \(2, 1\)"):
        tok.decode(torch.tensor([[5], [6]]))
    with pytest.raises(TypeError, match=r"got 1.7 \(float\) at position 0"):
        tok.decode([1.7])
    with pytest.raises(TypeError, match="dtype torch.float32"):
        tok.decode(torch.tensor([1.0]))
