"`tools/execute_nbs.py`, the executor `make book` uses: two workers, kernels started one at a time, failures reported."
from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

import execute_nbs
from conftest import ROOT


def _write(path, *sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_two_workers_execute_every_notebook_and_report_the_failing_one(tmp_path, capsys):
    nbs, out = tmp_path / "nbs", tmp_path / "out"
    nbs.mkdir()
    for i in range(3): _write(nbs / f"ok{i}.ipynb", f"print({i} * 7)")
    _write(nbs / "bad.ipynb", "raise ValueError('boom')", "print('never')")
    rc = execute_nbs.main([str(nbs), "--out", str(out), "--root", str(nbs), "--workers", "2", "--timeout", "60"])
    assert rc == 1
    for i in range(3):
        assert nbformat.read(out / f"ok{i}.ipynb", 4).cells[0].outputs[0]["text"] == f"{i * 7}\n"
    assert "ValueError" in capsys.readouterr().err and (out / "bad.ipynb").exists()


def test_in_place_a_failed_run_leaves_the_notebook_as_it_was(tmp_path, capsys):
    "`make outputs` must never replace a notebook's saved outputs with a half-run copy."
    path = _write(tmp_path / "bad.ipynb", "print('first')", "raise ValueError('boom')")
    before = path.read_text()
    assert execute_nbs.main([str(path), "--inplace", "--workers", "1", "--timeout", "60"]) == 1
    assert path.read_text() == before and "left as it was" in capsys.readouterr().err


def test_the_chapters_that_train_shared_models_start_first(tmp_path):
    "A chapter of `TRAINS_FIRST` starts before the rest (in its order); a checker notebook of the same name does not."
    root = tmp_path / "nbs"
    (root / "checks").mkdir(parents=True)
    names = ["00_notation.ipynb", "05b_word2vec.ipynb", "07_sampling.ipynb", "11_inside.ipynb", "11b_finetune.ipynb"]
    paths = [_write(root / name, "1") for name in names] + [_write(root / "checks" / names[2], "1")]
    srcs = execute_nbs.notebooks([str(path) for path in paths])
    order = [s.relative_to(root).as_posix() for s in execute_nbs.queue(srcs, root)]
    assert order == ["07_sampling.ipynb", "11b_finetune.ipynb", "11_inside.ipynb", "00_notation.ipynb",
                     "05b_word2vec.ipynb", "checks/07_sampling.ipynb"]
    assert all((ROOT / "nbs" / name).is_file() for name in execute_nbs.TRAINS_FIRST)  # the book's own chapters
