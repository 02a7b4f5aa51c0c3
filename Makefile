# The two set-up commands of the README. Each sets up what is missing first (scripts/setup.sh).
SAMPLE ?= tests/corpus/audio/en/jfk_inaugural_excerpt.flac
# `make serve PORT=8001` serves on that port; unset, the config's server.port (8000 by default).
PORT ?=

.PHONY: setup serve transcribe lint test bench lock

setup:
	@scripts/setup.sh

serve: setup
	exec .venv/bin/omnid serve $(if $(PORT),--port $(PORT))

transcribe: setup
	.venv/bin/omnid transcribe $(SAMPLE)

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

test: lint
	@scripts/setup-browser.sh
	.venv/bin/python -m pytest -q -n auto --maxprocesses 4

bench: setup
	.venv/bin/python bench/transcribe_speed.py

# Refresh lock/ from pyproject.toml's ranges (the newest versions today, every platform); review and commit it.
lock: setup
	scripts/lock.sh
