"""LLM fine-tuning end to end on the tiny local model: agile train, --resume and agile
evaluate for SFT, DPO and GRPO; selection copying adapters with their optimizer state; the
elite saved as a PEFT adapter folder; nothing downloaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import TrainingManifest
from agile_cli.helpers import installed_registry
from agile_cli.training import checkpoint

from .llm_rows import LORA


def manifest(algorithm: str, tiny: Path, data: Path, **extra: Any) -> dict[str, Any]:
    """A manifest of two members, two iterations of four prompts per generation."""
    environment: dict[str, Any] = {"dataset": str(data), "train_test_split": 0.6}
    spec: dict[str, Any] = {"name": algorithm, "batch_size": 4, "lr": 0.01,
                            "gradient_checkpointing": False}  # fmt: skip
    if algorithm == "SFT":
        environment["response_column"] = "answer"
    if algorithm in ("GRPO", "GSPO", "CISPO", "LLMREINFORCE", "LLMPPO"):
        environment.update(
            prompt_template={"user_0": "{question}="}, max_reward=1.0,
            reward_file_path=str(data.parent / "reward.py"), reward_fn_name="exact",
        )  # fmt: skip
        spec.update(max_output_tokens=3, temperature=1.0)
        if algorithm not in ("LLMREINFORCE", "LLMPPO"):
            spec["group_size"] = 2
        if algorithm == "LLMPPO":
            spec["lr_actor"] = spec.pop("lr")
    return {
        "algorithm": {**spec, **extra},
        "environment": environment,
        "training": {"max_steps": 16, "evo_steps": 2, "pop_size": 2, "eval_rows": 3},
        "mutation": {"rand_seed": 1, "probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "network": {
            "pretrained_model_name_or_path": str(tiny),
            "max_context_length": 16,
            "lora_config": LORA,
        },
    }


def write_manifest(path: Path, content: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(content), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "algorithm", ["SFT", "DPO", "GRPO", "GSPO", "CISPO", "LLMREINFORCE", "LLMPPO"]
)
def test_train_then_evaluate(run, tiny: Path, data: Path, tmp_path: Path, algorithm: str) -> None:
    path = write_manifest(tmp_path / "m.yaml", manifest(algorithm, tiny, data))
    folder = tmp_path / "run"
    result = run("train", str(path), "--run-dir", str(folder))
    assert result.exit_code == 0, result.output
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["generations"] == 2 and summary["steps_per_member"] == 16
    assert (folder / "elite" / "adapter_config.json").is_file()
    assert (folder / "elite" / "adapter_model.safetensors").is_file()
    shown = run("evaluate", str(folder))
    assert shown.exit_code == 0, shown.output
    assert "held-out rows: 3" in shown.output and "prompt '" in shown.output
    metric = {"SFT": "exact match", "DPO": "preference accuracy"}.get(algorithm, "mean reward")
    assert metric in shown.output
    # Scored on the rows the run held out: the elite's fitness as the run measured it.
    assert f"fitness {summary['best_fitness']:.4g} (llm)" in shown.output


def test_the_elite_adapter_loads_with_peft(run, tiny: Path, data: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path = write_manifest(tmp_path / "m.yaml", manifest("SFT", tiny, data))
    assert run("train", str(path), "--run-dir", str(tmp_path / "run")).exit_code == 0
    elite = checkpoint.load(tmp_path / "run" / "elite.pt", kind=checkpoint.MEMBER)["member"]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny),
                                      str(tmp_path / "run" / "elite"))  # fmt: skip
    loaded = {k: v for k, v in model.named_parameters() if "lora_" in k}
    saved = {k.replace(".{adapter}.", ".default."): v for k, v in elite["adapter"].items()}
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


@pytest.mark.parametrize("algorithm", ["DPO", "GRPO"])
def test_resume_continues_the_population(
    run, tiny: Path, data: Path, tmp_path: Path, algorithm: str
) -> None:
    content = manifest(algorithm, tiny, data)
    content["training"]["max_steps"] = 8  # one generation
    path = write_manifest(tmp_path / "m.yaml", content)
    folder = tmp_path / "run"
    assert run("train", str(path), "--run-dir", str(folder)).exit_code == 0
    first = checkpoint.load(folder / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    saved = yaml.safe_load((folder / "manifest.yaml").read_text())
    saved["training"]["max_steps"] = 16
    (folder / "manifest.yaml").write_text(yaml.safe_dump(saved))
    result = run("train", "--resume", str(folder))
    assert result.exit_code == 0, result.output
    state = checkpoint.load(folder / "checkpoints" / "latest.pt", kind=checkpoint.POPULATION)
    assert state["state"]["generation"] == 2 and state["state"]["steps_per_member"] == 16
    before = {m["index"]: m for m in first["members"]}
    after = {m["index"]: m for m in state["members"]}
    kept = [i for i in after if i in before]  # a survivor of the first generation, trained on
    assert kept, "the elite survives selection"
    assert all(after[i]["record"]["steps"] == 16 for i in after)
    if algorithm == "GRPO":
        return  # a group of equal rewards has no gradient: GRPO's weights may stay put
    for index in kept:
        assert not all(torch.equal(before[index]["adapter"][k], after[index]["adapter"][k])
                       for k in before[index]["adapter"])  # fmt: skip


def test_selection_copies_the_adapter_and_its_optimizer(tiny: Path, data: Path) -> None:
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    parsed = TrainingManifest.get_validated(manifest("SFT", tiny, data), registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    cls = setup.algorithm_class(parsed, registry)
    parent = setup.build_population(parsed, cls, env, context, size=1)[0]
    parent.train_step(env.rows_at(0, 4), env)
    child = parent.clone(7)
    weights = parent.shared.adapters.weights
    assert child.adapter != parent.adapter
    assert all(torch.equal(weights(parent.adapter)[k], weights(child.adapter)[k])
               for k in weights(parent.adapter))  # fmt: skip
    moments = parent.optimizers["adapter"].state_dict()["state"]
    copied = child.optimizers["adapter"].state_dict()["state"]
    assert moments.keys() == copied.keys() and moments
    assert all(torch.equal(moments[i]["exp_avg"], copied[i]["exp_avg"]) for i in moments)
    frozen = {k: v.clone() for k, v in weights(parent.adapter).items()}
    child.train_step(env.rows_at(4, 4), env)  # the copy learns on its own
    assert all(torch.equal(frozen[k], weights(parent.adapter)[k]) for k in frozen)
    assert not all(torch.equal(frozen[k], weights(child.adapter)[k]) for k in frozen)
    names = list(parent.shared.adapters.names)
    del child
    assert len(parent.shared.adapters.names) == len(names) - 1  # its adapter was freed


def test_one_base_model_is_shared_by_every_member(tiny: Path, data: Path) -> None:
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    parsed = TrainingManifest.get_validated(manifest("GRPO", tiny, data), registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    members = setup.build_population(parsed, setup.algorithm_class(parsed, registry), env,
                                     context, size=3)  # fmt: skip
    assert len({id(member.shared.base) for member in members}) == 1
    assert len({member.adapter for member in members}) == 3
    base = [p for k, p in members[0].shared.model.named_parameters() if "lora_" not in k]
    assert base and not any(p.requires_grad for p in base)


def test_a_model_that_is_not_here_fails_fast_naming_what_to_fetch(
    tiny: Path, data: Path, tmp_path: Path
) -> None:
    content = manifest("SFT", tiny, data)
    content["network"]["pretrained_model_name_or_path"] = "nobody/no-such-model"
    path = write_manifest(tmp_path / "m.yaml", content)
    home = tmp_path / "hf"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "agile_cli.cli", "train", str(path), "--run-dir",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HOME": str(home)},
    )  # fmt: skip
    assert time.perf_counter() - started < 60
    assert result.returncode == 1, result.stderr
    assert "nobody/no-such-model" in result.stderr and "hf download" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # nothing was left behind


def test_arch_mutation_is_refused_for_llm_algorithms(tiny: Path, data: Path) -> None:
    content = manifest("GRPO", tiny, data)
    content["mutation"]["probabilities"]["arch_mut"] = 0.3
    with pytest.raises(Exception, match=r"arch_mut: GRPO has no architecture mutation"):
        TrainingManifest.get_validated(content)


def test_local_reasoning_training_needs_the_reward_function(
    run, tiny: Path, data: Path, tmp_path: Path
) -> None:
    content = manifest("GRPO", tiny, data)
    del content["environment"]["reward_file_path"]
    path = write_manifest(tmp_path / "m.yaml", content)
    result = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "environment.rubric_file_path: training a rollout over dataset rows" in result.output
    content = manifest("GRPO", tiny, data)
    del content["environment"]["reward_fn_name"]  # 2.58 then looks for reward_fn
    path = write_manifest(tmp_path / "m.yaml", content)
    result = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "environment.rubric_name: reward.py defines no 'reward_fn'" in result.output


CACHED_RUN = """
import json, sys
from agile_cli.cli import main
sys.argv = ["agile", "train", sys.argv[1], "--run-dir", sys.argv[2]]
main()
"""


def test_a_hub_id_in_the_local_cache_trains_offline(tiny: Path, data: Path, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    snapshot = home / "hub" / "models--someone--tiny" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for file in tiny.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    refs = home / "hub" / "models--someone--tiny" / "refs"
    refs.mkdir()
    (refs / "main").write_text("0123abc")
    content = manifest("SFT", tiny, data)
    content["network"]["pretrained_model_name_or_path"] = "someone/tiny"
    path = write_manifest(tmp_path / "m.yaml", content)
    result = subprocess.run(
        [sys.executable, "-c", CACHED_RUN, str(path), str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HOME": str(home)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((tmp_path / "run" / "elite" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "someone/tiny"


def test_a_model_larger_than_the_memory_is_refused_before_loading(
    run, tiny: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agile_llm.model

    monkeypatch.setattr(agile_llm.model, "available_memory", lambda: 1000)
    path = write_manifest(tmp_path / "m.yaml", manifest("SFT", tiny, data))
    result = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "more than the 1,000 B this machine has free" in result.output
