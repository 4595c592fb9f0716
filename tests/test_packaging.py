"""Packaging: the kernel sources ship inside the wheel and are found after a non-editable install;
README's set-up commands and CI agree."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    setuptools = pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools")
    if tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.skip("the SPDX `license` string and `license-files` need setuptools >= 77 "
                    f"(found {setuptools.__version__}): pip install 'setuptools>=77'")
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what the wheel is made of: setuptools builds in the source tree's
    # build/, which pytest-xdist workers (and a developer's own builds) would share.
    src = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "cupyconv", src / "cupyconv",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("cupyconv-*.whl")
    return whl


def test_wheel_contains_every_kernel_source(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    kernel_dir = ROOT / "cupyconv" / "kernel_src"
    sources = sorted(p.relative_to(kernel_dir).as_posix() for p in kernel_dir.rglob("*")
                     if p.suffix in (".cu", ".cuh"))
    assert sources
    for s in sources:
        assert f"cupyconv/kernel_src/{s}" in names
    # every subpackage of the layered layout ships too
    packages = sorted(p.parent.relative_to(ROOT).as_posix() for p in
                      (ROOT / "cupyconv").rglob("__init__.py"))
    assert len(packages) > 1
    for pkg in packages:
        assert f"{pkg}/__init__.py" in names


def test_non_editable_install_finds_kernel_sources(wheel, tmp_path):
    # A --target install keeps this independent of how the running Python is itself installed
    # (system, pyenv or a venv); cwd and PYTHONPATH keep the source checkout off sys.path.
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    code = ("import cupyconv, pathlib; from cupyconv._core.kernels import REGISTRY; "
            "[m.code for m in REGISTRY]; print(pathlib.Path(cupyconv.__file__).resolve())")
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(site.resolve())


def test_readme_starts_with_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text().splitlines()
    block = readme[readme.index("```bash") + 1: readme.index("```bash") + 3]
    assert block[0].endswith("python3 -m cupyconv demo")
    assert block[1].endswith("python3 -m pytest -q")
    assert readme.index("```bash") < 5
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert block[1] in ci
    assert any("CUPYCONV_REQUIRE_COMPILERS=1" in line for line in ci)


def test_demo_command():
    """With a GPU the demo convolves and checks; without one it says so and compiles a sample of
    the kernels, then names the full check."""
    from cupyconv._core.timing import gpu_available

    from cupyconv._cli.compile_check import FULL_CHECK, MODULES_ENV

    # README's command as given; without a GPU its sample is cut to one module (the sample's
    # rule is test_compile_check's), so this test costs seconds, not a minute.
    env = dict(os.environ, **{MODULES_ENV: "common/copy.cu"})
    proc = subprocess.run([sys.executable, "-m", "cupyconv", "demo", "--repeat", "3"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if gpu_available():
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "all results match" in proc.stdout
        return
    assert "No GPU" in proc.stdout
    assert "compile check:" in proc.stdout
    assert "from 1 of the 1 kernel modules" in proc.stdout
    assert proc.stdout.rstrip().endswith(FULL_CHECK)
    # a line per kernel family and target, not one per compile
    assert len(proc.stdout.splitlines()) < 30, proc.stdout
    assert proc.returncode in (0, 1)
    if "0 failed, 0 skipped" in proc.stdout:
        assert proc.returncode == 0


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on 3.10 needs tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_with_its_file():
    project = _pyproject()["project"]
    assert project["license"] == "MIT"  # PEP 639 string, not the deprecated {text = ...} table
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "cupyconv developers" in text
    # the license fields need setuptools >= 77 at build time
    assert any(r.replace(" ", "").startswith("setuptools>=77")
               for r in _pyproject()["build-system"]["requires"])


def test_wheel_metadata_names_the_license(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
        assert "License-Expression: MIT" in text
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist())


@pytest.mark.parametrize("extra,major", [("cuda12", "12"), ("cuda13", "13")])
def test_each_cuda_extra_brings_nvrtc(extra, major):
    """A machine without the CUDA toolkit JITs with the NVRTC wheels the extra installs."""
    reqs = [r.replace(" ", "") for r in _pyproject()["project"]["optional-dependencies"][extra]]
    assert any(r.startswith(f"cupy-cuda{major}x") for r in reqs)
    nvrtc = [r for r in reqs if r.startswith("nvidia-cuda-nvrtc")]
    assert nvrtc and all(f"=={major}." in r or f"-cu{major}" in r for r in nvrtc), reqs
