"""LLM fine-tuning on hostile or broken inputs: rows far longer than the context, model folders
holding pickles, chat templates the sandbox refuses, broken adapter folders and reward
functions that exit. Each ends in one sentence (or, for long rows, trains in bounded memory),
never a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import TrainingError, TrainingManifest, UsageError
from agile_cli.helpers import installed_registry
from agile_llm import text
from agile_llm.rewards import RewardFunction
from agile_llm.tiny import character_tokenizer, make_tiny_model

from .llm_rows import ROWS
from .test_llm_training import manifest, write_manifest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-llm")
    make_tiny_model(path, steps=5, seed=0)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "digits.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    (tmp_path / "reward.py").write_text(
        "def exact(completion, answer, question):\n    return float(completion == answer)\n"
    )
    return path


class Spy:
    """A tokenizer that records the length of every text it is asked to tokenise."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.lengths: list[int] = []

    def __call__(self, text: str | list[str], **options: Any) -> Any:
        self.lengths += [len(one) for one in ([text] if isinstance(text, str) else text)]
        return self.tokenizer(text, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


# -- rows longer than the context ------------------------------------------------------------


def test_encode_tokenises_only_the_budget_at_the_end_it_keeps() -> None:
    spy = Spy(character_tokenizer())  # one token per character: the cut is checkable exactly
    head, tail = "0123456789abcdef", "ghijklmnopqrstuv"
    long = head + "x" * 200_000 + tail
    budget = 16 * text.CHARS_PER_TOKEN
    with pytest.warns(UserWarning, match="cut before tokenising"):
        last = text.encode(spy, long, 16, keep_end=True)
        first = text.encode(spy, long, 16)
    assert max(spy.lengths) == budget
    assert spy.decode(last) == tail and spy.decode(first) == head
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a text within the budget is tokenised whole, unsaid
        assert text.encode(spy, "abc", 16) == spy.tokenizer("abc").input_ids
        assert spy.decode(text.encode(spy, "abcdef", 4, keep_end=True)) == "cdef"


def member_over_long_rows(tiny: Path, tmp_path: Path, algorithm: str, size: int) -> Any:
    """A member of ``algorithm`` whose data has one row with every text field ``size``
    characters long, its tokenizer a :class:`Spy`."""
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    rows = [dict(row) for row in ROWS]
    rows[0] = {key: "7" * size for key in rows[0]}
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (tmp_path / "reward.py").write_text(
        "def exact(completion, answer, question):\n    return 0.0\n"
    )
    registry = installed_registry()
    parsed = TrainingManifest.get_validated(manifest(algorithm, tiny, path), registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    cls = setup.algorithm_class(parsed, registry)
    member = setup.build_population(parsed, cls, env, context, size=1)[0]
    member.shared.tokenizer = Spy(member.shared.tokenizer)
    env.train, env.test = rows[:4], rows[:2]  # the long row in both
    return member, env


@pytest.mark.parametrize("algorithm", ["SFT", "DPO", "GRPO"])
def test_a_row_longer_than_the_context_is_cut_before_it_is_tokenised(
    tiny: Path, tmp_path: Path, algorithm: str
) -> None:
    member, env = member_over_long_rows(tiny, tmp_path, algorithm, 200_000)
    with pytest.warns(UserWarning, match="cut before tokenising"):
        member.train_step(env.rows_at(0, 4), env)
        member.score(env.test, env)
    # max_context_length is 16 tokens: no text tokenised is longer than 16 x CHARS_PER_TOKEN.
    assert max(member.tokenizer.lengths) <= 16 * text.CHARS_PER_TOKEN


# -- model folders -----------------------------------------------------------------------------


class TouchOnUnpickle:
    """Unpickled by plain pickle, it creates ``marker``: what a hostile pickle could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_model_folder_holding_only_a_pickle_is_refused_unopened(
    run, tiny: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(tiny, folder)
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    torch.save({**weights, "payload": TouchOnUnpickle(marker)}, folder / "pytorch_model.bin")
    loads: list[Any] = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args))
    content = manifest("SFT", tiny, data)
    content["network"]["pretrained_model_name_or_path"] = str(folder)
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{folder} holds only pytorch_model.bin, a pickle agile does not load" in result.output
    assert "convert it to safetensors" in result.output
    assert loads == [] and not marker.exists()


def with_chat_template(tiny: Path, folder: Path, template: str) -> Path:
    from transformers import AutoTokenizer

    shutil.copytree(tiny, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{{ messages[0]['content'].__class__.__mro__ }}", "SecurityError: access to attribute"),
        ("{% for message in messages %}{{ message['content'] }", "TemplateSyntaxError"),
        ("{{ raise_exception('system turns are not supported') }}", "system turns are not"),
    ],
)
def test_a_chat_template_that_cannot_render_is_one_usage_error(template: str, reason: str) -> None:
    tokenizer = character_tokenizer()
    tokenizer.chat_template = template
    tokenizer.name_or_path = "models/\x1b[2Jtiny"
    with pytest.raises(UsageError, match="chat template") as caught:
        text.render(tokenizer, [{"role": "user", "content": "12="}])
    message = caught.value.message
    assert "the tokenizer in models/\\x1b[2Jtiny cannot render the prompt turns" in message
    assert reason in message and "\x1b" not in message


def test_a_sandboxed_chat_template_stops_training_with_the_folder_named(
    run, tiny: Path, data: Path, tmp_path: Path
) -> None:
    folder = with_chat_template(tiny, tmp_path / "templated", "{{ ''.__class__.__mro__ }}")
    content = manifest("SFT", tiny, data)
    content["environment"]["apply_chat_template"] = True  # SFT prompts are otherwise as written
    content["network"]["pretrained_model_name_or_path"] = str(folder)
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"the chat template of the tokenizer in {folder}" in result.output
    assert "SecurityError" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


# -- adapters ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapter(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter of the tiny model, as PEFT saves one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("adapter")
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                        task_type="CAUSAL_LM")  # fmt: skip
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), config).save_pretrained(folder)
    return folder


def _reshaped(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: torch.zeros(value.shape[0] + 1, value.shape[1]) for key, value in weights.items()}


def _renamed(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key.replace("q_proj", "w_proj"): value for key, value in weights.items()}


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda raw, _: os.urandom(4096), "cannot be read (SafetensorError"),
        (lambda raw, _: raw[: len(raw) // 2], "cannot be read (SafetensorError"),
        (lambda _, weights: _reshaped(weights), "does not fit this model: Error(s) in loading"),
        (lambda _, weights: _renamed(weights), "does not fit this model: 4 of its weights"),
    ],
    ids=["random-bytes", "truncated", "other-shapes", "other-layers"],
)
def test_a_broken_start_adapter_is_a_clear_error(
    run, tiny: Path, data: Path, adapter: Path, tmp_path: Path, damage: Any, expected: str
) -> None:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "adapter"
    shutil.copytree(adapter, folder)
    file = folder / "adapter_model.safetensors"
    damaged = damage(file.read_bytes(), load_file(file))
    if isinstance(damaged, dict):
        save_file(damaged, file)
    else:
        file.write_bytes(damaged)
    content = manifest("SFT", tiny, data)
    content["network"]["adapter_path"] = str(folder)
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "network.adapter_path: " in result.output and str(folder) in result.output
    assert expected in result.output and "Traceback" not in result.output


def test_the_start_adapter_intact_trains(run, tiny: Path, data: Path, adapter: Path,
                                         tmp_path: Path) -> None:  # fmt: skip
    content = manifest("SFT", tiny, data)
    content["network"]["adapter_path"] = str(adapter)
    content["training"]["max_steps"] = 8
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 0, result.output


def test_target_modules_naming_no_layer_are_a_usage_error(
    run, tiny: Path, data: Path, tmp_path: Path
) -> None:
    content = manifest("SFT", tiny, data)
    lora = {**content["network"]["lora_config"], "target_modules": ["query", "value"]}
    content["network"]["lora_config"] = lora  # a copy: the shared LORA stays as it is
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "network.lora_config: peft cannot make these adapters" in result.output
    assert "linear layers are named" in result.output and "q_proj" in result.output


# -- reward functions --------------------------------------------------------------------------


def _exits(completion: str, answer: Any, question: str) -> float:
    raise SystemExit(3)


def _interrupted(completion: str, answer: Any, question: str) -> float:
    raise KeyboardInterrupt


def test_a_reward_function_that_exits_is_a_training_error_naming_it() -> None:
    score = RewardFunction(_exits, "reward.py:exits")
    with pytest.raises(TrainingError, match=r"reward.py:exits raised SystemExit\(3\) while "
                       r"scoring completion 0 of the batch \(question 'q'\) at "
                       r"test_llm_hardening.py line \d+: raise Sys"):  # fmt: skip
        score(["c"], ["a"], ["q"])


def _slow(completion: str, answer: Any, question: str) -> float:
    if completion == "fine":
        return 1.0
    if completion == "loop":
        while True:  # a reward stuck in Python
            pass
    if completion == "regex":  # catastrophic backtracking, inside the regular-expression engine
        return float(re.match(r"(a+)+$", "a" * 40 + "b") is not None)
    time.sleep(60)
    return 1.0


@pytest.mark.parametrize("completion", ["sleep", "loop", "regex"])
def test_a_reward_function_that_runs_too_long_stops_the_run_naming_it(completion: str) -> None:
    score = RewardFunction(_slow, "reward.py:slow", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TrainingError) as caught:
        score(["fine", completion], ["a", "a"], ["1+1", "2+2"])
    assert time.monotonic() - started < 5
    assert caught.value.message == (
        "reward function reward.py:slow ran for more than 0.3 s on completion 1 of the batch "
        "(question '2+2')"
    )
    assert "environment.reward_timeout" in (caught.value.hint or "")
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL  # nothing is left armed
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_reward_that_cannot_be_interrupted_ends_the_process_saying_why() -> None:
    code = (
        "import threading, time\n"
        "from agile_llm import rewards\n"
        "rewards._GRACE = 0.2\n"
        "def stuck(c, a, q):\n"
        "    time.sleep(30)\n"
        "score = rewards.RewardFunction(stuck, 'reward.py:stuck', timeout=0.2)\n"
        "worker = threading.Thread(target=score, args=(['c'], ['a'], ['q']))\n"
        "worker.start()  # no alarm outside the main thread: only the watchdog bounds it\n"
        "worker.join()\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 20
    assert "error: reward function reward.py:stuck, scoring completion 0 of the batch" in (
        done.stderr
    )
    assert "cannot be interrupted" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_in_a_reward_function_still_stops_the_run() -> None:
    with pytest.raises(KeyboardInterrupt):
        RewardFunction(_interrupted, "reward.py:stop")(["c"], ["a"], ["q"])


def _chatty(completion: str, answer: Any, question: str) -> Any:
    if completion == "raise":
        raise ValueError("\x1b]0;owned\x07" + "y" * 10_000)
    return "x" * 10_000


def test_what_a_reward_function_returns_or_raises_is_shown_short_and_printable() -> None:
    score = RewardFunction(_chatty, "reward.py:chatty")
    for completion in ("raise", "return"):
        with pytest.raises(TrainingError) as caught:
            score([completion], ["a"], ["q"])
        message = caught.value.message
        assert len(message) < 600 and "\x1b" not in message and "\x07" not in message


def test_escape_sequences_in_a_reward_file_do_not_reach_the_terminal(tmp_path: Path) -> None:
    from agile_llm.rewards import load_reward_function

    escape = "\x1b]0;owned\x07\x1b[2J"
    path = tmp_path / "reward.py"
    path.write_text(f"def f(c, a, q):\n    raise ValueError('{escape}')  # {escape}\n")
    with pytest.raises(TrainingError) as raised:
        load_reward_function(str(path), "f")(["c"], ["a"], ["q"])
    path.write_text(f"x = 1 +  # {escape}\n")
    with pytest.raises(UsageError) as imported:
        load_reward_function(str(path), "f")
    for message in (raised.value.message, imported.value.message):
        assert "\x1b" not in message and "\x07" not in message and "\\x1b]0;owned" in message
