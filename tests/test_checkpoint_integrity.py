"""A checkpoint damaged after it was written is refused, not loaded as slightly different
numbers; a checkpoint that cannot be written (a full disk, a read-only folder) stops the run
with a message, keeping the previous file."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from agile_cli import TrainingError
from agile_cli.training import checkpoint

MANIFEST = """\
algorithm: {name: DQN, batch_size: 16}
environment: {name: CartPole-v1, num_envs: 2}
training: {max_steps: 128, evo_steps: 64, pop_size: 2, checkpoint_steps: 64}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny finished run, with snapshots at steps 64 and 128."""
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("trained")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir",
            str(base / "run")]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return base / "run"


@pytest.fixture
def run_copy(trained: Path, tmp_path: Path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


def _flip_a_bit_of_a_tensor(path: Path) -> str:
    """Flip one bit in the middle of the largest tensor's bytes; returns the entry's name."""
    with zipfile.ZipFile(path) as archive:
        entry = max(
            (info for info in archive.infolist() if "/data/" in info.filename),
            key=lambda info: info.file_size,
        )
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", raw[entry.header_offset + 26 :][:4])
    start = entry.header_offset + 30 + name_length + extra_length
    raw[start + entry.file_size // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    return entry.filename


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    return []


def test_a_bit_flipped_in_a_tensor_is_refused(run, run_copy) -> None:
    latest = run_copy / "checkpoints" / "latest.pt"
    intact = torch.load(latest, weights_only=True)
    entry = _flip_a_bit_of_a_tensor(latest)
    # What agile used to read: torch loads the damaged file, one number silently different.
    damaged = torch.load(latest, weights_only=True)
    pairs = zip(_tensors(intact), _tensors(damaged), strict=True)
    assert sum(not torch.equal(a, b) for a, b in pairs) == 1
    with pytest.raises(TrainingError, match="is damaged") as caught:
        checkpoint.load(latest)
    assert f"(entry {entry} fails its checksum)" in caught.value.message
    assert "step_128.pt" in (caught.value.hint or "")
    for args in (["train", "--resume", str(run_copy)], ["evaluate", str(latest)]):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"is damaged (entry {entry} fails its checksum)" in result.output
        assert "Traceback" not in result.output
    assert checkpoint.load(run_copy / "checkpoints" / "step_128.pt")["state"]["generation"] == 2


def test_an_intact_checkpoint_loads(trained) -> None:
    state = checkpoint.load(trained / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    assert state["state"]["steps_per_member"] == 128


class _FillingDisk:
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, stream: Any, room: int) -> None:
        self.stream, self.room = stream, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.stream.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def __enter__(self) -> _FillingDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes through ``os.fdopen`` fail after 64 KiB with ENOSPC (through torch's writer)."""
    real = os.fdopen

    def fdopen(descriptor: int, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        stream = real(descriptor, mode, *args, **kwargs)
        return _FillingDisk(stream, 64 * 1024) if "w" in mode else stream

    monkeypatch.setattr(checkpoint.os, "fdopen", fdopen)


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch) -> None:
    path = tmp_path / "latest.pt"
    checkpoint.save_atomically({"format": checkpoint.FORMAT_VERSION, "x": torch.ones(3)}, path)
    real = os.fdopen
    monkeypatch.setattr(
        checkpoint.os, "fdopen", lambda fd, mode: _FillingDisk(real(fd, mode), 64 * 1024)
    )
    with pytest.raises(TrainingError) as caught:
        checkpoint.save_atomically({"format": 2, "x": torch.zeros(100_000)}, path)
    assert caught.value.message == (
        f"could not write the checkpoint {path}: No space left on device (the previous one is kept)"
    )
    assert "free space on the disk" in (caught.value.hint or "")
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]  # no temporary left behind
    assert torch.equal(checkpoint.load(path)["x"], torch.ones(3))


def test_a_full_disk_during_training_stops_it_with_a_message(run, write, tmp_path,
                                                             full_disk) -> None:  # fmt: skip
    manifest = write("m.yaml", MANIFEST.replace("max_steps: 128", "max_steps: 64"))
    result = run("train", str(manifest), "--quiet", "--device", "cpu", "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "could not write the checkpoint" in result.output
    assert "No space left on device" in result.output and "Traceback" not in result.output


def test_a_read_only_file_system_is_said_so(tmp_path, monkeypatch) -> None:
    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(checkpoint.tempfile, "mkstemp", read_only)
    with pytest.raises(TrainingError, match="Read-only file system") as caught:
        checkpoint.save_atomically({"format": 2}, tmp_path / "latest.pt")
    assert "writable folder with --run-dir" in (caught.value.hint or "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_folder_is_refused_with_a_message(tmp_path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    checkpoint.save_atomically({"format": 2, "x": torch.ones(3)}, folder / "latest.pt")
    folder.chmod(0o500)
    try:
        with pytest.raises(TrainingError, match="Permission denied"):
            checkpoint.save_atomically({"format": 2, "x": torch.zeros(3)}, folder / "latest.pt")
    finally:
        folder.chmod(0o700)
    assert torch.equal(checkpoint.load(folder / "latest.pt")["x"], torch.ones(3))


def test_a_checkpoint_of_a_newer_format_names_the_agile_that_wrote_it_and_how_to_upgrade(
    tmp_path,
) -> None:
    path = tmp_path / "latest.pt"
    newer = {"format": checkpoint.FORMAT_VERSION + 1, "agile_version": "9.1.0"}
    checkpoint.save_atomically(newer, path)
    with pytest.raises(TrainingError) as refused:
        checkpoint.load(path)
    assert "written by agile 9.1.0" in str(refused.value)
    assert "upgrade agile to 9.1.0 or later" in (refused.value.hint or "")
    older = tmp_path / "old.pt"
    checkpoint.save_atomically({"format": 1, "agile_version": "0.0.1"}, older)
    with pytest.raises(TrainingError) as refused_old:
        checkpoint.load(older)
    assert "train the run again" in (refused_old.value.hint or "")
