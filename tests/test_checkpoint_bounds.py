"""Reading a checkpoint takes memory and time bounded by the file: a crafted structure (one list
shared at every level of a deep nest, a list holding itself, a nest a hundred thousand deep)
and an architecture edited far past the weights the file holds are refused with a sentence,
under a memory ceiling, before anything is built. Counters of the wrong type and values no
field takes are sentences too, not tracebacks."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
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
training: {max_steps: 128, evo_steps: 64, pop_size: 2}
mutation: {}
tournament_selection: {}
"""
#: Address space a command may take: torch's import and a tiny run fit in well under it; the
#: crafted files would need gigabytes to terabytes.
CEILING = 3 << 30


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from agile_cli.cli import cli

    base = tmp_path_factory.mktemp("bounds")
    (base / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    args = ["train", str(base / "m.yaml"), "--quiet", "--device", "cpu", "--run-dir"]
    assert CliRunner().invoke(cli, [*args, str(base / "run")]).exit_code == 0
    return base / "run"


@pytest.fixture
def run_copy(trained: Path, tmp_path: Path) -> Path:
    """A copy of the run, with a budget it has not trained to yet (so that --resume trains)."""
    copy = Path(shutil.copytree(trained, tmp_path / "run"))
    manifest = copy / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("max_steps: 128", "max_steps: 192"))
    return copy


def _agile(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``agile ARGS`` in a process that may take at most :data:`CEILING` of memory."""

    def ceiling() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CEILING, CEILING))

    return subprocess.run(
        [sys.executable, "-m", "agile_cli", *args], capture_output=True, text=True,
        timeout=timeout, preexec_fn=ceiling,
    )  # fmt: skip


def _edit(path: Path, change: Any) -> None:
    """Apply ``change`` to the checkpoint's state and write it back as agile writes files."""
    state = checkpoint.load(path)
    change(state)
    checkpoint.save_atomically(state, path)


def _with_pickle(path: Path, pickled: bytes) -> None:
    """Replace the pickle inside the torch archive ``path`` (stored, with a right checksum)."""
    original = zipfile.ZipFile(path)
    entries = [(info, original.read(info)) for info in original.infolist()]
    original.close()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for info, data in entries:
            archive.writestr(info, pickled if info.filename.endswith("data.pkl") else data)


def _text(text: str) -> bytes:
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data


def _member_file(extra: bytes) -> bytes:
    """A member file's pickle whose member's ``extra`` entry is the pickled value ``extra``."""
    head = b"\x80\x02}(" + _text("format") + b"K\x09" + _text("kind") + _text("member")
    head += _text("manifest") + b"}" + _text("member") + b"}(" + _text("extra")
    return head + extra + b"uu."


def test_one_list_shared_at_every_level_is_refused(tmp_path: Path) -> None:
    nest: list[Any] = [1]
    for _ in range(24):  # 2**24 values as a tree: 1 GB and a minute before the bound
        nest = [nest, nest]
    path = tmp_path / "elite.pt"
    torch.save({"format": 9, "kind": "member", "manifest": {}, "member": {"extra": nest}}, path)
    assert path.stat().st_size < 4096
    result = _agile("evaluate", str(path), timeout=20)
    assert result.returncode == 1, result.stderr
    assert "stands for more values than its size can hold" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["itself", "deep"])
def test_a_nest_that_never_ends_is_refused(tmp_path: Path, trained: Path, kind: str) -> None:
    path = tmp_path / "elite.pt"
    shutil.copy(trained / "elite.pt", path)
    depth = 100_000
    # a list memoised, then appended to itself; or lists nested a hundred thousand deep
    nest = b"]q\x00h\x00a" if kind == "itself" else b"]" * depth + b"a" * (depth - 1)
    _with_pickle(path, _member_file(nest))
    with pytest.raises(TrainingError, match=r"nests more than 64 levels deep \(or contains itself"):
        checkpoint.load(path)


def test_a_format_that_is_a_tensor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "elite.pt"
    torch.save({"format": torch.tensor([9, 9]), "kind": "member"}, path)
    with pytest.raises(TrainingError, match="has checkpoint format tensor"):
        checkpoint.load(path)


def _widen(width: int) -> Any:
    def change(state: dict[str, Any]) -> None:
        for member in state.get("members", [state.get("member")]):
            member["arch"]["head"]["hidden_size"] = [width, width]

    return change


def test_an_architecture_past_the_manifests_bounds_is_never_built(run_copy: Path) -> None:
    _edit(run_copy / "elite.pt", _widen(20_000))  # 1.6 GB of weights, held in 100 KB
    evaluated = _agile("evaluate", str(run_copy), "--device", "cpu", timeout=30)
    assert evaluated.returncode == 1, evaluated.stderr
    assert "head.hidden_size[0] is 20000, over network.head_config.max_mlp_nodes 500" in (
        evaluated.stderr
    )
    _edit(run_copy / "checkpoints" / "latest.pt", _widen(1_000_000))  # 4 TB
    resumed = _agile("train", "--resume", str(run_copy), "--device", "cpu", "--quiet")
    assert resumed.returncode == 1, resumed.stderr
    assert "is not one its run could have grown" in resumed.stderr
    assert "Traceback" not in resumed.stderr


def test_an_architecture_past_the_weights_is_never_built(run_copy: Path) -> None:
    """Within the bounds (500 nodes a layer), but far more than the weights held (64)."""
    _edit(run_copy / "elite.pt", _widen(500))
    evaluated = _agile("evaluate", str(run_copy), "--device", "cpu", timeout=30)
    assert evaluated.returncode == 1, evaluated.stderr
    assert "mlp[500,500] makes networks of at least 294,397 parameters" in evaluated.stderr
    assert "nothing of it was built" in evaluated.stderr


def test_counters_of_the_wrong_type_are_a_sentence(run, run_copy: Path) -> None:
    _edit(run_copy / "checkpoints" / "latest.pt",
          lambda state: state["state"].update(generation="2"))  # fmt: skip
    resumed = run("train", "--resume", str(run_copy), "--device", "cpu", "--quiet")
    assert resumed.exit_code == 1
    assert "state.generation: input should be a valid integer" in resumed.output


@pytest.mark.parametrize(
    ("setting", "path"),
    [("algorithm.lr=1e309", "algorithm.lr"), ("algorithm.gamma=-.inf", "algorithm.gamma"),
     ("training.target_score=.nan", "training.target_score")],
)  # fmt: skip
def test_no_field_takes_infinity_or_nan(run, tmp_path: Path, setting: str, path: str) -> None:
    (tmp_path / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    result = run("validate", str(tmp_path / "m.yaml"), "--set", setting)
    assert result.exit_code == 2
    assert f"{path}: input should be a finite number" in result.output
