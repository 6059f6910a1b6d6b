"""Execute the book's pages in place (book/*.ipynb), a few at a time, the status page last, and record with what.

    python tools/execute_pages.py [--stale] [--jobs N]

Each page's stored outputs were computed by its code cells and the library as they were then. A page's
fingerprint (`fingerprints`) is a hash of those inputs: its code cells and their tags (book_src/<page>.md; prose does
not count), every file of the library's package (lib/attnsvm/), lib/pyproject.toml and requirements.txt; the status
page's also holds the others' fingerprints and the benchmark results it shows. book/executed.json keeps the
fingerprint each page was last executed with. `--stale` executes only the pages whose fingerprint changed since
(`make book`: on a checkout whose pages are up to date, none), without it every page (`make notebooks`); the
status page is executed whenever another page is, since it shows their execution times.
tests/test_repository.py checks that the committed pages are up to date, and nbval (`make test`) that their
stored outputs are what executing them gives.
"""

import argparse
import hashlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
BOOK, SOURCES, RECORD = ROOT / "book", ROOT / "book_src", ROOT / "book" / "executed.json"
STATUS = "status"  # executed last: it shows the other pages' execution times and the benchmarks
# Where git does not list the library's files: caches, build products and editors' files are not inputs.
LIBRARY_SKIPS = ("__pycache__", ".egg-info", ".nbi", ".nbc", ".pyc", ".ipynb_checkpoints", ".DS_Store", "~")
EXECUTE = [str(Path(sys.executable).parent / "jupyter"), "execute", "--inplace", "--timeout=600"]


def _library() -> str:
    """A hash of the library's package (lib/attnsvm/), lib/pyproject.toml and requirements.txt: the files git lists
    there (tracked or new and not ignored, in a checkout; else every file but caches), by path and content with
    line endings as git stores them."""
    parts = ["lib/attnsvm", "lib/pyproject.toml", "requirements.txt"]
    try:  # tracked files and new ones git does not ignore, as they are in the working tree
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *parts],
                                cwd=ROOT, capture_output=True)
    except OSError:  # no git on this machine
        listed = None
    if listed is not None and listed.returncode == 0 and listed.stdout:
        files = sorted({ROOT / name for name in listed.stdout.decode().split("\0") if name})
        files = [path for path in files if path.is_file()]  # not a tracked file deleted in the working tree
    else:  # not a git checkout (an unpacked archive)
        files = sorted(path for path in (ROOT / "lib" / "attnsvm").rglob("*") if path.is_file() and not any(
            skip in part for part in path.relative_to(ROOT).parts for skip in LIBRARY_SKIPS))
        files += [ROOT / name for name in parts[1:]]
    digest = hashlib.sha256()
    for path in files:
        content = path.read_bytes().replace(b"\r\n", b"\n")
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def _code(page: str) -> str:
    """The code cells of book_src/<page>.md as jupytext reads them, with their tags (which can change how a cell
    runs: raises-exception, skip-execution)."""
    cells = jupytext.read(SOURCES / f"{page}.md").cells
    return "\0".join(f"{cell.source}\0{sorted(cell.metadata.get('tags', []))}" for cell in cells
                     if cell.cell_type == "code")


def fingerprints() -> dict[str, str]:
    """{page: the hash of what its outputs depend on}, for every page of book_src/."""
    library = _library()
    pages = sorted(path.stem for path in SOURCES.glob("*.md"))
    prints = {page: hashlib.sha256(f"{library}\0{_code(page)}".encode()).hexdigest()
              for page in pages if page != STATUS}
    results = (ROOT / "benchmarks" / "results.json").read_bytes().replace(b"\r\n", b"\n")
    shown = results + json.dumps(prints, sort_keys=True).encode()
    prints[STATUS] = hashlib.sha256(f"{library}\0{_code(STATUS)}\0".encode() + shown).hexdigest()
    return prints


def recorded() -> dict[str, str]:
    """{page: the fingerprint it was last executed with}, from book/executed.json."""
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


def stale() -> list[str]:
    """The pages whose fingerprint is not the one they were executed with."""
    done = recorded()
    return [page for page, value in fingerprints().items() if done.get(page) != value]


def execute(pages: list[str], jobs: int) -> None:
    """Execute ``pages`` (the status page last, and whenever another is), ``jobs`` at a time, then record their
    fingerprints. The library's compiled loops are compiled first, once, into Numba's cache
    (tools/compile_loops.py), so that pages executed side by side do not each compile them."""
    others = [page for page in pages if page != STATUS]
    if not pages:
        return
    if others:  # the status page trains nothing
        subprocess.run([sys.executable, str(ROOT / "tools" / "compile_loops.py")], check=True)

    def run(page: str) -> None:
        print(f"executing book/{page}.ipynb", flush=True)
        subprocess.run(EXECUTE + [f"{page}.ipynb"], cwd=BOOK, check=True)
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(run, others))
    run(STATUS)
    done, prints = recorded(), fingerprints()
    done.update({page: prints[page] for page in others + [STATUS]})
    RECORD.write_text(json.dumps({page: done[page] for page in sorted(done) if page in prints}, indent=1) + "\n")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be an integer >= 1, got {text!r}")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stale", action="store_true", help="only the pages whose code or library changed")
    parser.add_argument("--jobs", type=_positive, default=1, help="pages executed at a time")
    options = parser.parse_args()
    pages = stale() if options.stale else list(fingerprints())
    if options.stale:
        print(f"pages to execute (code or library changed since): {', '.join(pages) or 'none'}")
    execute(pages, options.jobs)


if __name__ == "__main__":
    main()
