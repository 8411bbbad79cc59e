"""LLM manifests in agilerl 2.58's format, as its users write them and as it writes them back
out: agile validates every one with the reference's meaning, trains one step of each that runs
on this machine, and refuses the others at once, saying why.

The corpus is ``tests/reference_258/llm/``; ``benchmarks/check_reference_258.py`` checks that
2.58 itself validates every file of it (it needs a Python with ``agilerl==2.58.0``).
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from agile_cli import TrainingManifest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "reference_258" / "llm"
CORPUS = sorted(FOLDER.glob("*.yaml"))
#: Files agile does not train on this machine, and the field ``agile train`` names first.
REFUSED = {
    "grpo_env_image.yaml": "environment.env_image",
    "grpo_fsdp.yaml": "algorithm.fsdp",
}


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_the_corpus_covers_every_algorithm_source_and_the_written_out_form() -> None:
    loaded = {path.name: _load(path) for path in CORPUS}
    names = {data["algorithm"]["name"] for data in loaded.values()}
    assert names == {"GRPO", "GSPO", "CISPO", "LLMPPO", "LLMREINFORCE", "DPO", "SFT"}
    sources = {
        key
        for data in loaded.values()
        for key in data["environment"]
        if key in ("dataset", "entrypoint", "env_url", "env_image")
    }
    assert sources == {"dataset", "entrypoint", "env_url", "env_image"}
    assert len(CORPUS) >= 15 and sum(p.name.startswith("payload_") for p in CORPUS) >= 2
    assert set(REFUSED) <= set(loaded)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_manifest_validates(path: Path, run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    reached = TrainingManifest.get_validated(_load(path)).environment.env_type
    assert reached in ("rollout", "dataset")


def _fake_gem(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in for the gem-llm package's ``gem.make(env_id)``: the digit game."""
    sys.path.insert(0, str(FOLDER))
    try:
        import guess_digit
    finally:
        sys.path.remove(str(FOLDER))
    made: list[str] = []
    fake = types.ModuleType("gem")
    fake.make = lambda name: made.append(name) or guess_digit.GuessDigit(max_turns=3)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gem", fake)
    return made


def _one_step(data: dict[str, Any], tiny: Path) -> list[str]:
    """``--set`` options that make a file's run one short generation of the tiny model."""
    sampling = data["algorithm"]["name"] not in ("DPO", "SFT")
    options = {
        "network.pretrained_model_name_or_path": str(tiny),
        "algorithm.batch_size": 2,
        "training.max_steps": 2,
        "training.evo_steps": 1,
        "training.eval_rows": 2,
    }
    if sampling:
        options["algorithm.max_output_tokens"] = 3
    if "metrics_interval" in data["training"]:  # evo_steps's other spelling, as written
        options["training.metrics_interval"] = options.pop("training.evo_steps")
    if "thinking_token_budget" in data["algorithm"]:  # below the cap, as 2.58 requires
        options.update({"algorithm.thinking_token_budget": 2, "algorithm.max_output_tokens": 6})
    if "group_size" in data["algorithm"]:
        options["algorithm.group_size"] = 2
    return [part for key, value in options.items() for part in ("--set", f"{key}={value}")]


@pytest.mark.parametrize("path", [p for p in CORPUS if p.name not in REFUSED], ids=lambda p: p.name)
def test_those_that_run_here_train_one_step(
    path: Path, run: Any, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote ones against the loopback OpenEnv server the tests start."""
    from .llm_openenv_server import GameServer

    monkeypatch.chdir(ROOT)
    made = _fake_gem(monkeypatch)
    data = _load(path)
    folder = tmp_path / "run"
    options = _one_step(data, tiny)
    field = data["environment"].get("action_field", "message")
    tools = data["environment"].get("answer_tool")  # an MCP server: its tools, run by name
    with GameServer(action_field=field, mcp=tools is not None,
                    answer_tool=tools or "submit_answer") as server:  # fmt: skip
        if "env_url" in data["environment"]:
            options += ["--set", f"environment.env_url={server.url}"]
        result = run("train", str(path), "--quiet", "--run-dir", str(folder), *options)
    assert result.exit_code == 0, result.output
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["generation"] for line in lines] == [1]
    if data["environment"].get("factory") == "gem:make":
        assert set(made) == {data["environment"]["entrypoint"]}
    if tools is not None:  # every episode listed the server's tools and called them by name
        steps = [m["data"].get("type") for _, m in server.log.messages if m["type"] == "step"]
        assert "list_tools" in steps and set(steps) == {"list_tools", "call_tool"}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_others_are_refused_at_once_naming_the_field(
    name: str, run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    folder = tmp_path / "run"
    started = time.perf_counter()
    result = run("train", str(FOLDER / name), "--run-dir", str(folder))
    took = time.perf_counter() - started
    assert result.exit_code == 2, result.output
    assert "training on this machine" in result.output and REFUSED[name] in result.output
    assert "Traceback" not in result.output and not folder.exists()
    assert took < 1.0 and "torch" not in result.output  # before any model is loaded
    checked = run("validate", str(FOLDER / name))
    assert f"not on this machine: {REFUSED[name]}" in checked.output
