"""docs/configuration.md's reference is the one generated from the typed configuration: every key, each meaning
written once, in a table every Markdown renderer reads as one (each row the header's number of cells)."""

from __future__ import annotations

import re

from omnid import config_reference
from omnid.config_reference import PAGE, config_fields, key_name, page_reference, reference_markdown


def cells(row: str) -> list[str]:
    """A table row's cells as Markdown splits them: at every | that is not escaped as \\|."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().removeprefix("|").removesuffix("|"))]


def shape_errors(table: str) -> list[str]:
    """The rows that do not have the header's number of cells, and a delimiter row that is not one."""
    header, delimiter, *rows = table.splitlines()
    width = len(cells(header))
    errors = [] if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", delimiter) and len(cells(delimiter)) == width \
        else [f"delimiter row: {delimiter}"]
    return errors + [f"{len(cells(r))} cells, not {width}: {r}" for r in rows if len(cells(r)) != width]


def rows() -> list[list[str]]:
    return [cells(r) for r in reference_markdown().splitlines()[2:]]


def test_the_pages_configuration_reference_is_current():
    assert page_reference(PAGE.read_text()) == reference_markdown(), "run: python -m omnid.config_reference --write"


def test_the_reference_is_a_table_of_one_shape():
    assert shape_errors(page_reference(PAGE.read_text())) == []


def test_the_shape_check_counts_cells_as_markdown_does():
    assert shape_errors("| key | type |\n|---|---|\n| `a` | float \\| None |") == []
    assert shape_errors("| key | type |\n|---|---|\n| `a` | float | None |") == ["3 cells, not 2: | `a` | float | None |"]
    assert shape_errors("| key | type |\n|---|\n| `a` | float |") == ["delimiter row: |---|"]


def test_a_bar_in_any_cell_is_escaped(monkeypatch):
    groups = config_reference.comment_groups()
    monkeypatch.setattr(config_reference, "comment_groups",
                        lambda: [(keys, meaning.replace(" ", " | ")) for keys, meaning in groups])
    assert "\\|" in reference_markdown() and shape_errors(reference_markdown()) == []


def test_every_key_is_in_the_reference_once_and_explained():
    named = [k for row in rows() for k in re.findall(r"`([^`]+)`", row[0])]
    assert sorted(named) == sorted(key_name(k) for k in config_fields())
    assert [row[0] for row in rows() if not row[3]] == []


def test_each_meaning_is_written_once():
    meanings = [row[3] for row in rows()]
    assert sorted({m for m in meanings if meanings.count(m) > 1}) == []
    temperature = [row for row in rows() if "`transcription.temperature_increment`" in row[0]]
    assert len(temperature) == 1 and temperature[0][0].count("<br>") == 3  # its four keys in one row
