"""`omnid service`: the LaunchAgent plist and the systemd user unit it renders, and the Linux path run for real
(or, where no systemd user session exists, the unit file it writes and the clear refusal it reports)."""

from __future__ import annotations

import os
import plistlib
import shlex
import subprocess
import sys
from pathlib import Path

from omnid.cli.service import LABEL, Install, Manager, render_plist, render_unit

ROOT = Path(__file__).resolve().parents[1]


def install(tmp_path: Path) -> Install:
    config = tmp_path / "my config & more.toml"
    config.write_text("[server]\nport = 8123\n")
    return Install.current(config, home=tmp_path)


def test_plist_is_a_launch_agent_for_this_install(tmp_path):
    plist = plistlib.loads(render_plist(install(tmp_path)).encode())
    assert plist["Label"] == LABEL
    args = plist["ProgramArguments"]
    assert Path(args[0]).name in ("omnid", Path(sys.executable).name) and "serve" in args
    assert args[-2:] == ["--config", str((tmp_path / "my config & more.toml").resolve())]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # restarted after a crash, not after a clean exit
    assert plist["ThrottleInterval"] == 10
    assert plist["StandardErrorPath"].endswith("omnid.err.log") and plist["StandardOutPath"].endswith("omnid.out.log")
    assert plist["EnvironmentVariables"]["OMNID_LOG_LEVEL"] == "info" and "PATH" in plist["EnvironmentVariables"]
    assert Manager(install(tmp_path), home=tmp_path, platform="darwin").path == \
        tmp_path / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def test_systemd_unit_runs_the_same_command(tmp_path):
    inst = install(tmp_path)
    unit = render_unit(inst)
    lines = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    assert shlex.split(lines["ExecStart"]) == inst.arguments
    assert lines["Restart"] == "on-failure" and lines["RestartSec"] == "10"
    assert lines["WantedBy"] == "default.target"
    assert lines["StandardError"].startswith("append:") and "$" not in unit


def systemd_user_available() -> bool:
    try:
        return subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, timeout=10,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def omnid(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "omnid", "service", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60, check=False)


def test_install_status_uninstall_on_linux(tmp_path):
    unit = tmp_path / ".config" / "systemd" / "user" / "omnid.service"
    printed = omnid(tmp_path, "print")
    assert printed.returncode == 0 and "ExecStart=" in printed.stdout
    done = omnid(tmp_path, "install")
    assert unit.read_text() == printed.stdout
    if systemd_user_available():
        assert done.returncode == 0, done.stderr
        assert omnid(tmp_path, "status").returncode == 0
    else:  # this machine has no systemd user session: the unit is written and the refusal is said plainly
        assert done.returncode == 1 and "service manager refused it" in done.stderr and "Traceback" not in done.stderr
        assert omnid(tmp_path, "status").returncode == 3
    removed = omnid(tmp_path, "uninstall")
    assert removed.returncode == 0 and not unit.exists()
    assert omnid(tmp_path, "status").returncode == 3
    assert "not installed" in omnid(tmp_path, "uninstall").stdout
