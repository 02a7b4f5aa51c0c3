"""Every streaming mode an engine may report has a session strategy (realtime/session.py's STRATEGIES): a new mode
without one would fail at its first session. That each strategy offers the whole interface is mypy's to check."""

from __future__ import annotations

import typing

from omnid.engine.interface import Capabilities
from omnid.realtime.session import STRATEGIES


def test_every_streaming_mode_has_a_strategy() -> None:
    modes = typing.get_args(typing.get_type_hints(Capabilities)["streaming"])
    assert modes and set(STRATEGIES) == set(modes)
