# The only entry points. A fresh machine needs two: `make book` and `make test`.
PYTHON ?= python3
# The CPU code paths (the same printed numbers on any x86-64 machine with AVX2) are pinned by the library itself,
# attnsvm.codepaths, when it is imported before numpy and torch: not here, so that `make test` executes the
# chapters exactly as a reader's Jupyter, Binder or Colab does.
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
VENDOR := vendor/static/.fetched
# Browser assets the built book serves itself (offline math), fetched from the npm registry.
VENDOR_PACKAGES := mathjax@3.2.2
# The builds render the outputs stored in book/ (_config.yml: execute_notebooks "off"); `make book` and `make pdf`
# first execute the pages whose code or library changed, `make test` renders the stored outputs, which its nbval
# suite then shows to be reproducible.
JB_BUILD := $(BIN)/jupyter-book build . --all -W -n --keep-going
# Notebooks executed at a time. One for `make notebooks`, so that the stored timings (the status page) are each
# page's own; `make book` runs one per core, which builds the book faster but slows each page down.
JOBS ?= 1
CORES := $(shell nproc 2>/dev/null || echo 2)
# The examples in the library's docstrings (the API pages show them), each after setup()'s numerics (lib/conftest.py).
DOCTEST := $(BIN)/python -m pytest -q --doctest-modules -o doctest_optionflags="NORMALIZE_WHITESPACE ELLIPSIS"
# `make test` runs its suites on every core (pytest-xdist): the notebooks one per worker with all their cells
# (--dist loadfile: nbval runs a notebook's cells in order in one kernel), the browser checks of one page in one
# worker (tests/browser/conftest.py schedules them by page, so each page is opened once).
PYTEST := $(BIN)/python -m pytest -n $(CORES)
NBVAL := $(PYTEST) --dist loadfile --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup book test render notebooks sync student pdf screenshots bench e51-seeds faults clean

setup: $(INSTALLED) $(VENDOR)

$(INSTALLED): requirements.txt lib/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENDOR): Makefile
	rm -rf vendor/static && mkdir -p vendor/static
	cd vendor && npm pack --silent $(VENDOR_PACKAGES) >/dev/null
	mkdir -p vendor/static/mathjax
	tar -xzf vendor/mathjax-3.2.2.tgz -C vendor/static/mathjax --strip-components=2 package/es5
	rm -f vendor/*.tgz
	touch $@

# book_src/*.md -> book/*.ipynb, keeping the stored outputs (no execution), and the chapters' prerequisite graph
# (read from book_src/) stored with the library for the introduction (tools/prerequisites.py).
sync: $(INSTALLED)
	$(BIN)/python tools/prerequisites.py
	$(BIN)/python tools/sync_pages.py

# Regenerate book/ from book_src/ and execute every notebook in place (commit the result), JOBS at a time, the
# status page last (it reads the others' timings), and record in book/executed.json what each was executed with
# (tools/execute_pages.py: its code cells, the library, requirements.txt).
notebooks: sync
	$(BIN)/python tools/execute_pages.py --jobs $(JOBS)

# The whole book's PDF, where XeLaTeX is installed, built before the HTML: the HTML build then copies it to
# _build/html/book.pdf and every page's download menu offers it (assets/sphinx/book_pdf.py); without it, no link.
PDF_IF_XELATEX := if command -v xelatex >/dev/null; then $(JB_BUILD) --builder pdflatex; \
	else echo "xelatex not found: the HTML book will not offer the whole book's PDF"; fi

# The HTML book, every page whose code cells or library changed since it was executed executed afresh first (one
# per core; book/executed.json records what each page was executed with, so a change in lib/ can never leave a
# stale page; on a checkout of main, whose pages are up to date, none is executed).
book: setup sync
	$(BIN)/python tools/execute_pages.py --stale --jobs $(CORES)
	$(PDF_IF_XELATEX)
	$(JB_BUILD)
	@echo "The book is at _build/html/index.html"

# `make test` builds the PDF and the HTML (`render`: one after the other, in the background, in a process
# group of their own that an interrupt stops, their output in BUILD_LOG) while the loops compile and then the suites
# that do not read the built book run (on every core, but the doctests; the files with the longest tests first, so
# that none is left running alone at the end); the browser checks, which read the book, run once it is built (its
# log printed whole if it failed).
BUILD_LOG := _build/build.log
# Through a variable: a recipe line that names $(MAKE) itself runs even under `make -n`.
RENDER = $(MAKE) --no-print-directory render
test: setup
	mkdir -p _build; setsid -w $(RENDER) >$(BUILD_LOG) 2>&1 & building=$$!; \
	trap 'kill -TERM -$$building 2>/dev/null; exit 130' INT HUP QUIT TERM; \
	$(BIN)/python tools/compile_loops.py \
	&& $(PYTEST) tests/test_repository.py tests/test_notebooks_sync.py tests/test_binder.py tests/test_course_kit.py \
	  tests/test_markdown_math.py tests/test_provenance.py tests/test_notation.py tests/test_captions.py tests/lib \
	&& $(DOCTEST) lib/attnsvm \
	&& $(NBVAL) book/ \
	&& $(PYTEST) tests/test_student_edition.py; tested=$$?; \
	wait $$building; built=$$?; \
	if [ $$built -eq 0 ]; then grep -E "^xelatex not found|build succeeded" $(BUILD_LOG); else cat $(BUILD_LOG); echo "building the book failed (above)"; fi; \
	[ $$tested -eq 0 ] && [ $$built -eq 0 ]
	$(PYTEST) tests/browser tests/test_pdf.py

# The PDF (where XeLaTeX is installed), then the HTML, of the stored outputs (no page executed): `make test`'s build
# (not an entry point; `make book` executes stale pages first).
render: setup
	$(PDF_IF_XELATEX)
	$(JB_BUILD)

# The book as a PDF (_build/latex/book.pdf), through XeLaTeX, the pages executed first as for `make book`.
pdf: setup sync
	$(BIN)/python tools/execute_pages.py --stale --jobs $(CORES)
	$(JB_BUILD) --builder pdflatex
	@echo "The PDF is at _build/latex/book.pdf"

# The student edition: every chapter as a notebook, solutions removed, exercise stubs left in place.
student: setup
	$(BIN)/python tools/student_edition.py _build/student
	@echo "The student edition is in _build/student/"

# Screenshots of every page of the built book at 1280 and 400 px, for a reviewer's eyes: _build/screenshots/.
screenshots: setup
	$(PYTEST) tests/browser/review_screenshots.py

# Speed: the library against a straightforward reference implementation, side by side (prints a table).
bench: setup
	$(BIN)/python benchmarks/run.py

# Chapter 5's stored seeds: the first 500 runs per d that pass paper A's E5.1 filter (about 2 minutes).
e51-seeds: setup
	$(BIN)/python tools/e51_seeds.py

# Planted faults (tools/faults.py): each of a list of realistic library bugs is monkeypatched into a copy of every
# chapter's run; prints which chapter assert (or library test) catches each one, fails if any goes uncaught. The
# harness's own tests run first.
faults: $(INSTALLED)
	$(BIN)/python -m pytest -q tests/test_faults_harness.py
	$(BIN)/python tools/faults.py

clean:
	rm -rf _build vendor/static .pytest_cache .hypothesis
