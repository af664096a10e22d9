"""The lock, `transformerbook doctor` and the tools of `make test-latest` / `make test-oldest` (issue 22)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from transformerbook.environment import lock_differences, lock_path, pip_freeze, read_lock

ROOT = Path(__file__).resolve().parent.parent


def test_the_lock_is_package_data_and_the_root_file_is_the_same():
    assert lock_path().is_file() and lock_path().parent.name == "transformerbook"
    assert (ROOT / "requirements-lock.txt").read_text() == lock_path().read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"requirements-lock.txt"' in pyproject  # shipped in the wheel, so an installed copy finds it


def test_the_lock_pins_the_cpu_torch_on_linux_and_pypi_torch_elsewhere():
    linux = read_lock(env={"sys_platform": "linux", "platform_machine": "x86_64", "python_full_version": "3.12.1"})
    mac = read_lock(env={"sys_platform": "darwin", "platform_machine": "arm64", "python_full_version": "3.12.1",
                         "os_name": "posix"})
    assert linux["torch"].endswith("+cpu") and mac["torch"] == linux["torch"].removesuffix("+cpu")
    assert "appnope" in mac and "appnope" not in linux  # a marker the reader's platform decides
    assert not any(name.startswith("nvidia") for name in linux)  # no CUDA libraries on Linux


def test_read_lock_rejects_a_range(tmp_path):
    (tmp_path / "lock.txt").write_text("numpy>=1.26\n")
    with pytest.raises(ValueError, match="'numpy>=1.26' is not 'name==version'"):
        read_lock(tmp_path / "lock.txt")


def _wheel(folder: Path, name: str, version: str) -> Path:
    "A minimal pure-Python wheel of distribution `name` at `version` (one module), built offline."
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}.py", f"__version__ = {version!r}\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", f"{name}.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def test_doctor_names_a_package_installed_off_the_lock(tmp_path):
    "pip installs `tabulate` 0.0.1 into a folder put first on PYTHONPATH: the doctor names it, with the lock's version."
    locked = read_lock()["tabulate"]
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), str(_wheel(tmp_path, "tabulate", "0.0.1"))], check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "transformerbook", "doctor"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Python ") and lines[1].startswith("torch ") and " on " in lines[1]
    off = [line.split() for line in lines if line.split()[:1] == ["tabulate"]]
    assert off == [["tabulate", "0.0.1", "(lock:", f"{locked})"]], done.stdout
    plain = subprocess.run([sys.executable, "-m", "transformerbook", "doctor"], capture_output=True, text=True,
                           timeout=120).stdout
    assert "tabulate" not in plain  # without the folder, this venv's tabulate is the locked one again


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="checks `make env`'s .venv only (make test-latest/-oldest run in venvs off the lock)")
def test_the_venv_holds_exactly_the_lock():
    "`pip freeze` of the venv `make env` built equals the lock: no package missing, extra or at another version."
    assert lock_differences(pip_freeze(sys.executable), read_lock()) == []


# --- the tools of make test-latest / make test-oldest -----------------------------------------------------------

def test_changed_outcomes_compares_two_junit_reports(tmp_path):
    import test_versions as tv
    xml = ('<testsuites><testsuite><testcase classname="tests.a" name="test_x"/>'
           '<testcase classname="tests.a" name="test_y"><failure message="boom"/></testcase>'
           '<testcase classname="tests.a" name="test_z"><skipped/></testcase></testsuite></testsuites>')
    (tmp_path / "run.xml").write_text(xml)
    run = tv.junit_outcomes(tmp_path / "run.xml")
    assert run == {"tests.a::test_x": "passed", "tests.a::test_y": "failed", "tests.a::test_z": "skipped"}
    baseline = {"tests.a::test_x": "passed", "tests.a::test_y": "passed", "tests.a::test_z": "skipped",
                "tests.a::test_w": "passed"}
    assert tv.changed_outcomes(run, baseline) == [("tests.a::test_w", "passed", "absent"),
                                                  ("tests.a::test_y", "passed", "failed")]
    assert tv.changed_outcomes(run, None) == [("tests.a::test_y", "passed", "failed"),
                                              ("tests.a::test_z", "passed", "skipped")]
    # what fails the run: a failure, an error or a test gone; a new skip is reported only
    assert tv.worse(tv.changed_outcomes(run, baseline)) == tv.changed_outcomes(run, baseline)
    assert tv.worse(tv.changed_outcomes(run, None)) == [("tests.a::test_y", "passed", "failed")]
    assert tv.worse([("tests.a::test_v", "passed", "error")]) == [("tests.a::test_v", "passed", "error")]
    # `make test`'s baseline (pytest-xdist, --dist loadgroup) names tests "test_x@group": the same tests
    grouped = xml.replace('name="test_x"', 'name="test_x@test_a"')
    grouped = grouped.replace('name="test_z"', 'name="test_z[a@b]@test_a"')
    (tmp_path / "lock.xml").write_text(grouped)
    assert set(tv.junit_outcomes(tmp_path / "lock.xml")) == {"tests.a::test_x", "tests.a::test_y",
                                                           "tests.a::test_z[a@b]"}


def test_failed_notebooks_reads_nbdev_tests_summary():
    import test_versions as tv
    log = ("Error in nbs/07_sampling.ipynb\n...\nnbdev Tests Failed On The Following Notebooks:\n"
           "==================================================\n\t07_sampling.ipynb\n\t01_attention.ipynb\n")
    assert tv.failed_notebooks(log) == ["07_sampling.ipynb", "01_attention.ipynb"]
    assert tv.failed_notebooks("Success.\n") == []


def test_torch_options_use_a_local_wheel_else_pytorchs_cpu_index(tmp_path, monkeypatch):
    import torch_index
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.13.0+cpu ; sys_platform == 'linux'\ntorch==2.13.0 ; sys_platform != 'linux'\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setattr(torch_index, "pip_find_links", lambda: [wheels])
    assert torch_index.torch_options(lock, "linux") == ["--extra-index-url", torch_index.TORCH_CPU_INDEX]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (wheels / f"torch-2.13.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert torch_index.torch_options(lock, "linux") == ["--find-links", str(wheels)]
    assert torch_index.torch_options(lock, "darwin") == []  # PyPI's torch is the lock's there


def test_make_test_groups_each_module_starts_the_longest_first_and_builds_the_site_once(tmp_path):
    """`make test`'s pytest options with this repository's conftest (tests/conftest.py), on stand-in test modules:
    every test of a module runs in one process; the first two of `LONGEST_FIRST` start at once, one in each process,
    and the third goes to the second process (the explorers' tests, after the torchrun tests, beside the site's). The
    site is built once: a stand-in `test_site.build_book` logs each call and takes a second; the site's process builds
    it, the explorers' waits on conftest's lock, and both read the same folder. The groups failed silently twice: with
    the hook running after xdist's, and with pytest 9.2 (pytest-xdist#1386). One pytest run checks both (each run
    starts three processes: 7-8 s)."""
    options = re.search(r"-m pytest -q (.*) --junitxml", (ROOT / "Makefile").read_text()).group(1)
    assert options == "-n $(WORKERS) --dist loadgroup --no-loadscope-reorder", options
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('book_conftest', {str(ROOT / 'tests' / 'conftest.py')!r})\n"
        "book_conftest = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(book_conftest)\n"
        "pytest_collection_modifyitems = book_conftest.pytest_collection_modifyitems\n"
        "book = book_conftest.book\n")
    ran, log = tmp_path / "ran.txt", tmp_path / "log.txt"
    for module in ("test_a", "test_b", "test_distributed", "test_explorers", "test_site"):  # collected in this order
        uses_site = module in ("test_explorers", "test_site")
        (tmp_path / f"{module}.py").write_text(
            "import os, time, pytest\n"
            "def build_book(tmp, build=True):\n"
            f"    with open({str(log)!r}, 'a') as f:\n"
            "        f.write(f'build={build} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
            "    if build: time.sleep(1); (tmp / '_site').mkdir(parents=True)\n"
            "    return tmp / '_site', ['index'], tmp / 'nbs'\n"
            f"@pytest.mark.parametrize('i', range(6))\ndef test_x(i{', book' if uses_site else ''}):\n"
            f"    time.sleep({0.5 if module == 'test_site' else 0.05})\n"  # the site's is the longest by far
            f"    with open({str(ran)!r}, 'a') as f: f.write('{module} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
            + (f"    with open({str(log)!r}, 'a') as f: f.write('read ' + str(book[0]) + '\\n')\n"
               if uses_site else ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *options.replace("$(WORKERS)", "2").split(), str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split() for line in ran.read_text().splitlines()]
    workers = {module: {w for m, w in ran if m == module} for module, _ in ran}
    assert len(ran) == 30 and all(len(w) == 1 for w in workers.values()), workers
    first = {w: m for m, w in reversed(ran)}  # the module each process started with
    assert sorted(first.values()) == ["test_distributed", "test_site"], ran[:4]  # the first two, side by side
    assert workers["test_site"] != workers["test_distributed"] == workers["test_explorers"], workers
    assert [m for m, _ in ran if m != "test_site"][:12] == ["test_distributed"] * 6 + ["test_explorers"] * 6, ran
    lines = log.read_text().splitlines()
    builds = [line for line in lines if line.startswith("build=True")]
    reads = {line for line in lines if line.startswith("read ")}
    opened = {line.split()[1] for line in lines if line.startswith("build=False")}
    assert len(builds) == 1 and opened == {"gw0", "gw1"} and len(reads) == 1, lines  # one build; both read it


@pytest.mark.parametrize("bf16, says", [(True, "bfloat16 instructions: yes"),
                                        (False, "no bfloat16 instructions: autocast to bfloat16 is slow here (10x "
                                                "float32 in chapter 08b)"),
                                        (None, "bfloat16 instructions: unknown")])
def test_doctor_says_what_bfloat16_costs_on_this_cpu(monkeypatch, bf16, says):
    "The doctor's CPU line: model, cores, instruction sets, and whether bfloat16 has instructions here (chapter 08b)."
    from transformerbook import environment
    record = {"cpu_model": "AMD EPYC", "cpu_count": 2, "instruction_sets": ["avx2"] if bf16 is not None else [],
              "bf16_instructions": bf16}
    monkeypatch.setattr(environment, "machine_record", lambda: record)
    line = environment.cpu_line()
    assert line.startswith("AMD EPYC, 2 cores (") and line.endswith(says)
    assert ("(avx2)" in line) == (bf16 is not None) and ("instruction sets unknown" in line) == (bf16 is None)
    report = environment.doctor_report(installed={"torch": "2.13.0"}, locked={"torch": "2.13.0"})
    assert f"\nCPU      {line}\n" in report
    assert "CPU      -" in environment.doctor_report(installed={}, locked={})  # no torch: nothing asked
