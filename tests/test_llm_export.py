"""``training.checkpoint_export``: the elite merged into its base model, a Hugging Face model
folder that computes what the base with the adapter does, written when the trigger says;
``agile llm merge`` writes it on demand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from .llm_rows import LORA


def _write(tmp_path: Path, tiny: Path, data: Path, export: dict[str, str] | None) -> Path:
    training: dict[str, Any] = {"max_steps": 8, "evo_steps": 2, "pop_size": 2, "eval_rows": 3}
    if export is not None:
        training["checkpoint_export"] = export
    environment = {"dataset": str(data), "train_test_split": 0.6, "response_column": "answer",
                   "prompt_template": {"user_0": "{question}="}}  # fmt: skip
    network = {"pretrained_model_name_or_path": str(tiny), "max_context_length": 16,
               "lora_config": LORA}  # fmt: skip
    content = {
        "algorithm": {"name": "SFT", "batch_size": 2, "lr": 0.05, "gradient_checkpointing": False},
        "environment": environment,
        "training": training,
        "mutation": {"rand_seed": 1, "probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}},
        "selection_strategy": {"tournament_size": 2, "elitism": True},
        "network": network,
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def _trained(run: Any, tmp_path: Path, tiny: Path, data: Path, export: Any) -> Path:
    folder = tmp_path / "run"
    result = run("train", str(_write(tmp_path, tiny, data, export)), "--quiet", "--run-dir",
                 str(folder))  # fmt: skip
    assert result.exit_code == 0, result.output
    return folder


def _logits_agree(tiny: Path, adapter: Path, merged: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[5, 17, 23, 40, 9, 61]])
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(str(tiny))
        adapted = PeftModel.from_pretrained(base, str(adapter)).eval()(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(str(tiny)).eval()(input_ids=ids).logits
        alone = AutoModelForCausalLM.from_pretrained(str(merged)).eval()(input_ids=ids).logits
    assert not torch.allclose(adapted, plain, atol=1e-4)  # the adapter changed something
    torch.testing.assert_close(alone, adapted, rtol=1e-4, atol=1e-5)


def test_a_merged_export_computes_what_the_elite_adapter_does(
    run: Any, tmp_path: Path, tiny: Path, data: Path
) -> None:
    folder = _trained(run, tmp_path, tiny, data, {"format": "merged", "trigger": "final"})
    merged = folder / "merged"
    names = {path.name for path in merged.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in names)  # data only
    _logits_agree(tiny, folder / "elite", merged)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["exports"] == [str(merged)]


@pytest.mark.parametrize("trigger", ["every", "best"])
def test_every_and_best_write_it_too(
    trigger: str, run: Any, tmp_path: Path, tiny: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agile_llm.export as export

    writes: list[Path] = []
    original = export.write_merged

    def counted(*args: Any, **kwargs: Any) -> Path:
        writes.append(args[2])
        return original(*args, **kwargs)

    monkeypatch.setattr(export, "write_merged", counted)
    folder = _trained(run, tmp_path, tiny, data, {"format": "merged", "trigger": trigger})
    generations = len((folder / "metrics.jsonl").read_text().splitlines())
    assert generations == 2
    # every: the elite saved after the first generation, then the final one; best: the final
    assert len(writes) == (2 if trigger == "every" else 1)
    assert set(writes) == {folder / "merged"}
    _logits_agree(tiny, folder / "elite", folder / "merged")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["exports"] == [str(folder / "merged")]


@pytest.mark.parametrize(
    "export", [None, {"format": "adapter"}, {"format": "merged", "trigger": "on_demand"}]
)
def test_adapters_only_or_on_demand_write_no_merged_model_until_asked(
    export: Any, run: Any, tmp_path: Path, tiny: Path, data: Path
) -> None:
    folder = _trained(run, tmp_path, tiny, data, export)
    assert not (folder / "merged").exists() and (folder / "elite").is_dir()
    result = run("llm", "merge", str(folder))
    assert result.exit_code == 0, result.output
    assert f"merged model in {folder / 'merged'}" in result.output
    _logits_agree(tiny, folder / "elite", folder / "merged")
    again = run("llm", "merge", str(folder / "elite"))  # the adapter folder itself
    assert again.exit_code == 2 and "is not empty" in again.output
    out = tmp_path / "elsewhere"
    assert run("llm", "merge", str(folder / "elite"), "--out", str(out)).exit_code == 0
    _logits_agree(tiny, folder / "elite", out)


def test_merge_names_what_it_was_given_when_it_is_no_adapter(run: Any, tmp_path: Path) -> None:
    result = run("llm", "merge", str(tmp_path))
    assert result.exit_code == 2
    assert "neither a run folder with an elite/ adapter nor an adapter folder" in result.output
    assert "Traceback" not in result.output


def test_merge_never_asks_the_network_for_a_base_it_cannot_find(
    run: Any, tmp_path: Path, tiny: Path, data: Path
) -> None:
    """Offline before peft and transformers read their settings: a missing base is an error
    at once, not five retries of a hub that is never to be asked."""
    import os
    import subprocess
    import sys
    import time

    folder = _trained(run, tmp_path, tiny, data, None)
    config = folder / "elite" / "adapter_config.json"
    named = json.loads(config.read_text())
    config.write_text(json.dumps({**named, "base_model_name_or_path": "absent/model"}))
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"}  # a closed port, were it asked
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(key, None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "agile_cli.cli", "llm", "merge", str(folder)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1 and "agile never downloads" in done.stderr
    assert "Retrying" not in done.stderr and time.perf_counter() - started < 15


def test_saving_an_adapter_elsewhere_writes_no_merged_model(
    tmp_path: Path, tiny: Path, data: Path
) -> None:
    """vLLM's engine saves each member's adapter to load it: only a save of the elite into
    its run folder exports, even with trigger every."""
    from agile_cli import TrainingManifest
    from agile_cli.helpers import installed_registry
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    path = _write(tmp_path, tiny, data, {"format": "merged", "trigger": "every"})
    manifest = TrainingManifest.get_validated(path, registry=registry)
    env = setup.build_environment(manifest, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, manifest.training)
    cls = setup.algorithm_class(manifest, registry)
    (member,) = setup.build_population(manifest, cls, env, context, size=1)
    assert member.save_portable(tmp_path / "engine" / "1")
    assert sorted(p.name for p in (tmp_path / "engine").iterdir()) == ["1"]
