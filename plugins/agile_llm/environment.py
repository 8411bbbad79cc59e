"""The ``llm`` environment: a dataset of prompts, split into training and test rows.

:class:`LLMBuilder` reads and splits the rows (numpy only; no torch, no transformers);
:func:`prepare`, the paradigm's wrapper, settles the environment type, checks that the rows
have the columns that type needs and, for ``reasoning``, imports the user's rubric.

The training rows are visited as a stream: sample position ``p`` is row ``perm(epoch)[p % n]``
of the training split, where ``epoch = p // n`` and each epoch's permutation is drawn from
``(seed, epoch)``. The stream holds no state, so two members that have trained on the same
number of samples see the same rows, and a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agile_cli import EnvironmentBuilder, UsageError
from agile_llm import data, multiturn
from agile_llm.multiturn import MultiTurnData
from agile_llm.rewards import RewardFunction, load_reward_function
from agile_llm.spec import LLMEnvSpec

Row = dict[str, Any]
Message = dict[str, str]

#: One text in, one text out. Fixed arguments, so the repr checkpoints store never changes.
TEXT_SPACE_LENGTH = 1 << 20
#: A placeholder is ``{column}``; ``{{`` and ``}}`` are literal braces; any other brace
#: (``\\boxed{}``, JSON) is kept as written.
_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}")
_PREFERENCE_COLUMNS = ("chosen", "rejected")
_EPOCHS_CACHED = 4


class PromptData:
    """Prompt rows split into ``train`` and ``test``, with what the runner needs to read them.

    :param spec: the validated ``environment`` section.
    :param train: the training rows.
    :param test: the held-out rows.
    :param seed: seeds the order of the training stream.
    """

    num_envs = 1

    def __init__(self, spec: LLMEnvSpec, train: list[Row], test: list[Row], seed: int) -> None:
        self.name = spec.name
        self.declared_env_type: str | None = spec.regime
        self.env_type: str | None = None  # set by prepare()
        self.train, self.test, self.seed = train, test, seed
        #: Held-out scoring (the runner sets them from training): sampled completions per
        #: row (0: one greedy each), and whether greedy scores are reported beside them.
        self.eval_samples, self.eval_greedy = 0, True
        self.drop_uninformative = False  # the replay buffer's drop_uninformative_groups
        self.turns = template_turns(spec.prompt_template)
        self.declared_chat: bool | None = spec.apply_chat_template
        self.response_column = spec.response_column
        self.max_reward = spec.max_reward
        self.rubric_file_path, self.rubric_name = spec.rubric_file_path, spec.rubric_name
        self.reward_timeout: float = spec.reward_timeout
        self.reward_function: RewardFunction | None = None
        self.single_observation_space = gym.spaces.Text(TEXT_SPACE_LENGTH, min_length=0)
        self.single_action_space = gym.spaces.Text(TEXT_SPACE_LENGTH, min_length=0)
        self._orders: dict[int, np.ndarray] = {}

    def close(self) -> None:
        """Nothing to release: the rows are plain Python objects."""

    # The training stream

    def rows_at(self, offset: int, count: int) -> list[Row]:
        """The training rows at sample positions ``offset`` .. ``offset + count - 1``."""
        size = len(self.train)
        return [self.train[self._order(p // size)[p % size]] for p in range(offset, offset + count)]

    def epochs_done(self, offset: int) -> float:
        """How many passes over the training rows ``offset`` samples make."""
        return offset / len(self.train)

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            if len(self._orders) >= _EPOCHS_CACHED:
                self._orders.pop(next(iter(self._orders)))
            rng = np.random.default_rng([self.seed, epoch])
            self._orders[epoch] = rng.permutation(len(self.train))
        return self._orders[epoch]

    # Reading one row

    def messages(self, row: Row) -> list[Message]:
        """The prompt of ``row`` as chat turns ``{"role", "content"}``: the prompt template's
        turns with their placeholders filled from ``row``, else one user turn holding
        ``row["prompt"]``. The last turn may be an assistant turn, a prefix the completion
        continues."""
        if not self.turns:
            return [{"role": "user", "content": str(row["prompt"])}]
        return [{"role": role, "content": fill(text, row, key)} for key, role, text in self.turns]

    @property
    def chat_prompts(self) -> bool:
        """Whether prompts are rendered through the tokenizer's chat template (else read as
        written): ``apply_chat_template``, by default yes for reasoning and for a prompt
        template, no for sft and preference rows of a plain prompt column."""
        if self.declared_chat is not None:
            return self.declared_chat
        return bool(self.turns) or self.env_type not in ("sft", "preference")

    def response(self, row: Row) -> str:
        """The target completion of an ``sft`` row."""
        return str(row[self.response_column])

    def chosen(self, row: Row) -> str:
        """The preferred completion of a ``preference`` row."""
        return str(row["chosen"])

    def rejected(self, row: Row) -> str:
        """The dispreferred completion of a ``preference`` row."""
        return str(row["rejected"])

    def answer(self, row: Row) -> Any:
        """The reference answer of a ``reasoning`` row, as the data holds it."""
        return row["answer"]

    # Rewards (reasoning)

    def reward(self, completions: list[str], rows: list[Row], prompts: list[str]) -> np.ndarray:
        """The reward of each completion, by the user's reward function.

        The function gets ``(completion, answer, question)``; the question is the row's
        ``question`` column when it has one (as in AgileRL, whose reasoning data always has
        one), else the prompt text the runner rendered.

        :param completions: the generated texts, one per row of ``rows``.
        :param rows: the row each completion answers (repeated for a group of completions).
        :param prompts: the prompt text rendered for each of ``rows``.
        """
        if self.reward_function is None:
            raise RuntimeError("reward() needs a reasoning environment that prepare() finished")
        answers = [self.answer(row) for row in rows]
        questions = [
            str(row["question"]) if "question" in row else prompt
            for row, prompt in zip(rows, prompts, strict=True)
        ]
        return self.reward_function(completions, answers, questions)

    def accuracy(self, rewards: np.ndarray) -> float | None:
        """The fraction of ``rewards`` equal to ``max_reward`` (None without one)."""
        if self.max_reward is None or np.size(rewards) == 0:
            return None
        hits = np.isclose(np.asarray(rewards, dtype=np.float64), self.max_reward, rtol=0, atol=1e-9)
        return float(np.mean(hits))

    # Checks

    def required_columns(self, env_type: str) -> list[str]:
        """The columns ``env_type`` reads from every row."""
        prompt = sorted({name for _, _, text in self.turns for name in placeholders(text)})
        needed = prompt or ["prompt"]
        if env_type == "sft":
            needed.append(self.response_column)
        elif env_type == "preference":
            needed.extend(_PREFERENCE_COLUMNS)
        elif env_type == "reasoning":
            needed.append("answer")
        return list(dict.fromkeys(needed))

    def check_columns(self, env_type: str) -> None:
        """Refuse rows that lack a column ``env_type`` needs."""
        have = set(self.train[0])
        missing = [name for name in self.required_columns(env_type) if name not in have]
        if missing:
            raise UsageError(
                f"environment.dataset: {env_type} data needs the column(s) {missing}; "
                f"the data has {sorted(have)}",
                "rename columns with environment.columns (source column -> name needed), "
                "or change the prompt_template placeholders",
            )


def template_turns(template: dict[str, str] | None) -> list[tuple[str, str, str]]:
    """The prompt template as ``(key, role, text)`` turns in order; a key's role is the text
    before its first ``_`` (``system_0`` -> ``system``)."""
    return [(key, key.split("_", 1)[0], text) for key, text in (template or {}).items()]


def placeholders(text: str) -> list[str]:
    """The column names ``text``'s ``{column}`` placeholders name."""
    return [match.group(1) for match in _FIELD.finditer(text) if match.group(1)]


