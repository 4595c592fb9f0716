"""README.md's and docs/*.md's Python examples run as written: each ```python block is
self-contained (it defines every name it uses), compiles, and (on a GPU) runs.  README.md links
every docs page, and every page it links exists."""

import ast
import builtins
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))
_FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def python_blocks(text: str | None = None) -> list[tuple[int, str]]:
    """(line number, dedented source) of every ```python block, indented ones (in lists) too."""
    text = README.read_text() if text is None else text
    blocks = []
    for m in _FENCE.finditer(text):
        indent = len(m.group(1))
        body = "".join(line[indent:] if line[:indent].strip() == "" else line
                       for line in m.group(2).splitlines(keepends=True))
        blocks.append((text.count("\n", 0, m.start()) + 1, body))
    return blocks


def undefined_names(source: str) -> set[str]:
    """Names a block reads but neither assigns, imports, defines nor gets from builtins (a
    pyflakes-like check, ignoring order within the block)."""
    tree = ast.parse(source)
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            stored.add(node.name)
    return loaded - stored - set(dir(builtins))


BLOCKS = [(f"{page.relative_to(ROOT)}:{line}", source)
          for page in PAGES for line, source in python_blocks(page.read_text())]


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 3
    assert python_blocks(), "README.md shows no example"


def test_the_readme_links_every_docs_page_and_each_link_resolves():
    text = README.read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES[1:]}
    assert pages and linked == pages, (sorted(pages - linked), sorted(linked - pages))
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links {target}"


def test_the_block_finder_and_name_check():
    text = "x\n```python\nimport a\ny = a.f(z)\n```\n- item\n\n  ```python\n  print(q)\n  ```\n"
    assert [b for _, b in python_blocks(text)] == ["import a\ny = a.f(z)\n", "print(q)\n"]
    assert undefined_names("import a\ny = a.f(z)\n") == {"z"}
    assert undefined_names("f = lambda *s: len(s)\nfor i in range(3):\n    f(i)\n") == set()


@pytest.mark.parametrize("where,source", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_each_example_compiles_and_defines_what_it_uses(where, source):
    compile(source, where, "exec")
    assert undefined_names(source) == set(), where


@pytest.mark.gpu
@pytest.mark.parametrize("where,source", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_each_example_runs(where, source):
    import cupy

    if "import dask" in source or "dask." in source:  # the optional extra cupyconv[dask]
        pytest.importorskip("dask.array")
    if "dask_cuda" in source:  # the multi-GPU recipe's own extras
        pytest.importorskip("dask_cuda")
        pytest.importorskip("distributed")
    if "import torch" in source:  # PyTorch examples: a peer library, no dependency
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("this PyTorch has no CUDA")

    exec(compile(source, where, "exec"), {"__name__": "readme_example"})
    cupy.cuda.Device().synchronize()
