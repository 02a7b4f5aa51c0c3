"""The kinds' descriptors (omnid/engine/kinds.py): every kind folder has one in the collection, what they name of each
other exists, and reading them (as the configuration does) loads no model code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from omnid.config import SECTIONS, SharedConfig, load_config
from omnid.engine import kinds
from tests.test_layers import ROOT, SHARED_ENGINE_PACKAGES


def kind_folders() -> set[str]:
    return {p.parent.name for p in (ROOT / "engine").glob("*/__init__.py")} - SHARED_ENGINE_PACKAGES


def test_every_kind_folder_exports_a_descriptor_the_collection_holds():
    folders = {Path(sys.modules[k.load.__module__].__file__ or "").parent.name for k in kinds.KINDS}
    assert folders == kind_folders()


def test_names_are_unique_and_what_descriptors_name_of_each_other_exists():
    assert len(set(kinds.NAMES)) == len(kinds.NAMES)
    for k in kinds.KINDS:
        assert set(k.shadows) <= set(kinds.NAMES) - {k.name}, k.name
        assert set(k.times) <= {t.name for t in kinds.of_role("transcription")}, k.name
        assert (k.role == "alignment") == bool(k.times), k.name
    own = [s.name for s in kinds.SECTIONS]
    shared = set(SharedConfig.__struct_fields__)
    assert len(set(own)) == len(own) and not set(own) & shared


def test_the_configuration_has_every_kinds_own_section():
    config = load_config()
    for section in kinds.SECTIONS:
        assert section.name in SECTIONS
        assert isinstance(getattr(config, section.name), section.settings)


def test_reading_the_configuration_loads_no_model_code():
    """The configuration reads every descriptor: a descriptor imports its kind's model code only when used."""
    code = "import sys, omnid.config; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'numpy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
