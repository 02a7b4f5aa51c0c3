"""The house's import rules, read from the source: every module under omnid/ parsed with ``ast``, every import
counted (inside functions and under ``TYPE_CHECKING`` too: a type-only import ties two modules as much as any).

- No module imports a module of a higher layer (the table below).
- No import cycle among omnid's modules. A package's ``__init__`` importing its own submodules is no cycle unless
  one of them imports it back.
- Each engine kind's folder is its own: outside ``omnid/engine/<kind>/`` only the module that collects the kinds'
  descriptors imports it; what two kinds share lives in a shared package (``SHARED_ENGINE_PACKAGES``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "omnid"

# Highest first; a module may import its own layer and those below it. A module is placed by the first part of its
# name under omnid (the engine kinds all share the engine layer). Beside the five layers of docs/architecture.md:
# - cli: the command line, the top, with __main__ (which runs it), evaluation/ (the corpus evaluation behind
#   ``omnid eval``) and config_reference.py (``python -m omnid.config_reference`` writes the configuration's page):
#   nothing below the command line runs them.
# - runtime: config.py, the typed configuration, which takes its kinds and their sections from the engine kinds'
#   descriptors (engine/kinds.py) and is read by the runtime and every layer above, never below; and formats.py,
#   which renders what the runtime returns (a transcript and its speakers) for the HTTP API and the command line.
# - basics, below every layer, imports no other layer: the package itself, audio.py, logging.py, metrics.py, blas.py,
#   echo.py and jobs.py (a job's priority and the submitting side of an engine runtime, which the VAD batcher, below
#   the runtime, uses too). web/ holds the try-it page's static files, no Python.
LAYERS: dict[str, tuple[str, ...]] = {
    "cli": ("cli", "__main__", "evaluation", "config_reference"),
    "api": ("api",),
    "realtime": ("realtime",),
    "runtime": ("runtime", "config", "formats"),
    "vad": ("vad",),
    "engine": ("engine",),
    "basics": ("", "audio", "logging", "metrics", "blas", "echo", "jobs"),
}
RANK = {name: len(LAYERS) - i for i, name in enumerate(LAYERS)}
NAMES = {part: name for name, parts in LAYERS.items() for part in parts}

# Packages under omnid/engine/ that are no kind: what several kinds share (NeMo's formats and layers; the Qwen3
# audio-language network that Qwen3-ASR and Qwen3-ForcedAligner both are; FunASR's front end and SAN-M encoder,
# for SenseVoice and Fun-ASR-Nano).
SHARED_ENGINE_PACKAGES = frozenset({"nemo", "qwen3", "funasr"})
# The one module that collects every kind's descriptor (and so imports every kind).
KIND_COLLECTION = "omnid.engine.kinds"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _known(name: str, modules: set[str]) -> str | None:
    """The module a dotted name means: itself, or the module that defines it (``omnid.x.y.Name`` -> omnid.x.y)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(name: str, source: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The omnid modules ``source`` (module ``name``) imports, wherever the import statement is. ``from p import
    x`` counts as importing p.x when that is a module, else p."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(m for a in node.names if (m := _known(a.name, modules)))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if (m := full if full in modules else _known(base, modules)) is not None:
                    found.add(m)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    names = set(modules)
    return {name: imports_of(name, path.read_text(), names, path.name == "__init__.py")
            for name, path in modules.items()}


def layer_of(module: str) -> str:
    part = module.split(".")[1] if "." in module else ""
    assert part in NAMES, f"{module} is in no layer: place omnid.{part} in tests/test_layers.py's LAYERS"
    return NAMES[part]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})" for m, deps in graph.items() for d in deps
                  if RANK[layer_of(d)] > RANK[layer_of(m)])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def kind_of(module: str) -> str | None:
    """The engine kind whose folder holds ``module`` (or which it is), or None."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "engine" and parts[2] not in SHARED_ENGINE_PACKAGES and \
            (ROOT / "engine" / parts[2]).is_dir():
        return parts[2]
    return None


def foreign_kind_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                  if (kind := kind_of(d)) is not None and kind_of(m) != kind and m != KIND_COLLECTION)


def test_no_module_imports_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_no_import_cycle_type_only_included():
    assert cycles(import_graph()) == []


def test_the_kind_collection_exists():
    assert KIND_COLLECTION in all_modules(), f"{KIND_COLLECTION}, which collects the kinds' descriptors, is missing"


def test_only_the_kind_collection_imports_an_engine_kind():
    assert foreign_kind_imports(import_graph()) == []


def test_every_module_has_a_layer():
    assert sorted({layer_of(m) for m in import_graph()}) == sorted(LAYERS)


def test_the_check_sees_every_import():
    """Imports inside functions, under TYPE_CHECKING, relative ones and ``from package import module`` all count;
    a name imported from a module counts as that module."""
    source = ("from typing import TYPE_CHECKING\nfrom omnid.b import thing\nimport omnid.c.d as d\n"
              "if TYPE_CHECKING:\n    from omnid.e import E\n"
              "def f():\n    from . import g\n    from .h import H\n    import os\n")
    modules = {"omnid.a", "omnid.b", "omnid.c", "omnid.c.d", "omnid.e", "omnid.g", "omnid.h"}
    assert imports_of("omnid.a", source, modules) == {"omnid.b", "omnid.c.d", "omnid.e", "omnid.g", "omnid.h"}


def test_the_checks_find_what_they_forbid():
    graph = {"omnid.engine.x": {"omnid.api.y"}, "omnid.api.y": {"omnid.engine.x"},
             "omnid.api.z": {"omnid.engine.whisper.engine"}, "omnid.engine.whisper.engine": set()}
    assert upward_imports(graph) == ["omnid.engine.x (engine) imports omnid.api.y (api)"]
    assert cycles(graph) == [["omnid.api.y", "omnid.engine.x"]]
    assert foreign_kind_imports(graph) == ["omnid.api.z imports omnid.engine.whisper.engine"]
