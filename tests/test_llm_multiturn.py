"""Multi-turn environments: an episode is a conversation whose transcript is what the chat
template renders of it, whose replies alone are trained, and whose environment's mistakes are
reported by name; GRPO trains on it, alone or with the population together."""

from __future__ import annotations

import copy
import random
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch
import yaml

from agile_cli import TrainingError, TrainingManifest, UsageError
from agile_cli.helpers import installed_registry
from agile_llm import multiturn, text

from .test_llm_prompt_format import TEMPLATE

ENV = '''
import random


class Guess:
    """Guess a digit 0-2 in ``max_turns``; a wrong guess is told higher or lower."""

    system_prompt = None

    def __init__(self, max_turns=3, broken=None):
        self.max_turns, self.broken, self.said = max_turns, broken, []

    def reset(self, seed=None):
        if self.broken == "reset":
            raise ValueError("no board")
        self.target = random.Random(seed).randrange(3)
        return f"guess{seed % 10}:", {"suffix": "go"}

    def step(self, reply):
        self.said.append(reply)
        if self.broken == "arity":
            return "x", 0.0, False
        if self.broken == "nan":
            return "x", float("nan"), False, False, {}
        if reply[:1] == str(self.target):
            return "yes", 1.0, True, False, {}
        hint = "higher" if reply[:1].isdigit() and int(reply[:1]) < self.target else "lower"
        return hint, -0.25, False, False, {"prefix": "no, "}


def make(**options):
    return Guess(**options)
'''


