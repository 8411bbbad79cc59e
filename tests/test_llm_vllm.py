"""Generation through vLLM (``use_vllm: true``), held to vLLM's offline API with a stand-in
(CI has no GPU and no vllm): one engine with LoRA enabled for the whole population, one
``generate`` call for every member's rows, each row with a LoRA request whose folder holds its
member's adapter as it is at that call, and the completions used exactly as transformers'
would be."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch
import yaml

from agile_cli import TrainingError, TrainingManifest
from agile_cli.helpers import installed_registry
from agile_llm import options

from .test_llm_training import manifest


class Engine:
    """vllm.LLM's stand-in: answers each prompt with the digits of its question plus one (the
    rewarded answer) when its member's adapter sums to more than the other's, else the
    question; records what it was given."""

    made: list[Engine] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.calls: list[dict[str, Any]] = []
        Engine.made.append(self)

    def generate(self, prompts: list[Any], params: list[Any], lora_request: Any = None,
                 use_tqdm: bool = True) -> list[Any]:  # fmt: skip
        from safetensors.torch import load_file

        sums = [float(sum(t.sum() for t in load_file(Path(r.path) / "adapter_model.safetensors")
                          .values())) for r in lora_request]  # fmt: skip
        self.calls.append({"prompts": prompts, "params": params, "loras": lora_request,
                           "sums": sums})  # fmt: skip
        tokenizer = self.options["tokenizer_for_test"]
        outputs = []
        for prompt, total in zip(prompts, sums, strict=True):
            question = tokenizer.decode(prompt["prompt_token_ids"]).split("=")[0][-2:]
            said = "".join(str((int(c) + 1) % 10) for c in question) if total > 0 else question
            ids = [*tokenizer(said, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
            outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids)]))
        return outputs


class Request:
    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str) -> None:
        self.name, self.id, self.path = lora_name, lora_int_id, lora_path


class Sampling:
    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> type[Engine]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)

    class Bound(Engine):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options, tokenizer_for_test=tokenizer)

    package = types.ModuleType("vllm")
    package.LLM = Bound  # type: ignore[attr-defined]
    package.SamplingParams = Sampling  # type: ignore[attr-defined]
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = Request  # type: ignore[attr-defined]
    for name, module in (("vllm", package), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(Engine, "made", [])
    return Engine


def _content(tiny: Path, data: Path) -> dict[str, Any]:
    content = manifest("GRPO", tiny, data, use_vllm=True,
                       vllm_config={"gpu_memory_utilization": 0.5, "sleep_mode": True})  # fmt: skip
    content["environment"]["prompt_template"] = {"user_0": "{question}="}
    return content


def _population(tiny: Path, data: Path) -> tuple[list[Any], Any]:
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    parsed = TrainingManifest.get_validated(_content(tiny, data), registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    members = setup.build_population(
        parsed, setup.algorithm_class(parsed, registry), env, context, size=2
    )
    with torch.no_grad():  # one member's adapter pushed up, the other's down
        for member, sign in zip(members, (1.0, -1.0), strict=True):
            for weight in member.trained_parameters():
                weight.fill_(sign * 0.01)
    return members, env


def test_one_engine_serves_every_members_adapter_in_one_call(
    vllm: type[Engine], tiny: Path, data: Path
) -> None:
    members, env = _population(tiny, data)
    rows = [env.rows_at(0, 2), env.rows_at(2, 2)]
    sums = [float(sum(w.sum() for w in m.shared.adapters.weights(m.adapter).values()))
            for m in members]  # fmt: skip
    losses = type(members[0]).train_group(members, rows, env)
    assert len(losses) == 2
    (engine,) = vllm.made
    assert engine.options["enable_lora"] and engine.options["max_loras"] == 2
    assert engine.options["max_lora_rank"] == 8  # rank 2, rounded up to a rank vLLM accepts
    assert engine.options["model"] == str(tiny)
    assert engine.options["gpu_memory_utilization"] == 0.5 and "sleep_mode" not in engine.options
    assert engine.options["max_model_len"] == members[0].shared.context_length
    (call,) = engine.calls
    assert len(call["prompts"]) == 2 * 2 * 2  # members x prompts x group
    owners = [request.name.rsplit("-", 1)[0] for request in call["loras"]]
    assert owners == [members[0].adapter] * 4 + [members[1].adapter] * 4
    assert call["sums"][:4] == pytest.approx([sums[0]] * 4, rel=1e-5)  # the weights then
    assert call["sums"][4:] == pytest.approx([sums[1]] * 4, rel=1e-5)
    params = call["params"][0]
    assert params.temperature == 1.0 and params.max_tokens == 3
    assert params.stop_token_ids == [members[0].tokenizer.eos_token_id]
    assert len({p.seed for p in call["params"]}) == 8  # a seed per row
    # The stand-in answered member 0's rows right (reward 1) and member 1's wrong.
    assert members[0].last_rewards.tolist() == [1.0] * 4
    assert max(members[1].last_rewards.tolist()) < 1.0


def test_each_call_loads_the_adapters_as_they_are_now(
    vllm: type[Engine], tiny: Path, data: Path
) -> None:
    members, env = _population(tiny, data)
    member = members[0]
    member.train_step(env.rows_at(0, 2), env)
    member.train_step(env.rows_at(2, 2), env)
    (engine,) = vllm.made
    first, second = engine.calls
    assert second["loras"][0].id > first["loras"][0].id  # a new id: vLLM caches by id
    assert second["sums"][0] != pytest.approx(first["sums"][0])
    assert not Path(first["loras"][0].path).exists()  # read by then, and removed
    scores = member.score(env.test, env)
    greedy = engine.calls[-1]["params"][0]
    assert greedy.temperature == 0.0 and greedy.seed is None
    assert scores.metrics["mean reward"] == 1.0


def test_train_with_vllm_from_the_command_line(
    vllm: type[Engine], run, tiny: Path, data: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(options, "installed", lambda module: True)
    monkeypatch.setattr(options, "gpu_present", lambda: True)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_content(tiny, data)), encoding="utf-8")
    checked = run("validate", str(path))
    assert "not on this machine" not in checked.output
    assert "algorithm.vllm_config.sleep_mode: ignored" in checked.output
    result = run("train", str(path), "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert len(vllm.made) == 1 and len(vllm.made[0].calls) > 4  # one engine for the run


def test_without_vllm_the_engine_is_refused_saying_how_to_train_without_it(
    monkeypatch: pytest.MonkeyPatch, tiny: Path
) -> None:
    from agile_llm.vllm_engine import VLLMGenerator

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(TrainingError, match="vllm package is not installed") as caught:
        VLLMGenerator(str(tiny), rank=2, adapters=2, context=16, config=None, seed=0)
    assert "--set algorithm.use_vllm=false" in str(caught.value.hint)
