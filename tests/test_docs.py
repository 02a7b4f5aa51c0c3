"""The README's configuration reference is the one generated from the typed configuration."""

from pathlib import Path

from omnid.config_reference import END, START, reference_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_config_reference_is_current():
    text = README.read_text()
    block = text[text.index(START) + len(START) : text.index(END)].strip()
    assert block == reference_markdown(), "run: python -m omnid.config_reference, and paste it into the README"


def test_every_config_key_is_explained():
    rows = [r for r in reference_markdown().splitlines()[2:]]
    assert rows and all(r.rstrip(" |").split("|")[-1].strip() for r in rows), [r for r in rows if r.endswith("|  |")]
