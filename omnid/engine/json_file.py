"""A checkpoint's JSON files (config.json and the like), read with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omnid.engine.errors import CheckpointError


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path}: missing") from exc
    except OSError as exc:  # a folder, or a file this user may not read
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CheckpointError(f"{path}: not valid JSON: {exc}") from exc
    except RecursionError as exc:  # arrays or objects nested too deeply for the parser
        raise CheckpointError(f"{path}: not valid JSON: nested too deeply") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data
