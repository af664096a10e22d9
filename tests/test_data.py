"""The data module: mirror first, then cache, then download; checksums always verified; clear offline errors."""
import hashlib
import shutil

import pytest

from transformerbook import data


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    "A private copy of the real data mirror, and an empty cache."
    dst = tmp_path / "mirror"
    for name in data.DATA_FILES:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(data.data_path(name), dst / name)
    monkeypatch.setenv(data.MIRROR_ENV, str(dst))
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    return dst


@pytest.mark.parametrize("name", sorted(data.DATA_FILES))
def test_files_match_their_size_and_checksum(name):
    p = data.data_path(name)
    f = data.DATA_FILES[name]
    assert p.stat().st_size == f.n_bytes
    assert hashlib.sha256(p.read_bytes()).hexdigest() == f.sha256


def test_mirror_is_used_first(mirror):
    assert data.data_path("gpt2/vocab.bpe") == mirror / "gpt2" / "vocab.bpe"


def test_corrupt_mirror_file_is_rejected_with_both_digests(mirror):
    p = mirror / "gpt2" / "vocab.bpe"
    p.write_bytes(p.read_bytes()[:-1] + b"x")
    with pytest.raises(data.ChecksumError, match="expected 1ce1664773c50f3e"):
        data.data_path("gpt2/vocab.bpe")


def test_missing_offline_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    f = data.DATA_FILES["tinyshakespeare.txt"]
    unreachable = data.DataFile(f.name, "http://127.0.0.1:9/input.txt", f.sha256, f.n_bytes)
    monkeypatch.setitem(data.DATA_FILES, f.name, unreachable)
    with pytest.raises(data.DataUnavailableError) as err:
        data.data_path("tinyshakespeare.txt")
    msg = str(err.value)
    assert "TRANSFORMERBOOK_DATA" in msg and str(tmp_path / "cache" / "tinyshakespeare.txt") in msg
    assert not (tmp_path / "cache" / "tinyshakespeare.txt").exists(), "a failed download must not leave a cache entry"


def test_cached_file_is_used_without_network(tmp_path, monkeypatch, mirror):
    cached = tmp_path / "cache" / "tinyshakespeare.txt"
    cached.parent.mkdir(parents=True)
    shutil.copy(mirror / "tinyshakespeare.txt", cached)
    monkeypatch.delenv(data.MIRROR_ENV)
    f = data.DATA_FILES["tinyshakespeare.txt"]
    monkeypatch.setitem(data.DATA_FILES, f.name, data.DataFile(f.name, "http://127.0.0.1:9/x", f.sha256, f.n_bytes))
    assert data.data_path("tinyshakespeare.txt") == cached


def test_unknown_name():
    with pytest.raises(KeyError, match="unknown data file 'shakespeare.txt'"):
        data.data_path("shakespeare.txt")


def test_split_and_gpt2_counts():
    text = data.load_tinyshakespeare()
    train, val = data.train_val_split(text)
    assert (len(train), len(val)) == (1_003_854, 111_540)
    enc = data.gpt2_encoding()
    assert enc.encode("Hello world") == [15496, 995]
    assert (len(enc.encode_ordinary(train)), len(enc.encode_ordinary(val))) == (301_966, 36_059)


@pytest.mark.parametrize("frac", [0, 1, 1.5, -0.1])
def test_bad_split_fraction(frac):
    with pytest.raises(ValueError, match=f"val_fraction={frac}"):
        data.train_val_split("abc", val_fraction=frac)


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_prepare_data_names_a_file_that_is_not_utf8(tmp_path, tokenizer):
    from transformerbook.corpus import prepare_data
    (tmp_path/"corpus").mkdir()
    (tmp_path/"corpus/a.txt").write_text("To be, or not to be.\n" * 5)
    (tmp_path/"corpus/b.txt").write_bytes("café, naïve\n".encode("latin-1") * 5)
    with pytest.raises(ValueError, match=r"b\.txt is not UTF-8 text"):
        prepare_data(tmp_path/"corpus", tmp_path/"out", tokenizer, progress=False)


def test_pack_documents_and_check_splits_reject_bad_input():
    import torch

    from transformerbook.corpus import check_splits, pack_documents
    assert pack_documents([torch.tensor([1, 2]), [3]], 2, 0).tolist() == [[1, 2], [0, 3]]
    with pytest.raises(TypeError, match=r"documents\[0\] is a str"):
        pack_documents(["12"], 2, 0)
    with pytest.raises(TypeError, match=r"documents\[0\] must be integer token ids, got 1.5 \(float\) at position 1"):
        pack_documents([[1, 1.5]], 2, 0)
    for bad in (0, -5, 4.5):
        with pytest.raises(ValueError, match=f"context_length={bad!r} must be a positive int"):
            check_splits(torch.arange(20), torch.arange(10), bad)


CPUINFO = {  # the first processor's lines of /proc/cpuinfo on three kinds of machine (trimmed)
    "avx512_bf16": "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni\n"
                   "\nprocessor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu\n",
    "avx2": "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2\n",
    "arm": "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm bf16\nCPU implementer\t: 0x41\n",
}


@pytest.mark.parametrize("kind, model, sets, bf16", [
    ("avx512_bf16", "AMD EPYC", ["avx2", "avx512_bf16", "avx512f"], True),
    ("avx2", "AMD EPYC", ["avx2"], False),
    ("arm", None, ["asimd", "bf16"], True),  # Arm's /proc/cpuinfo has Features and no model name
    ("none", None, [], None),  # no /proc/cpuinfo (macOS, Windows): nothing claimed about bfloat16
])
def test_machine_record_reads_the_cpu(monkeypatch, kind, model, sets, bf16):
    "`experiment_record`'s machine: the first processor's model and instruction sets, whatever the OS offers."
    import platform
    from pathlib import Path
    read = Path.read_text
    def fake(self, *args, **kwargs):
        if str(self) != "/proc/cpuinfo": return read(self, *args, **kwargs)
        if kind == "none": raise FileNotFoundError(self)
        return CPUINFO[kind]
    monkeypatch.setattr(Path, "read_text", fake)
    monkeypatch.setattr(platform, "processor", lambda: "")
    here = data.machine_record()
    assert (here["cpu_model"], here["instruction_sets"], here["bf16_instructions"]) == (model or "unknown", sets, bf16)
    record = data.experiment_record("python experiments/demo.py", [0], {})
    assert record["machine"] == here and record["machine"]["torch"] and record["machine"]["cpu_count"] >= 1
