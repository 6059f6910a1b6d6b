"""The published repository's URL is set in one place (_config.yml): the README's Binder badge and every install
cell agree with it, and the install is pinned to the library's release tag (tools/repository.py)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str):
    """The module tools/<name>.py (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


repository = _tool("repository")


def test_every_chapter_has_one_install_cell():
    chapters = [page for page in (ROOT / "book_src").glob("*.md") if "```{code-cell}" in page.read_text()
                and page.stem not in ("status", "proved")]
    missing = [page.name for page in chapters if len(repository.INSTALL.findall(page.read_text())) != 1]
    assert not missing, f"pages with code but not exactly one install cell: {missing}"


def test_readme_and_install_cells_follow_the_config():
    stale = [path.name for path, text in repository.expected().items() if path.read_text() != text]
    assert not stale, f"{stale} disagree with _config.yml's repository: run `python tools/repository.py --write`"


def test_install_is_pinned_to_the_release_tag():
    url, _, version = repository.settings()
    lines = repository.install_lines(url, version)
    assert f"@v{version}#subdirectory=lib" in lines and url in lines


def test_a_new_address_reaches_every_place(monkeypatch):
    monkeypatch.setattr(repository, "settings", lambda: ("https://github.com/someone/fork", "dev", "9.9.9"))
    files = repository.expected()
    assert "(https://mybinder.org/v2/gh/someone/fork/dev?urlpath=lab/tree/book)" in files[repository.README]
    assert files[repository.LIB_README].count("git+https://github.com/someone/fork@v9.9.9#subdirectory=lib") == 2
    pages = [text for path, text in files.items() if path.parent.name == "book_src"]
    assert sum('repo = "https://github.com/someone/fork"' in text for text in pages) >= 15
    assert any("note   = {https://github.com/someone/fork}" in text for text in pages)
    assert not any("attnsvm/attention-max-margin-book" in text for text in files.values())


def test_the_readme_and_the_status_page_show_the_same_benchmark_run():
    """`make bench` writes its table into README.md between two markers and into benchmarks/results.json, which
    the status page shows: both must hold the same run."""
    import json

    readme = (ROOT / "README.md").read_text()
    start, end = "<!-- make bench: start -->", "<!-- make bench: end -->"
    shown = readme[readme.index(start) + len(start):readme.index(end)].strip()
    stored = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    assert shown == stored["table"].strip()
    assert "benchmarks/results.json" in (ROOT / "book_src" / "status.md").read_text()


def test_the_status_page_was_executed_after_every_page():
    """The status page prints every stored page's execution time, so it must be executed last (`make notebooks`
    does): a page re-executed after it leaves the status page's stored table stale, and nbval fails on it."""
    import json
    from datetime import datetime

    def stamps(name, key):
        cells = json.loads((ROOT / "book" / name).read_text())["cells"]
        return [datetime.fromisoformat(c["metadata"]["execution"][key].replace("Z", "+00:00")) for c in cells
                if c["cell_type"] == "code" and key in c["metadata"].get("execution", {})]

    def has_code(name):
        return any(c["cell_type"] == "code" for c in json.loads((ROOT / "book" / name).read_text())["cells"])

    pages = sorted(page.name for page in (ROOT / "book").glob("*.ipynb") if page.name != "status.ipynb"
                   and has_code(page.name))
    unstamped = [name for name in pages + ["status.ipynb"] if not stamps(name, "shell.execute_reply")]
    assert not unstamped, f"{unstamped} hold no execution times: execute them (make notebooks)"
    started = min(stamps("status.ipynb", "iopub.execute_input"))
    later = [name for name in pages if max(stamps(name, "shell.execute_reply")) > started]
    assert not later, (f"{later} were executed after book/status.ipynb: execute it again, last "
                       f"(cd book && jupyter execute --inplace status.ipynb)")


def test_every_page_was_executed_with_its_code_and_the_library_as_they_are():
    """`make book` executes only the pages whose code cells or library changed since they were executed
    (tools/execute_pages.py records what each was executed with in book/executed.json): on a commit none may be
    stale, or a fresh `make book` would execute it, and the stored outputs would not be the ones its code gives."""
    execute_pages = _tool("execute_pages")
    stale = execute_pages.stale()
    assert not stale, (f"{stale} were executed with other code cells or another library than book_src/ and lib/ "
                       f"hold now: run `make notebooks` (or `make book`) and commit book/")


def test_a_page_is_stale_when_its_code_or_the_library_changes(tmp_path, monkeypatch):
    """The fingerprint of a page changes with its code cells and with any file of the library, not with its prose,
    line endings or files that are not the library's; the status page's with any other page's."""
    execute_pages = _tool("execute_pages")
    import shutil
    for part in ("lib/attnsvm", "book_src"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("lib/pyproject.toml", "requirements.txt", "benchmarks/results.json"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, tmp_path / part)
    monkeypatch.setattr(execute_pages, "ROOT", tmp_path)
    monkeypatch.setattr(execute_pages, "SOURCES", tmp_path / "book_src")
    before = execute_pages.fingerprints()
    theory = tmp_path / "lib" / "attnsvm" / "theory.py"
    theory.write_bytes(theory.read_bytes().replace(b"\n", b"\r\n"))  # a checkout with Windows line endings
    (tmp_path / "lib" / "attnsvm" / ".DS_Store").write_bytes(b"\0")  # an editor's or a file browser's file
    (tmp_path / "lib" / "attnsvm" / "__pycache__").mkdir()
    (tmp_path / "lib" / "attnsvm" / "__pycache__" / "theory.nbi").write_bytes(b"\0")  # Numba's cache
    assert execute_pages.fingerprints() == before
    chapter = tmp_path / "book_src" / "09_rates.md"
    chapter.write_text(chapter.read_text().replace("\n## ", "\nA new sentence of prose.\n\n## ", 1))
    assert execute_pages.fingerprints() == before
    chapter.write_text(chapter.read_text().replace("import numpy as np", "import numpy as np  # numpy", 1))
    changed = execute_pages.fingerprints()
    assert {page for page in before if changed[page] != before[page]} == {"09_rates", "status"}
    theory.write_text((ROOT / "lib/attnsvm/theory.py").read_text() + "\n")
    assert all(execute_pages.fingerprints()[page] != changed[page] for page in before)


def test_the_scripts_that_make_test_does_not_run_compile():
    """`make bench`, `make faults` and the other tools run outside `make test`: each must at least compile."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "tools").glob("*.py"))
    assert len(scripts) > 5
    for path in scripts:
        compile(path.read_text(), str(path.relative_to(ROOT)), "exec")  # a SyntaxError names the file and line