@pytest.fixture
def game(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "guess.py").write_text(ENV, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def manifest(
    tiny: Path, name: str = "GRPO", environment: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    algorithm: dict[str, Any] = {
        "name": name, "batch_size": 2, "lr": 0.01, "temperature": 1.0, "max_output_tokens": 2,
        "gradient_checkpointing": False,
    }  # fmt: skip
    if name in ("GRPO", "GSPO", "CISPO"):
        algorithm["group_size"] = 2
    if name == "LLMPPO":
        algorithm["lr_actor"] = algorithm.pop("lr")
    environment = {"env_type": "multiturn", "entrypoint": "guess.py:make", "max_reward": 1.0,
                   "env_config": {"max_turns": 3}, **(environment or {})}  # fmt: skip
    content = {
        "algorithm": {**algorithm, **extra},
        "environment": environment,
        "training": {"max_steps": 4, "evo_steps": 1, "pop_size": 2, "eval_rows": 4},
        "mutation": {"rand_seed": 1, "probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "network": {"pretrained_model_name_or_path": str(tiny), "max_context_length": 48,
                    "lora_config": {"lora_r": 2, "lora_alpha": 4, "lora_dropout": 0.0,
                                    "target_modules": ["q_proj", "v_proj"]}},
    }  # fmt: skip
    return content


def _population(
    tiny: Path, size: int, name: str = "GRPO", environment: dict[str, Any] | None = None,
    context: int = 48, **extra: Any,
) -> tuple[list[Any], Any]:  # fmt: skip
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    registry = installed_registry()
    content = manifest(tiny, name, environment, **extra)
    content["network"]["max_context_length"] = context
    parsed = TrainingManifest.get_validated(content, registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    env.hold_out(4)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    members = setup.build_population(
        parsed, setup.algorithm_class(parsed, registry), env, context, size=size
    )
    return members, env


def _replies(script: list[str], *, vary: bool = False) -> Any:
    """A stand-in for generation that replies ``script[turn]`` (then the end token) to every
    transcript, the turn read from how many replies it already holds; with ``vary``, the
    ``k``-th copy of a transcript in one call replies ``script[turn + k]``."""

    def generate(model: Any, tokenizer: Any, prompts: Any, **options: Any) -> Any:
        rows, seen = [], {}
        for ids, mask in zip(prompts.ids, prompts.mask, strict=True):
            said = tokenizer.decode(ids[mask.bool()].tolist())
            turn = said.count("higher") + said.count("lower")
            copy = seen[said] = seen.get(said, -1) + 1
            turn = (turn + copy) % len(script) if vary else min(turn, len(script) - 1)
            reply = tokenizer(script[turn], add_special_tokens=False)
            rows.append(torch.tensor([*reply.input_ids, tokenizer.eos_token_id]))
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id
        padded = [torch.cat([r, torch.full((width - len(r),), pad)]) for r in rows]
        return text._completions(
            tokenizer, prompts, torch.cat([prompts.ids, torch.stack(padded)], 1)
        )

    return generate


# -- validation ----------------------------------------------------------------------------------


def test_multiturn_manifest_validates_and_trains_here(run, tiny: Path, game: Path) -> None:
    path = game / "m.yaml"
    path.write_text(yaml.safe_dump(manifest(tiny)), encoding="utf-8")
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "not on this machine" not in result.output


@pytest.mark.parametrize(
    ("name", "extra", "field", "words"),
    [
        ("GRPO", {"importance_sampling_level": "turn"}, "algorithm.importance_sampling_level",
         "one importance ratio per token or per episode"),
        ("GSPO", {"advantage_granularity": "turn"}, "algorithm.advantage_granularity",
         "one advantage"),
    ],
)  # fmt: skip
def test_settings_agile_cannot_train_are_refused_before_loading(
    run, tiny: Path, game: Path, name: str, extra: dict[str, Any], field: str, words: str
) -> None:
    path = game / "m.yaml"
    path.write_text(yaml.safe_dump(manifest(tiny, name, **extra)), encoding="utf-8")
    checked = run("validate", str(path))
    assert checked.exit_code == 0 and f"not on this machine: {field}" in checked.output
    result = run("train", str(path), "--run-dir", str(game / "run"))
    assert result.exit_code == 2
    assert field in result.output and words in result.output
    assert not (game / "run" / "checkpoints").exists()


def test_epochs_of_an_environment_without_rows_are_refused(run, tiny: Path, game: Path) -> None:
    content = manifest(tiny)
    content["training"].update(num_epochs=2, evo_epochs=1)
    path = game / "m.yaml"
    path.write_text(yaml.safe_dump(content), encoding="utf-8")
    checked = run("validate", str(path))
    assert "not on this machine: training.evo_epochs" in checked.output
    result = run("train", str(path), "--run-dir", str(game / "run"))
    assert result.exit_code == 2 and "episodes never end" in result.output


# -- transcripts ---------------------------------------------------------------------------------


def _chat_tokenizer(tiny: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def _play(tokenizer: Any, script: list[str], game: Path, *, chat: bool = True, **spec: Any) -> Any:
    from agile_llm.spec import LLMEnvSpec

    spec.setdefault("env_config", {"max_turns": 3})
    env_spec = LLMEnvSpec(env_type="multiturn", entrypoint="guess.py:make", max_reward=1.0,
                          **spec)  # fmt: skip
    data = multiturn.build(env_spec, 0, game)
    conversation = multiturn.Conversation(
        tokenizer, chat, data.strict_boundary,
        lambda prompt: tokenizer(prompt, add_special_tokens=False).input_ids,
    )  # fmt: skip
    stand_in = _replies(script)

    def generate(prompts: list[list[int]], owners: list[int]) -> Any:
        batch = text.prompt_batch(tokenizer, prompts, "cpu")
        return stand_in(None, tokenizer, batch)

    seeds = [(s, 0) for s in (3, 4, 5, 6)]
    return multiturn.play(data, seeds, conversation, generate, context=200, reply_room=4), data


#: A template that closes each turn with the end token the model generates (as Qwen's does
#: with ``<|im_end|>``): the boundary's copy of the token is dropped, the reply's kept.
CLOSING = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}"
    "{% if not (loop.last and m['role'] == 'assistant') %}</s>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.mark.parametrize(("template", "closed"), [(TEMPLATE, False), (CLOSING, True)])
def test_a_transcript_is_the_chat_templates_rendering_of_the_conversation(
    tiny: Path, game: Path, template: str, closed: bool
) -> None:
    """Token for token: the opening prompt, each reply with the end token it generated, the
    template's turn boundary and the environment's answer (its info prefix and suffix
    applied); only the replies' tokens are trained."""
    tokenizer = _chat_tokenizer(tiny)
    tokenizer.chat_template = template
    end = tokenizer.eos_token
    episodes, _ = _play(tokenizer, ["0", "2", "1"], game)
    for episode in episodes:
        messages = [dict(m) for m in episode.messages]
        assert messages[0] == {"role": "user", "content": f"guess{episode.seed % 10}:\ngo"}
        assert all(m["content"].startswith("no, ") for m in messages[2::2])
        if not closed:  # the template writes no end token: the generated one stays in
            messages = [{**m, "content": m["content"] + end} if m["role"] == "assistant" else m
                        for m in messages]  # fmt: skip
        rendered = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 continue_final_message=True)  # fmt: skip
        expected = tokenizer(rendered, add_special_tokens=False).input_ids
        assert episode.ids == expected + ([tokenizer.eos_token_id] if closed else [])
        trained = [t for t, turn in zip(episode.ids, episode.turn_of, strict=True) if turn >= 0]
        replies = [[*tokenizer(r, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
                   for r in episode.replies()]  # fmt: skip
        assert trained == [t for reply in replies for t in reply]
        target = random.Random(episode.seed).randrange(3)
        won = episode.replies()[-1][:1] == str(target)
        assert episode.rewards[-1] == (1.0 if won else -0.25)
        assert episode.turns == len(episode.replies()) <= 3


def test_without_a_chat_template_turns_are_joined_by_newlines(tiny: Path, game: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)  # the tiny model's has no template
    episodes, _ = _play(tokenizer, ["x"], game)  # never right: three turns
    episode = episodes[0]
    written = f"guess{episode.seed % 10}:\ngox</s>\nno, lowerx</s>\nno, lowerx</s>"
    assert episode.ids == tokenizer(written, add_special_tokens=False).input_ids
    assert episode.turns == 3


def test_a_template_that_cannot_mark_a_turn_is_refused_or_joined_by_newlines(
    tiny: Path, game: Path
) -> None:
    tokenizer = _chat_tokenizer(tiny)
    tokenizer.chat_template = "{{ messages[-1]['content'] }}"  # only the last message
    with pytest.raises(UsageError, match="strict_chat_template_boundary"):
        _play(tokenizer, ["0"], game)
    with pytest.warns(UserWarning, match="joined by newlines"):
        episodes, _ = _play(tokenizer, ["0"], game, strict_chat_template_boundary=False)
    assert any(e.turns > 1 for e in episodes)


@pytest.mark.parametrize(
    ("broken", "words"),
    [("reset", "reset() of the episode seeded 3, turn 0 raised ValueError: no board"),
     ("arity", "step gave ('x', 0.0, False)"), ("nan", "step gave nan")],
)  # fmt: skip
def test_an_environment_that_breaks_the_protocol_is_named(
    tiny: Path, game: Path, broken: str, words: str
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    with pytest.raises(TrainingError) as caught:
        _play(tokenizer, ["0"], game, env_config={"max_turns": 3, "broken": broken})
    assert "environment.entrypoint (guess.py:make)" in str(caught.value)
    assert words in str(caught.value)


def test_max_turns_is_read_from_the_environment_when_not_given(tiny: Path, game: Path) -> None:
    from agile_llm.spec import LLMEnvSpec

    spec = LLMEnvSpec(env_type="multiturn", entrypoint="guess.py:make", env_config={"max_turns": 5})
    assert multiturn.build(spec, 0, game).max_turns == 5
    (game / "bare.py").write_text("class E:\n    def reset(self, seed=None): ...\n"
                                  "    def step(self, a): ...\n")  # fmt: skip
    with pytest.raises(UsageError, match=r"environment\.max_turns"):
        multiturn.build(LLMEnvSpec(env_type="multiturn", entrypoint="bare.py:E"), 0, game)


def test_a_gem_game_is_made_by_gem_and_a_missing_gem_says_how_to_install_it(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for the gem-llm package's one entry point, ``gem.make(env_id)``."""
    from agile_llm.spec import LLMEnvSpec

    spec = LLMEnvSpec(env_type="multiturn", env_name="game:GuessTheNumber-v0-easy")
    monkeypatch.setitem(sys.modules, "gem", None)
    with pytest.raises(UsageError, match="needs the gem-llm package") as caught:
        multiturn.build(spec, 0, game)
    assert "pip install 'agile-cli[gem]'" in str(caught.value.hint)
    made: list[str] = []
    sys.path.insert(0, str(game))
    try:
        import guess
    finally:
        sys.path.remove(str(game))
    fake = types.ModuleType("gem")
    fake.make = lambda name: made.append(name) or guess.Guess(max_turns=4)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gem", fake)
    data = multiturn.build(spec, 0, game)
    assert data.max_turns == 4 and made == ["game:GuessTheNumber-v0-easy"]
    assert "GuessTheNumber" in data.label


# -- learning ------------------------------------------------------------------------------------


def test_turn_advantages_standardise_each_turns_return_to_go_within_the_group() -> None:
    episodes = [multiturn.Episode(seed=0, owner=0, rewards=r) for r in
                ([0.0, 1.0], [0.0, 0.0, 0.0], [1.0], [0.5])]  # fmt: skip
    fallback = torch.tensor([0.7, -0.7, 0.0, 0.0])
    turns = multiturn.turn_advantages(episodes, group=2, fallback=fallback, eps=0.0)
    assert turns[0, 0] == pytest.approx(0.5 / float(torch.tensor([1.0, 0.0]).std()))
    assert turns[0, 0] == pytest.approx(-turns[1, 0])  # turn 0: returns-to-go 1 and 0
    assert turns[0, 1] == pytest.approx(-turns[1, 1])  # turn 1: 1 and 0
    assert turns[1, 2] == pytest.approx(-0.7)  # turn 2: alone in its group, its fallback
    assert turns[0, 2] == 0  # never reached
    assert turns[2, 0] == pytest.approx(0.25 / float(torch.tensor([1, 0.5]).std()))
    per_token = multiturn.per_token(torch.tensor([[-1, 0, 0, -1, 1, -1]]), turns[:1])
    assert per_token.tolist()[0] == pytest.approx([float(turns[0, 0])] * 2 + [0.0]
                                                  + [float(turns[0, 1]), 0.0])  # fmt: skip


def test_grpo_trains_on_episodes_and_scores_greedy_play(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members, env = _population(tiny, 1, advantage_granularity="turn")
    sampled = _replies(["0", "1", "2"], vary=True)
    greedy = text.generate
    monkeypatch.setattr(text, "generate", lambda *a, **k: (sampled if k.get("sampling")
                                                            else greedy)(*a, **k))  # fmt: skip
    member = members[0]
    before = copy.deepcopy(member.shared.adapters.weights(member.adapter))
    loss = member.train_step(env.rows_at(0, 2), env)
    assert member.last_rewards is not None and member.last_rewards.shape == (4,)
    after = member.shared.adapters.weights(member.adapter)
    assert sorted(member.last_rewards.tolist()) != [member.last_rewards[0].item()] * 4
    assert loss != 0 and any(not torch.equal(before[k], after[k]) for k in before)
    scores = member.score(env.test, env)
    assert set(scores.metrics) >= {"mean return", "success rate", "mean turns"}
    assert scores.fitness == scores.metrics["mean return"]


def test_llmppo_trains_on_episodes_each_turns_reward_on_its_last_token(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With gamma and lambda 1, no KL and values 0, a token's return is the rewards of its
    turn and the turns after it: each turn's reward sits on its last token, and GAE runs
    across the environment's answers."""
    from agile_llm.algorithms import play_episodes

    members, env = _population(tiny, 1, name="LLMPPO", gamma=1.0, gae_lambda=1.0, beta=0.0,
                               whiten_advantages=False)  # fmt: skip
    monkeypatch.setattr(text, "generate", _replies(["0", "1", "2"]))
    member = members[0]
    episodes = play_episodes(members, [env.rows_at(0, 2)], env, explore=True)[0]
    batch = multiturn.transcripts(episodes, int(member.tokenizer.pad_token_id), member.device)
    counted = batch.labels[:, 1:].ne(-100).float()
    zeros = torch.zeros_like(counted)
    passes = {"old": zeros, "reference": zeros, "values": zeros, "counted": counted}
    rollout = member.episodes_scored(episodes, batch, passes)
    turn = batch.turn[:, 1:]
    assert max(len(e.rewards) for e in episodes) >= 2  # returns that cross an answer
    for row, episode in enumerate(episodes):
        for number in range(len(episode.rewards)):
            expected = sum(episode.rewards[number:])
            got = rollout["returns"][row][turn[row] == number]
            assert torch.allclose(got, torch.full_like(got, expected))
    before = copy.deepcopy(member.shared.adapters.weights(member.adapter))
    loss = member.train_step(env.rows_at(0, 2), env)
    after = member.shared.adapters.weights(member.adapter)
    assert loss != 0 and any(not torch.equal(before[k], after[k]) for k in before)


def test_scores_together_equal_the_scores_one_by_one(tiny: Path, game: Path) -> None:
    members, env = _population(tiny, 3)
    noise = torch.Generator().manual_seed(3)
    for member in members:
        with torch.no_grad():
            for weight in member.trained_parameters():
                weight.add_(0.5 * torch.randn(weight.shape, generator=noise))
    together = type(members[0]).score_group(members, env.test, env)
    alone = [member.score(env.test, env) for member in members]
    for joint, own in zip(together, alone, strict=True):
        assert joint.metrics == own.metrics and joint.samples == own.samples


def test_steps_together_equal_the_steps_one_by_one(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With replies that depend on the transcript only (seeds cannot match between one call
    for all and one call each), and LLMREINFORCE, whose baseline is the batch's mean."""
    monkeypatch.setattr(text, "generate", _replies(["0", "1", "2"]))
    members, env = _population(tiny, 2, "LLMREINFORCE")
    rows = [env.rows_at(0, 3), env.rows_at(3, 3)]
    start = [copy.deepcopy(m.state_dict()) for m in members]
    joint = type(members[0]).train_group(members, rows, env)
    stacked = [m.shared.adapters.weights(m.adapter) for m in members]
    for member, state in zip(members, start, strict=True):
        member.load_state_dict(state)
    alone = [m.train_step(r, env) for m, r in zip(members, rows, strict=True)]
    assert joint == pytest.approx(alone, rel=1e-4, abs=1e-7)
    for member, weights in zip(members, stacked, strict=True):
        own = member.shared.adapters.weights(member.adapter)
        for key in own:
            torch.testing.assert_close(weights[key], own[key], rtol=1e-4, atol=1e-6)


def test_train_then_evaluate(run, tiny: Path, game: Path) -> None:
    path = game / "m.yaml"
    path.write_text(yaml.safe_dump(manifest(tiny)), encoding="utf-8")
    result = run("train", str(path), "--run-dir", str(game / "run"))
    assert result.exit_code == 0, result.output
    shown = run("evaluate", str(game / "run"))
    assert shown.exit_code == 0, shown.output
    assert "success rate:" in shown.output and "held-out" in shown.output


PROCESSORS = """
def observe(payload):
    return f"[{payload['reward']}] {payload['prompt']}"


def act(text):
    return "x" + text
"""


def test_processors_render_observations_and_rewrite_actions(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agile_llm.algorithms import play_episodes

    (game / "procs.py").write_text(PROCESSORS, encoding="utf-8")
    processors = {"observation_processor": "procs.py:observe", "action_processor": "procs.py:act"}
    members, env = _population(tiny, 1, environment=processors)
    monkeypatch.setattr(text, "generate", _replies(["0", "1", "2"]))
    (episode,) = play_episodes(members, [env.rows_at(0, 1)], env, explore=False)[0]
    users = [m["content"] for m in episode.messages if m["role"] == "user"]
    assert users[0].startswith("[None] guess") and "go" not in users[0]  # no info suffix
    assert users[1:] == ["[-0.25] lower"] * (len(users) - 1)  # "x0" is no digit: never right
    assert episode.rewards == [-0.25] * 3


TOOL_ENV = '''
class Calc:
    """Make 5 with the tool ``add``, which adds its ``b`` to 3."""

    tools = [{"type": "function", "function": {
        "name": "add", "description": "3 plus b",
        "parameters": {"type": "object", "properties": {"b": {"type": "integer"}}}}}]

    def reset(self, seed=None):
        return "make 5", {}

    def step(self, text):
        raise AssertionError("an environment of tools is run by call_tool")

    def call_tool(self, name, arguments):
        total = 3 + int(arguments["b"])
        return f"={total}", float(total == 5), total == 5, False, {}


def make():
    return Calc()
'''
CALL = '<tool_call>{"name": "add", "arguments": {"b": %d}}</tool_call>'


def _scripted(script: list[str]) -> Any:
    """A stand-in for generation whose ``k``-th call replies ``script[k]`` to every prompt."""
    calls = iter(script)

    def generate(model: Any, tokenizer: Any, prompts: Any, **options: Any) -> Any:
        reply = tokenizer(next(calls), add_special_tokens=False).input_ids
        row = torch.tensor([*reply, tokenizer.eos_token_id])
        rows = torch.stack([row] * prompts.ids.shape[0])
        return text._completions(tokenizer, prompts, torch.cat([prompts.ids, rows], 1))

    return generate


def _tool_episode(tiny: Path, game: Path, script: list[str], **environment: Any) -> Any:
    from agile_llm.algorithms import play_episodes

    (game / "calc.py").write_text(TOOL_ENV, encoding="utf-8")
    environment = {"entrypoint": "calc.py:make", "env_config": None, "max_turns": 3,
                   **environment}  # fmt: skip
    members, env = _population(tiny, 1, environment=environment, context=128,
                               max_output_tokens=56)  # fmt: skip
    generate = _scripted(script)
    original = text.generate
    text.generate = generate  # type: ignore[assignment]
    try:
        (episode,) = play_episodes(members, [env.rows_at(0, 1)], env, explore=False)[0]
    finally:
        text.generate = original
    return episode


def test_an_environment_of_tools_runs_the_calls_a_turn_makes(tiny: Path, game: Path) -> None:
    """Calls in the Qwen format (the tiny model is a Qwen2), run by call_tool, their results
    fed back as tool messages."""
    episode = _tool_episode(tiny, game, [CALL % 1, CALL % 2])
    assert episode.rewards == [0.0, 1.0] and episode.done
    assert [(m["role"], m.get("name"), m["content"]) for m in episode.messages[2:3]] == [
        ("tool", "add", "=4")
    ]


def test_a_turn_without_a_call_scores_min_reward_and_is_told_why(tiny: Path, game: Path) -> None:
    episode = _tool_episode(tiny, game, ["no call", CALL % 2], min_reward=-1.0)
    assert episode.rewards == [-1.0, 1.0]
    feedback = episode.messages[2]
    assert feedback["role"] == "tool" and feedback["name"] == "unknown"
    assert feedback["content"].startswith("Error: No tool call")


def test_answer_tool_takes_the_prose_of_a_turn_without_a_call(tiny: Path, game: Path) -> None:
    """With answer_tool, prose goes to that tool as its action_field argument."""
    episode = _tool_episode(tiny, game, ["2"], answer_tool="add", action_field="b")
    assert episode.rewards == [1.0] and episode.done  # add(b="2")


def test_the_answer_tool_takes_the_text_without_special_tokens(tiny: Path, game: Path) -> None:
    """As 2.58 sends it: the reply decoded without its special tokens (a sampled <pad> in the
    answer is not part of it), after any </think>."""
    episode = _tool_episode(tiny, game, ["2<pad>"], answer_tool="add", action_field="b")
    assert episode.rewards == [1.0] and episode.done
    thought = _tool_episode(tiny, game, ["maybe 1</think>2"], answer_tool="add", action_field="b")
    assert thought.rewards == [1.0]


def test_the_calculator_example_is_won_through_its_tool_as_its_demonstrations_show(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's tool-calling example: a call copied from the sum, then the tool's result
    copied as the answer, wins; and the SFT demonstrations are token for token the
    transcripts agile plays, so what SFT teaches is what the game asks."""
    import json
    import sys

    from agile_llm.algorithms import play_episodes

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root / "configs" / "training" / "llm"))
    calculator = __import__("calculator_env")
    entrypoint = "configs/training/llm/calculator_env.py:Calculator"
    environment = {"env_type": "rollout", "entrypoint": entrypoint, "max_turns": 2,
                   "answer_tool": "answer", "env_config": None}  # fmt: skip
    members, env = _population(tiny, 1, environment=environment, context=160,
                               max_output_tokens=72)  # fmt: skip
    seed = env.rows_at(0, 1)[0]["seed"]
    game = calculator.Calculator()
    opening, _ = game.reset(seed)
    call, result = calculator.call_text(game.a, game.b), calculator.result_text(game.a + game.b)
    original = text.generate
    text.generate = _scripted([call, result])  # type: ignore[assignment]
    try:
        (episode,) = play_episodes(members, [env.rows_at(0, 1)], env, explore=False)[0]
    finally:
        text.generate = original
    assert episode.rewards == [0.0, 1.0] and episode.messages[2]["content"] == result
    shipped = root / "configs" / "training" / "llm" / "calculator_sft.jsonl"
    rows = [json.loads(line) for line in shipped.read_text().splitlines()]
    assert rows == calculator.demonstrations(len(rows) // 2, seed=7)  # the script's output
    del sys.modules["calculator_env"]
    # A turn-two demonstration is the transcript up to the answer; SFT adds the end token.
    tokenizer = members[0].tokenizer
    demonstration = {"prompt": f"{opening}{call}</s>\n{result}", "response": result}
    assert rows[1].keys() == demonstration.keys() and rows[1]["prompt"].count("</s>\n") == 1
    row = tokenizer(demonstration["prompt"] + demonstration["response"], add_special_tokens=False)
    assert episode.ids == [*row.input_ids, tokenizer.eos_token_id]


def test_asynchronous_rollouts_play_episodes_with_the_copy_ahead(
    run, tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of the model plays the next iteration's episodes while the population
    learns; their log-probabilities under the copy are the ratio's denominator."""
    from agile_llm.algorithms import GRPO, Sampled

    samples: list[Sampled] = []
    original = GRPO.sample.__func__  # type: ignore[attr-defined]

    def sampled(cls: Any, members: Any, rows: Any, data: Any, engine: Any = None) -> Sampled:
        samples.append(original(cls, members, rows, data, engine))
        return samples[-1]

    monkeypatch.setattr(GRPO, "sample", classmethod(sampled))
    content = manifest(tiny)
    content["training"].update(max_steps=6, evo_steps=3, rollout_mode="async")
    content["replay_buffer"] = {"kind": "llm", "max_rollout_version_lag": 1}
    path = game / "m.yaml"
    path.write_text(yaml.safe_dump(content), encoding="utf-8")
    checked = run("validate", str(path))
    assert "not on this machine" not in checked.output
    result = run("train", str(path), "--quiet", "--run-dir", str(game / "run"))
    assert result.exit_code == 0, result.output
    assert len(samples) == 3  # one per iteration (3 of 2 seeds each, one generation)
    for ahead in samples:
        assert ahead.episodes is not None and ahead.old is not None and not ahead.done
        for own, old in zip(ahead.episodes, ahead.old, strict=True):
            width = max(len(e.ids) for e in own)
            assert old.shape == (len(own), width - 1)  # one per transcript token but the first