def fill(text: str, row: Row, key: str) -> str:
    """``text`` with each ``{column}`` replaced by ``row[column]``."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)[0]
        if name not in row:
            raise UsageError(
                f"environment.prompt_template.{key}: no column {name!r} for the placeholder "
                f"{{{name}}}; the rows have {sorted(row)}",
                "write {{ and }} for literal braces, or rename columns with environment.columns",
            )
        return str(row[name])

    return _FIELD.sub(value, text)


class LLMBuilder(EnvironmentBuilder[LLMEnvSpec]):
    """Builds :class:`PromptData` from the ``environment`` section's dataset."""

    def build(self, spec: LLMEnvSpec, *, seed: int | None = None) -> PromptData | MultiTurnData:
        """Read, rename and split the rows; the split's shuffle mixes ``seed`` with the
        training fraction (so changing one changes the split). A multi-turn environment is
        made by its factory instead (:mod:`agile_llm.multiturn`)."""
        if spec.regime == "multiturn":
            return multiturn.build(spec, seed, Path.cwd())
        if not spec.named_dataset:
            raise UsageError("environment.dataset: required", "name a data file or a hub id")
        rows = data.rename(data.load_rows(spec.named_dataset), spec.columns)
        base = 0 if seed is None else seed
        mixed = [base, round(spec.train_test_split * 1_000_000)]
        split_seed = int(np.random.SeedSequence(mixed).generate_state(1)[0])
        train, test = data.split(rows, spec.train_test_split, split_seed)
        return PromptData(spec, train, test, base)


def prepare(env: PromptData | MultiTurnData, manifest: Any) -> PromptData | MultiTurnData:
    """Finish ``env`` for the manifest's algorithm: settle its type (the environment's, else
    the algorithm's), check its columns and, for ``reasoning``, import the reward function
    (a relative path is relative to the working directory)."""
    if isinstance(env, MultiTurnData) or env.env_type is not None:
        return env
    env_type = env.declared_env_type or manifest.algorithm.env_type
    env.check_columns(env_type)
    if env_type == "reasoning":
        if not (env.rubric_file_path and env.rubric_name):
            raise UsageError(
                "environment.rubric_file_path: training a rollout over dataset rows locally "
                "needs the rubric that scores its completions",
                "name the Python file (rubric_file_path) and its rubric or reward function "
                "(rubric_name)",
            )
        path = str(Path.cwd() / env.rubric_file_path)
        env.reward_function = load_reward_function(path, env.rubric_name, env.reward_timeout)
    env.env_type = env_type
    return env
