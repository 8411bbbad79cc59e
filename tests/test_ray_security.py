"""The Ray instance a run starts for itself (``--backend ray`` without ``--address``): every
server of it listens on loopback only, and refuses requests without the run's token."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agile_cli import TrainingError
from agile_ray.cluster import PRIVATE_SETTINGS, connected

pytest.importorskip("ray")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the sockets from /proc"
)

#: A driver that starts the instance through the backend's own code, with two member-like
#: workers (each a Ray worker process with a server of its own), and waits for a line.
DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from agile_ray.cluster import connected

    with connected(None) as ray:
        @ray.remote(num_cpus=0)
        class Worker:
            def pid(self) -> int:
                return os.getpid()

        workers = [Worker.remote() for _ in range(2)]
        print(json.dumps(ray.get([worker.pid.remote() for worker in workers])), flush=True)
        sys.stdin.readline()
    """
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(word_hex: str) -> Address:
    """An address as /proc/net/tcp{,6} write it: 32-bit words, each in the host's byte order."""
    words = [bytes.fromhex(word_hex[i : i + 8]) for i in range(0, len(word_hex), 8)]
    raw = b"".join(word[::-1] if sys.byteorder == "little" else word for word in words)
    return ipaddress.ip_address(raw)


def _listening() -> dict[int, tuple[Address, int]]:
    """Socket inode -> (address, port) of every listening TCP socket of this network."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                address, port = fields[1].split(":")
                found[int(fields[9])] = (_ip(address), int(port, 16))
    return found


def _processes(root: int, marker: str) -> dict[int, str]:
    """Process id -> command line of ``root``, its descendants, and any process whose command
    line names ``marker`` (the instance's own folder: a process left to init still counts)."""
    parents, lines = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            line = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rpartition(")")[2].split()[1])
        lines[pid] = " ".join(line.replace("\0", " ").split())
    found = {root} | {pid for pid, line in lines.items() if marker in line}
    while grown := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= grown
    return {pid: lines.get(pid, "?") for pid in found}


def _sockets(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:  # gone meanwhile
        pass
    return inodes


def _loopback(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1, an IPv6 socket on IPv4's loopback
    return address.is_loopback


def _first_line(driver: subprocess.Popen[str], log: Path, timeout: float) -> str:
    assert driver.stdout is not None
    ready, _, _ = select.select([driver.stdout], [], [], timeout)
    line = driver.stdout.readline() if ready else ""
    assert line, f"the driver did not start Ray:\n{log.read_text()}"
    return line


def _stop(driver: subprocess.Popen[str], folder: str) -> None:
    """Ends the driver (Ray stops with it), then kills whatever is left of its instance."""
    if driver.poll() is None and driver.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            driver.stdin.write("\n")
            driver.stdin.flush()
    try:
        driver.wait(timeout=60)
    except subprocess.TimeoutExpired:
        driver.kill()
        driver.wait()
    for pid in set(_processes(driver.pid, folder)) - {driver.pid}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _listeners(driver: int, folder: str) -> list[tuple[int, Address, int, str]]:
    """(process id, address, port, command line) of each listening TCP socket of the driver
    and of the Ray processes of the instance in ``folder``."""
    processes = _processes(driver, folder)
    listening = _listening()
    return sorted(
        (pid, *listening[inode], line)
        for pid, line in processes.items()
        for inode in _sockets(pid)
        if inode in listening
    )


def _status(address: Address, port: int) -> int:
    """The HTTP status of a request, without a token, to the server at ``address:port``."""
    host = f"[{address}]" if address.version == 6 else str(address)
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_private_instance_listens_on_loopback_only_and_requires_a_token(tmp_path: Path) -> None:
    folder = tempfile.mkdtemp(prefix="agile-ray-sec-")  # short: Ray's socket paths are bounded
    env = {k: v for k, v in os.environ.items() if k not in {*PRIVATE_SETTINGS, "RAY_AUTH_TOKEN"}}
    # The instance is the run's own even when the environment names another cluster.
    env.update(RAY_TMPDIR=folder, RAY_ADDRESS="127.0.0.9:6399")
    log = tmp_path / "driver.log"
    command = [sys.executable, "-c", DRIVER]
    with log.open("w") as stderr:
        driver = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=stderr, text=True, env=env)  # fmt: skip
    try:
        workers = json.loads(_first_line(driver, log, timeout=180))
        listeners = _listeners(driver.pid, folder)
        # The runtime environment agent's HTTP server: one Ray server a test can ask simply.
        agents = [(ip, port) for _, ip, port, line in listeners if "RuntimeEnvAgent" in line]
        statuses = [_status(ip, port) for ip, port in agents]
    finally:
        _stop(driver, folder)
        shutil.rmtree(folder, ignore_errors=True)
    seen = "\n".join(f"{pid} {ip}:{port}  {line[:80]}" for pid, ip, port, line in listeners)
    assert {driver.pid, *workers} <= {pid for pid, *_ in listeners}, seen
    assert all(_loopback(ip) for _, ip, _, _ in listeners), seen
    assert statuses and set(statuses) == {401}, f"{statuses}\n{seen}"


def test_a_private_instance_is_refused_once_ray_was_imported_without_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray reads its settings when it is imported: a process that imported it otherwise would
    get an instance listening on the network, so none starts."""
    for name in PRIVATE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(TrainingError, match="imported before the run"), connected(None):
        pass
