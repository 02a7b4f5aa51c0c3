# The two set-up commands of the README. Each sets up what is missing first (scripts/setup.sh).
SAMPLE ?= ../shared/corpus/audio/en/jfk_inaugural_excerpt.wav

.PHONY: setup run test bench

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/omnid transcribe $(SAMPLE)

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/python bench/transcribe_speed.py
