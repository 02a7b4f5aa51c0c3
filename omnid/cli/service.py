"""``omnid service install|uninstall|status|print``: run the daemon as a per-user service.

macOS: a LaunchAgent (``launchd/com.omnid.daemon.plist``) in ~/Library/LaunchAgents, loaded with ``launchctl
bootstrap``. Linux: a systemd user unit (``launchd/omnid.service``) in ~/.config/systemd/user, enabled with
``systemctl --user``. Both start the daemon of this installation with the user's config, restart it after a
crash, and write its logs under the user's log folder.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from string import Template
from xml.sax.saxutils import escape

LABEL = "com.omnid.daemon"
UNIT = "omnid.service"
THROTTLE_S = 10


def templates_dir() -> Path:
    here = Path(__file__).resolve().parents[1]  # the omnid package
    for candidate in (here.parent / "launchd", here / "_launchd"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"service templates not found next to {here}")


@dataclass(frozen=True)
class Install:
    """What the service runs, for this installation and user."""

    arguments: list[str]
    workdir: Path
    log_dir: Path
    environment: dict[str, str]

    @classmethod
    def current(cls, config: Path | None, home: Path | None = None) -> "Install":
        home = home or Path.home()
        script = Path(sys.executable).with_name("omnid")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "omnid"]
        user_config = config or _default_user_config(home)
        args = [*command, "serve"] + (["--config", str(Path(user_config).resolve())] if user_config else [])
        log_dir = home / "Library" / "Logs" / "omnid" if sys.platform == "darwin" else home / ".local" / "state" / "omnid"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMNID_LOG_LEVEL": "info"}
        return cls(args, home, log_dir, env)


def _default_user_config(home: Path) -> Path | None:
    path = home / ".config" / "omnid" / "omnid.toml"
    return path if path.exists() else None


def render_plist(install: Install) -> str:
    text = Template((templates_dir() / "com.omnid.daemon.plist").read_text()).substitute(
        label=LABEL,
        arguments="\n".join(f"    <string>{escape(a)}</string>" for a in install.arguments),
        workdir=escape(str(install.workdir)),
        throttle=THROTTLE_S,
        stdout_path=escape(str(install.log_dir / "omnid.out.log")),
        stderr_path=escape(str(install.log_dir / "omnid.err.log")),
        environment="\n".join(f"    <key>{escape(k)}</key>\n    <string>{escape(v)}</string>"
                              for k, v in install.environment.items()),
    )
    plistlib.loads(text.encode())  # a template edit that breaks the XML fails here, not in launchd
    return text


def render_unit(install: Install) -> str:
    return Template((templates_dir() / "omnid.service").read_text()).substitute(
        exec_start=shlex.join(install.arguments),
        workdir=str(install.workdir),
        throttle=THROTTLE_S,
        environment="\n".join(f"Environment={shlex.quote(f'{k}={v}')}" for k, v in install.environment.items()),
        stdout_path=str(install.log_dir / "omnid.log"),
        stderr_path=str(install.log_dir / "omnid.log"),
    )


class Manager:
    """The platform's service manager, with the file it owns."""

    def __init__(self, install: Install, home: Path | None = None, platform: str = sys.platform):
        self.install = install
        self.home = home or Path.home()
        self.mac = platform == "darwin"

    @property
    def path(self) -> Path:
        if self.mac:
            return self.home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        return self.home / ".config" / "systemd" / "user" / UNIT

    def render(self) -> str:
        return render_plist(self.install) if self.mac else render_unit(self.install)

    def _run(self, *cmd: str) -> tuple[int, str]:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, str(exc)
        return done.returncode, (done.stdout + done.stderr).strip()

    def _domain(self) -> str:
        return f"gui/{os.getuid()}"

    def install_service(self) -> tuple[int, str]:
        self.install.log_dir.mkdir(parents=True, exist_ok=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(self.render())
        if self.mac:
            self._run("launchctl", "bootout", f"{self._domain()}/{LABEL}")  # a previous version, if loaded
            code, out = self._run("launchctl", "bootstrap", self._domain(), str(self.path))
        else:
            code, out = self._run("systemctl", "--user", "daemon-reload")
            if code == 0:
                code, out = self._run("systemctl", "--user", "enable", "--now", UNIT)
        if code:
            return 1, f"wrote {self.path}, but the service manager refused it: {out}"
        return 0, f"installed and started: {self.path} (logs in {self.install.log_dir})"

    def uninstall_service(self) -> tuple[int, str]:
        if self.mac:
            self._run("launchctl", "bootout", f"{self._domain()}/{LABEL}")
        else:
            self._run("systemctl", "--user", "disable", "--now", UNIT)
        existed = self.path.exists()
        self.path.unlink(missing_ok=True)
        if not self.mac:
            self._run("systemctl", "--user", "daemon-reload")
        return 0, f"removed {self.path}" if existed else f"not installed ({self.path} does not exist)"

    def status(self) -> tuple[int, str]:
        if not self.path.exists():
            return 3, f"not installed ({self.path} does not exist)"
        if self.mac:
            code, out = self._run("launchctl", "print", f"{self._domain()}/{LABEL}")
        else:
            code, out = self._run("systemctl", "--user", "status", "--no-pager", UNIT)
        return (0 if code == 0 else 3), f"{self.path}\n{out}"


def command(action: str, config: Path | None) -> int:
    manager = Manager(Install.current(config))
    if action == "print":
        sys.stdout.write(manager.render())
        return 0
    code, message = {
        "install": manager.install_service,
        "uninstall": manager.uninstall_service,
        "status": manager.status,
    }[action]()
    print(message, file=sys.stdout if code == 0 else sys.stderr)
    return code
