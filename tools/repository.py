"""Where the book is published, set in one place: `repository.url` in _config.yml.

The launch buttons read it there; the README's Binder badge, the library's install lines (lib/README.md), every
chapter's install cell (the hidden first cell that installs the library in Colab) and the introduction's citation
repeat it, with the installs pinned to the library's release tag v<version> (lib/pyproject.toml). `python tools/repository.py --write` rewrites them from _config.yml (then run
`make sync`); tests/test_repository.py checks that they agree.
"""

import argparse
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README, LIB_README = ROOT / "README.md", ROOT / "lib" / "README.md"
INSTALL = re.compile(r'^    repo = ".*"\n    %pip install --quiet ".*"$', re.M)
BADGE = re.compile(r"\(https://mybinder\.org/v2/gh/[^)]*\)")
PIP = re.compile(r"git\+https://[^\s\"#@]+(@[^\s\"#]+)?#subdirectory=lib")
CITATION = re.compile(r"^  note   = \{https://[^}]*\}$", re.M)


def settings() -> tuple[str, str, str]:
    """(repository URL, branch, library version) from _config.yml and lib/pyproject.toml."""
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    version = tomllib.loads((ROOT / "lib" / "pyproject.toml").read_text())["project"]["version"]
    return repository["url"].rstrip("/"), repository.get("branch", "main"), version


def install_lines(url: str, version: str) -> str:
    """The two lines of an install cell: the library's book extra at its release tag."""
    return (f'    repo = "{url}"\n'
            f'    %pip install --quiet "attnsvm[book] @ git+{{repo}}@v{version}#subdirectory=lib"')


def badge(url: str, branch: str) -> str:
    """The README's Binder link: JupyterLab on book/ of the published branch."""
    owner_name = url.removeprefix("https://github.com/")
    return f"(https://mybinder.org/v2/gh/{owner_name}/{branch}?urlpath=lab/tree/book)"


def expected() -> dict[Path, str]:
    """{file: its text with the repository's URL as _config.yml sets it} for the READMEs and every page."""
    url, branch, version = settings()
    files = {README: BADGE.sub(lambda _: badge(url, branch), README.read_text()),
             LIB_README: PIP.sub(lambda _: f"git+{url}@v{version}#subdirectory=lib", LIB_README.read_text())}
    for page in sorted((ROOT / "book_src").glob("*.md")):
        text = CITATION.sub(lambda _: f"  note   = {{{url}}}", page.read_text())
        files[page] = INSTALL.sub(lambda _: install_lines(url, version), text)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README and the install cells")
    stale = [path for path, text in expected().items() if path.read_text() != text]
    if parser.parse_args().write:
        for path in stale:
            path.write_text(expected()[path])
        print(f"rewrote {len(stale)} files; now run `make sync`")
    else:
        print("in sync" if not stale else "stale: " + ", ".join(p.name for p in stale))


if __name__ == "__main__":
    main()
