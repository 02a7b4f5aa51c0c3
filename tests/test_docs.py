"""docs/configuration.md's reference is the one generated from the typed configuration: every key, each meaning
written once, in a table every Markdown renderer reads as one (each row the header's number of cells)."""

from __future__ import annotations

import re
from pathlib import Path

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


# --- the layout table ------------------------------------------------------------------------------------------

def layout_rows() -> dict[str, str]:
    """docs/development.md's layout table: its first cell's folder -> the row."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "development.md").read_text()
    table = page.split("## Layout", 1)[1].split("\n## ", 1)[0].strip().split("\n\n")[0]
    assert not shape_errors(table), shape_errors(table)
    return {m.group(1): row for row in table.splitlines()[2:] if (m := re.match(r"\|\s*`([^`]+)`", row))}


def test_every_package_folder_is_in_the_layout_table():
    """Every folder under omnid/ and omnid/engine/ (a new engine kind or shared package included) has its row; a
    row names no folder that is gone."""
    package = Path(__file__).resolve().parents[1] / "omnid"
    folders = {f"omnid/{p.relative_to(package).as_posix()}/" for base in (package, package / "engine")
               for p in base.iterdir() if p.is_dir() and p.name != "__pycache__"}
    named = {name for name in layout_rows() if name.startswith("omnid/") and name.endswith("/")}
    assert folders - named == set(), f"not in docs/development.md's layout table: {sorted(folders - named)}"
    assert named - folders == set(), f"in the layout table but not in omnid/: {sorted(named - folders)}"


# --- the README's checkpoint matrix -----------------------------------------------------------------------------

def matrix() -> list[list[str]]:
    """The README's "Which checkpoints load" table, a row per layout: kind, layout, dtype, repos, the tests."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("### Which checkpoints load", 1)[1].split("\n#", 1)[0].split("\n\n")[2].strip()
    assert not shape_errors(table), shape_errors(table)
    return [cells(row) for row in table.splitlines()[2:]]


def test_every_test_the_checkpoint_matrix_names_exists():
    """Each row names the test file (tests/) that loads its layout, and where it names a test, that file defines it:
    the matrix cannot point at a test that was renamed or removed."""
    tests = Path(__file__).resolve().parent
    rows = matrix()
    assert len(rows) >= 20 and all(row[4] for row in rows), [row[:2] for row in rows if not row[4]]
    named = [m.groups() for row in rows for m in re.finditer(r"`(test_\w+\.py)(?:::(test_\w+))?`", row[4])]
    assert len(named) >= len(rows)
    missing = [file for file, _ in named if not (tests / file).is_file()]
    assert missing == []
    undefined = [f"{file}::{name}" for file, name in named
                 if name and not re.search(rf"^(async )?def {name}\(", (tests / file).read_text(), re.M)]
    assert undefined == []
