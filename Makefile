# The only entry points. A fresh machine needs two: `make book` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
VENDOR := vendor/static/.fetched
# Browser assets the built book serves itself (offline math and widgets), fetched from the npm registry.
VENDOR_PACKAGES := mathjax@3.2.2 @jupyter-widgets/html-manager@1.0.15 requirejs@2.3.8
SOURCES := $(wildcard book_src/*.md)
NOTEBOOKS := $(patsubst book_src/%.md,book/%.ipynb,$(SOURCES))
JB_BUILD := $(BIN)/jupyter-book build . --all -W -n --keep-going
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup book test notebooks sync bench clean

setup: $(INSTALLED) $(VENDOR)

$(INSTALLED): requirements.txt lib/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENDOR): Makefile
	rm -rf vendor/static && mkdir -p vendor/static
	cd vendor && npm pack --silent $(VENDOR_PACKAGES) >/dev/null
	mkdir -p vendor/static/mathjax vendor/static/widgets
	tar -xzf vendor/mathjax-3.2.2.tgz -C vendor/static/mathjax --strip-components=2 package/es5
	tar -xzf vendor/jupyter-widgets-html-manager-1.0.15.tgz -C vendor/static/widgets --strip-components=2 package/dist
	tar -xzf vendor/requirejs-2.3.8.tgz -C vendor/static --strip-components=1 package/require.js
	rm -f vendor/*.tgz
	touch $@

# book_src/*.md -> book/*.ipynb, keeping the stored outputs (no execution).
sync: $(INSTALLED)
	for src in $(SOURCES); do \
	  $(BIN)/jupytext --quiet --to ipynb --update --output book/$$(basename $$src .md).ipynb $$src || exit 1; \
	done

# Regenerate book/ from book_src/ and execute every notebook in place (commit the result).
notebooks: sync
	cd book && ../$(BIN)/jupyter execute --inplace --timeout=600 $(notdir $(NOTEBOOKS))

# The HTML book, every chapter executed afresh (a change in lib/ can never leave a stale chapter).
book: setup sync
	$(JB_BUILD)
	@echo "The book is at _build/html/index.html"

test: setup
	$(BIN)/python -m pytest tests/lib tests/test_notebooks_sync.py
	$(NBVAL) book/
	$(JB_BUILD)
	$(BIN)/python -m pytest tests/browser

# Speed: the library against a straightforward reference implementation, side by side (prints a table).
bench: setup
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf _build vendor/static .pytest_cache .hypothesis
