"""Hostile checkpoints at load: each class an outside probe found (a tensor claiming 10^14 elements, a compressed
.nemo that expands past its model, YAML aliases, a ``${}`` interpolation bomb, a config.json nested 100,000 deep)
fails with one clear error naming the file (and the tensor), within a small multiple of an honest load's memory.
The payloads are built here, small, from the golden tiny Sortformer (written by NeMo)."""

from __future__ import annotations

import io
import json
import pickle
import sys
import tarfile
import tracemalloc
import types
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.sortformer import checkpoint as ck
from omnid.runtime.models import named
from tests.helpers import ROOT

NEMO = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"


def peak_mb(load: Callable[[], object]) -> tuple[float, BaseException | None]:
    """Peak traced memory (numpy's arrays and Python's objects) while ``load`` runs, and what it raised."""
    tracemalloc.start()
    error = None
    try:
        load()
    except Exception as exc:  # noqa: BLE001  (the test asserts on it)
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    return peak, error


@pytest.fixture(scope="module")
def honest_peak_mb() -> float:
    peak, error = peak_mb(lambda: ck.load(NEMO))
    assert error is None
    return peak


def rewrite_nemo(out: Path, *, yaml_edit: Callable[[str], str] | None = None, weights: bytes | None = None,
                 mode: str = "w") -> Path:
    """tiny.nemo with its config edited or its weights replaced; ``mode`` "w:gz" compresses the archive."""
    with tarfile.open(NEMO) as src, tarfile.open(out, mode) as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if data is not None and member.name.endswith("model_config.yaml") and yaml_edit:
                data = yaml_edit(data.decode()).encode()
            if data is not None and member.name.endswith("model_weights.ckpt") and weights is not None:
                data = weights
            if data is None:
                dst.addfile(member)
                continue
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


def torch_zip(tensors: dict[str, tuple[str, int, tuple[int, ...], tuple[int, ...]]], storages: dict[str, bytes]) -> bytes:
    """A checkpoint as torch.save writes one (data.pkl plus a file per storage), built without torch: each tensor
    is (storage key, offset, size, stride) over float32 storages."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    def _rebuild_tensor_v2(*args):  # pickled by name only
        raise AssertionError

    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    torch.FloatStorage, utils._rebuild_tensor_v2 = FloatStorage, _rebuild_tensor_v2  # type: ignore[attr-defined]

    class Storage:
        def __init__(self, key: str):
            self.key = key

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", FloatStorage, obj.key, "cpu", len(storages[obj.key]) // 4) if isinstance(obj, Storage) else None

    class Tensor:
        def __init__(self, key, offset, size, stride):
            self.args = (Storage(key), offset, size, stride, False, OrderedDict())

        def __reduce__(self):
            return _rebuild_tensor_v2, self.args

    saved = {name: sys.modules.get(name) for name in ("torch", "torch._utils")}
    sys.modules.update({"torch": torch, "torch._utils": utils})
    try:
        buf = io.BytesIO()
        Pickler(buf, protocol=2).dump(OrderedDict((n, Tensor(*t)) for n, t in tensors.items()))
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        for key, raw in storages.items():
            z.writestr(f"archive/data/{key}", raw)
    return out.getvalue()


def test_a_tensor_claiming_more_elements_than_its_storage_is_refused_naming_it(tmp_path, honest_peak_mb):
    """A stride-0 tensor of 10^14 elements over one float: built, it would be 400 TB; refused, naming file and tensor."""
    hostile = torch_zip({"encoder.pre_encode.out.weight": ("0", 0, (10_000_000, 10_000_000), (0, 0))},
                        {"0": bytes(4)})
    assert read_state_dict(io.BytesIO(torch_zip({"w": ("0", 0, (2, 2), (2, 1))}, {"0": bytes(16)})))["w"].shape == (2, 2)
    nemo = rewrite_nemo(tmp_path / "stride0.nemo", weights=hostile)
    peak, error = peak_mb(lambda: ck.load(nemo))
    assert isinstance(error, CheckpointError)
    assert f"{nemo}:model_weights.ckpt: tensor encoder.pre_encode.out.weight: claims 100000000000000 elements" in str(error)
    assert peak < 2 * honest_peak_mb


def test_a_compressed_nemo_whose_weights_outgrow_its_model_is_refused_before_they_are_read(tmp_path, honest_peak_mb):
    """64 MB of weights in a gzip .nemo of well under 1 MB: the config's model needs far less, so the member's
    declared size is refused before a byte of it is decompressed."""
    nemo = rewrite_nemo(tmp_path / "bomb.nemo", weights=bytes(64 << 20), mode="w:gz")
    assert nemo.stat().st_size < 1 << 20
    peak, error = peak_mb(lambda: ck.load(nemo))
    assert isinstance(error, CheckpointError) and f"{nemo}:model_weights.ckpt is {64 << 20} bytes" in str(error)
    assert peak < 2 * honest_peak_mb
    # The honest checkpoint, compressed, still loads: the bound is the model's size, not the archive's.
    assert ck.load(rewrite_nemo(tmp_path / "honest.nemo", mode="w:gz")).layout == "nemo"


def test_yaml_aliases_are_refused(tmp_path, honest_peak_mb):
    laughs = "\n".join(["lol0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
                       + [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)])
    nemo = rewrite_nemo(tmp_path / "laughs.nemo", yaml_edit=lambda y: y + "\n" + laughs + "\n")
    peak, error = peak_mb(lambda: ck.load(nemo))
    assert isinstance(error, CheckpointError) and f"{nemo}:model_config.yaml: YAML aliases are not accepted" in str(error)
    assert peak < 2 * honest_peak_mb


def test_an_interpolation_bomb_is_refused(tmp_path, honest_peak_mb):
    """A kilobyte of ${} references to references, 10^10 characters resolved."""
    bomb = "\n".join(['bomb0: "aaaaaaaaaa"'] + [f'bomb{i}: "{"".join([f"${{bomb{i - 1}}}"] * 10)}"' for i in range(1, 10)])
    assert len(bomb) < 1200
    nemo = rewrite_nemo(tmp_path / "bomb.nemo", yaml_edit=lambda y: y + "\n" + bomb + "\n")
    peak, error = peak_mb(lambda: ck.load(nemo))
    assert isinstance(error, CheckpointError) and str(error).startswith(f"{nemo}:model_config.yaml: ")
    assert "references" in str(error) or "characters" in str(error)
    assert peak < 2 * honest_peak_mb


def test_a_memory_or_recursion_error_at_load_names_the_checkpoint():
    def exhausted():
        raise MemoryError

    def nested():
        raise RecursionError("maximum recursion depth exceeded")

    for build, says in ((exhausted, "claims more memory"), (nested, "nested too deeply")):
        with pytest.raises(CheckpointError, match=f"^/models/x: cannot load: .*{says}"):
            named(Path("/models/x"), build)()


def test_a_config_json_nested_100000_deep_fails_the_daemon_naming_the_file(tmp_path):
    """Through the supervised daemon, as Voxt sees it: one failed line naming the file, exit 1."""
    import subprocess

    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "weights.safetensors").write_bytes(b"")
    config = tmp_path / "omnid.toml"
    config.write_text(f'[transcription]\ndefault_model = "deep"\n\n[[models]]\nid = "deep"\nkind = "whisper"\n'
                      f'path = {json.dumps(str(folder))}\n')
    done = subprocess.run([sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0", "--config",
                           str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    line = json.loads(done.stdout.splitlines()[0])
    assert line["event"] == "failed" and f"{folder / 'config.json'}: not valid JSON: nested too deeply" in line["reason"]
    assert done.returncode == 1
