"""Multi-turn environments: an episode is a conversation in which the model acts and the
environment answers and rewards, for several turns.

An environment is any object with AgileRL's (and GEM's) text protocol:

- ``reset(seed=None) -> (observation, info)``: the opening message;
- ``step(action) -> (observation, reward, terminated, truncated, info)``: the model's reply in,
  the environment's answer and the turn's reward out;
- optionally ``max_turns`` (read when ``environment.max_turns`` is not given) and
  ``system_prompt``; ``info`` may hold a ``prefix`` and a ``suffix`` to frame the next
  observation, as GEM's games do.

``environment.entrypoint`` names the environment: with ``environment.factory`` the id it is
made from (``factory: gem:make`` on ``entrypoint: game:GuessTheNumber-v0-easy``, a GEM game from
the ``gem-llm`` package; the August form's ``env_name``), else your own callable (``FILE.py:NAME``
or ``module:NAME``); either is called with ``environment.env_config`` as keyword arguments.

A *transcript* is the token ids of the whole conversation: the opening prompt, then each turn's
generated tokens (the only ones trained) followed by the boundary the chat template writes
between the model's turn and the environment's next message. Without a chat template (or with
``apply_chat_template: false``) the messages are read as written, one line each.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from agile_cli import TrainingError, UsageError
from agile_cli.helpers import printable, resolve_reference
from agile_llm import templates, text, tools
from agile_llm.envspec import listed_packages
from agile_llm.messages import error_detail
from agile_llm.rewards import Bound, RewardTimeout, as_number

if TYPE_CHECKING:
    import torch

    from agile_llm.spec import LLMEnvSpec
    from agile_llm.text import Completions

Row = dict[str, Any]
Message = dict[str, str]
#: Held-out episodes each evaluation plays when ``training.eval_rows`` does not say.
EVAL_EPISODES = 32
#: A text no template writes, standing for a turn's content while the boundary is found.
_SENTINEL = "\x00agile-turn\x00"
_SHOWN = 120


class MultiTurnData:
    """A multi-turn environment as the LLM runner reads it: training episodes as a stream of
    seeds (``rows_at``), held-out episodes (``test``), and the factory that makes each one.

    :param spec: the validated ``environment`` section.
    :param factory: makes one new environment.
    :param label: how messages name the environment (``env_name`` or ``entrypoint``).
    :param seed: the run's seed; episode ``p`` of the training stream is seeded from it.
    :param max_turns: turns an episode may take at most.
    """

    num_envs = 1
    env_type = "multiturn"

    def __init__(
        self, spec: LLMEnvSpec, factory: Callable[[], Any], label: str, seed: int, max_turns: int
    ) -> None:
        self.name = spec.name
        self.factory, self.label, self.seed = factory, label, seed
        self.max_turns = max_turns
        self.max_reward = spec.max_reward
        self.declared_chat: bool | None = spec.apply_chat_template
        self.strict_boundary = spec.strict_chat_template_boundary
        self.timeout: float = spec.reward_timeout
        #: Tool calls: the tool a turn's prose goes to without a call, the argument it is in,
        #: and the reward of a turn that runs nothing.
        self.answer_tool, self.action_field = spec.answer_tool, spec.action_field or "message"
        self.min_reward = float(spec.min_reward or 0.0)
        #: ``observation_processor`` and ``action_processor``, resolved (None: not given).
        self.observe: Callable[[dict[str, Any]], Any] | None = None
        self.act: Callable[[str], Any] | None = None
        self.train: list[Row] = []  # no data: the stream of seeds never ends
        #: Held-out scoring (the runner sets them from training): sampled completions per
        #: row (0: one greedy each), and whether greedy scores are reported beside them.
        self.eval_samples, self.eval_greedy = 0, True
        self.drop_uninformative = False  # the replay buffer's drop_uninformative_groups
        self.noted: set[str] = set()  # the kinds of text the environment gave that were mended
        self.test: list[Row] = []
        self.single_observation_space = gym.spaces.Text(1 << 20, min_length=0)
        self.single_action_space = gym.spaces.Text(1 << 20, min_length=0)

    def hold_out(self, episodes: int) -> None:
        """Set the held-out episodes: ``episodes`` seeds, the same at every evaluation."""
        self.test = [{"seed": _seed(self.seed, 1, i)} for i in range(episodes)]

    def rows_at(self, offset: int, count: int) -> list[Row]:
        """The training episodes at stream positions ``offset`` .. ``offset + count - 1``."""
        return [{"seed": _seed(self.seed, 0, p)} for p in range(offset, offset + count)]

    @property
    def chat_prompts(self) -> bool:
        """Whether the conversation is rendered by the chat template (by default, yes)."""
        return True if self.declared_chat is None else self.declared_chat

    def accuracy(self, returns: np.ndarray) -> float | None:
        """The share of episodes whose return reached ``max_reward`` (None without one)."""
        if self.max_reward is None or np.size(returns) == 0:
            return None
        return float(np.mean(np.asarray(returns, dtype=np.float64) >= self.max_reward - 1e-9))

    def close(self) -> None:
        """Nothing held: each episode's environment is closed when it ends."""


def _seed(base: int, stream: int, position: int) -> int:
    return int(np.random.SeedSequence([base, stream, position]).generate_state(1)[0])


def build(spec: LLMEnvSpec, seed: int | None, base: Path) -> MultiTurnData:
    """The environment ``spec`` names, its ``max_turns`` read from one instance when not given.

    :param base: where a relative ``entrypoint`` file is found (the working directory).
    :raises UsageError: the GEM package is missing, the factory cannot be found, or the
        environment declares no ``max_turns`` and the manifest gives none.
    """
    factory, label = _factory(spec, base)
    max_turns = spec.max_turns
    if max_turns is None:
        probe = _made(factory, label)
        max_turns = getattr(probe, "max_turns", None)
        _close(probe)
        if not isinstance(max_turns, int) or max_turns < 1:
            raise UsageError(
                f"environment.max_turns: not given, and {label} declares no max_turns "
                f"(it has {printable(repr(max_turns))})",
                "set environment.max_turns, the turns an episode may take",
            )
    data = MultiTurnData(spec, factory, label, 0 if seed is None else seed, max_turns)
    if spec.env_url is not None:
        data.timeout = remote_bound(spec)
    for key, name in (("observation_processor", "observe"), ("action_processor", "act")):
        reference = getattr(spec, key)
        if reference is not None:
            setattr(data, name, resolve_reference(reference, base, f"environment.{key}"))
    return data


def _factory(spec: LLMEnvSpec, base: Path) -> tuple[Callable[[], Any], str]:
    """What makes one episode's environment: a session with an OpenEnv server of
    ``env_url`` (its replicas in turn), ``factory(entrypoint, **env_config)`` (e.g.
    ``gem:make`` on a GEM game's id), else the ``entrypoint`` callable with ``env_config``."""
    if spec.env_url is not None:
        return _remote(spec)
    assert spec.entrypoint is not None  # the other source trained here
    options = dict(spec.env_config or {})
    prompt = options.pop("system_prompt", None)  # set on the environment made, as 2.58 does
    entrypoint = spec.entrypoint
    if spec.factory is None:
        target = resolve_reference(entrypoint, base, "environment.entrypoint")
        make, label = (lambda: target(**options)), f"environment.entrypoint ({entrypoint})"
    else:
        maker = _maker(spec, base)
        make = lambda: maker(entrypoint, **options)  # noqa: E731
        label = f"environment.factory ({spec.factory} of {entrypoint})"
    if prompt is None:
        return make, label

    def prompted() -> Any:
        env = make()
        with contextlib.suppress(AttributeError):  # an object that refuses it keeps its own
            env.system_prompt = prompt
        return env

    return prompted, label


def _remote(spec: LLMEnvSpec) -> tuple[Callable[[], Any], str]:
    """Sessions with the OpenEnv server(s) of ``env_url`` (:mod:`agile_llm.remote`)."""
    from agile_llm.remote import replica_factory, shown_url

    urls = [spec.env_url] if isinstance(spec.env_url, str) else list(spec.env_url or [])
    make = replica_factory(urls, max_turns=spec.max_turns,
                           request_timeout_s=spec.request_timeout_s,
                           action_field=spec.action_field,
                           observation_field=spec.observation_field,
                           answer_tool=spec.answer_tool)  # fmt: skip
    shown = ", ".join(shown_url(url) for url in urls)
    return make, f"environment.env_url ({shown})"


def remote_bound(spec: LLMEnvSpec) -> float:
    """Seconds one call of a remote environment may take in all: its reset's tries at the
    client's bound on a message each (a day where it has none), at least ``reward_timeout``."""
    from agile_llm.remote import RESET_ATTEMPTS, message_timeout

    each = message_timeout(spec.request_timeout_s) or 86_400.0
    return max(spec.reward_timeout, each * RESET_ATTEMPTS + 10.0)


def _maker(spec: LLMEnvSpec, base: Path) -> Callable[..., Any]:
    """The ``factory`` callable, or an error naming the package to install for it."""
    assert spec.factory is not None
    module = spec.factory.partition(":")[0]
    if not module.endswith(".py") and not _importable(module.split(".")[0]):
        packages = listed_packages(spec.env_packages or {})
        wanted = "gem-llm" if module == "gem" else " ".join(map(str, packages or [module]))
        raise UsageError(
            f"environment.factory: {spec.factory} needs the {wanted} package, which is not "
            "installed",
            f"pip install {wanted}" + (" (or pip install 'agile-cli[gem]')" if module == "gem"
                                       else ""),
        )  # fmt: skip
    return resolve_reference(spec.factory, base, "environment.factory")


def _importable(top: str) -> bool:
    """Whether the package ``top`` imports (an error inside it is its own to report)."""
    try:
        importlib.import_module(top)
    except ImportError as error:
        if error.name == top:
            return False
    return True


def _made(factory: Callable[[], Any], label: str) -> Any:
    try:
        env = factory()
    except Exception as error:
        raise TrainingError(
            f"{label} could not make an environment: {type(error).__name__}: {error_detail(error)}",
            "check the factory and environment.env_config",
        ) from None
    # An environment of tools is stepped by its call_tool; one of text by its step.
    offered = getattr(env, "tools", None)
    tooled = isinstance(offered, list) and bool(offered)
    stepper = "call_tool" if tooled and callable(getattr(env, "call_tool", None)) else "step"
    for method in ("reset", stepper):
        if not callable(getattr(env, method, None)):
            raise TrainingError(
                f"{label} made {printable(type(env).__name__)}, which has no {method}() method",
                "return an object with reset(seed) -> (text, info) and "
                "step(text) -> (text, reward, terminated, truncated, info)",
            )
    return env


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):  # an episode is over either way; closing is the environment's affair
        with contextlib.suppress(Exception):
            close()


# -- episodes ------------------------------------------------------------------------------------


@dataclass
class Episode:
    """One conversation: its transcript's token ids, which of them the model generated (and
    in which turn), and each turn's reward."""

    seed: int
    owner: int  # the member that plays it
    env: Any = None
    ids: list[int] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)  # per token: its turn, -1 if not generated
    rewards: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tools: list[Any] | None = None  # the schemas of the tools offered; None: a text episode
    done: bool = False
    cut: bool = False  # ended because the context could not hold another turn

    @property
    def turns(self) -> int:
        return len(self.rewards)

    @property
    def total(self) -> float:
        return float(sum(self.rewards))

    def replies(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "assistant"]


class Conversation:
    """Renders a conversation's messages as token ids: the opening prompt and, after each of
    the model's turns, the boundary and the environment's next message.

    :param encode: text -> token ids of a prompt (as the member tokenises its prompts).
    :param model_type: the model's ``config.model_type``, which names its tool-call format.
    """

    def __init__(
        self, tokenizer: Any, chat: bool, strict: bool, encode: Callable[[str], list[int]],
        model_type: str | None = None,
    ) -> None:  # fmt: skip
        self.tokenizer = tokenizer
        self.chat = chat and bool(getattr(tokenizer, "chat_template", None))
        self.strict = strict
        self.encode = encode
        self.joined = False  # the template could not mark a turn: turns are joined by newlines
        self.special = set(getattr(tokenizer, "all_special_ids", None) or [])
        template = getattr(tokenizer, "chat_template", None)
        found = tools.detect(template if isinstance(template, str) else None, model_type)
        #: How this model writes tool calls (None: no format 2.58 knows).
        self.parser = tools.parser_for(found) if found is not None else None

    def written(self, reply: list[int]) -> str:
        """A reply as the model wrote it, its special tokens (a tool call's delimiters) kept
        but for the end token that closed it."""
        end = getattr(self.tokenizer, "eos_token_id", None)
        ids = reply[:-1] if reply and reply[-1] == end else reply
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def opening(self, messages: list[Message], schemas: list[Any] | None = None) -> list[int]:
        """The ids of the opening prompt (offering the tools ``schemas``); an empty one is the
        tokenizer's start token, so that the model has a position to reply from."""
        ids = self.encode(text.render(self.tokenizer, messages, chat=self.chat, tools=schemas))
        return ids or text.start_ids(self.tokenizer)

    def boundary(
        self, history: list[Message], reply: list[int], following: list[Message],
        schemas: list[Any] | None = None,
    ) -> list[int]:  # fmt: skip
        """The ids that follow the model's ``reply`` (its generated ids) before its next turn:
        the end of its turn, the ``following`` messages (the user's turn, or tools' results)
        and the opening of its own."""
        written = None
        if self.chat and not self.joined:
            written = self._chat_boundary(history, following, schemas)
        if written is None:
            joined = "\n" + "\n".join(message["content"] for message in following)
            return list(self.tokenizer(joined, add_special_tokens=False).input_ids)
        ids = list(self.tokenizer(written, add_special_tokens=False).input_ids)
        # The model's own end-of-turn token is in its reply (and trained): not twice.
        if reply and ids and ids[0] == reply[-1] and ids[0] in self.special:
            ids = ids[1:]
        return ids

    def _chat_boundary(
        self, history: list[Message], following: list[Message], schemas: list[Any] | None
    ) -> str | None:
        """What the chat template writes from the end of an assistant turn's content to the
        start of the next one's, found by rendering the turn with a sentinel content."""
        probe = [*history, {"role": "assistant", "content": _SENTINEL}]
        try:
            open_ = templates.render(self.tokenizer, probe, schemas)  # continues the sentinel
            after = templates.render(self.tokenizer, [*probe, *following], schemas)
        except templates.OverBound as bound:
            raise text.over_bound(self.tokenizer, bound) from None
        except Exception as error:  # the template is the model folder's code
            self._no_boundary(f"{type(error).__name__}: {error_detail(error)}")
            return None
        if not open_.endswith(_SENTINEL) or not after.startswith(open_):
            self._no_boundary("its rendering of a turn is not a prefix of the next")
            return None
        return after[len(open_) :]

    def _no_boundary(self, why: str) -> None:
        """Refuse (strict), else warn once that turns are joined by newlines from now on."""
        if self.strict:
            raise UsageError(
                f"environment.strict_chat_template_boundary: the tokenizer's chat template "
                f"cannot mark where a turn ends ({why})",
                "use a model whose template renders a conversation turn by turn, or set "
                "strict_chat_template_boundary: false to join turns by newlines",
            )
        import warnings

        warnings.warn(
            f"the chat template cannot mark where a turn ends ({why}); turns are joined "
            "by newlines",
            stacklevel=2,
        )
        self.joined = True


#: Generates the next turn of each transcript: ``(prompt ids, owners) -> Completions``.
Generate = Callable[[list[list[int]], list[int]], "Completions"]


def play(
    data: MultiTurnData,
    seeds: list[tuple[int, int]],
    conversation: Conversation,
    generate: Generate,
    *,
    context: int,
    reply_room: int,
) -> list[Episode]:
    """Play one episode per ``(seed, owner)``, all turns of all episodes in step: each turn
    is one :func:`generate` call for every episode still running.

    :param context: tokens a transcript may hold; it never holds more (the environment's
        texts are cut to :data:`~agile_llm.text.CHARS_PER_TOKEN` characters a token of it).
    :param reply_room: tokens a reply may take; a reply whose transcript leaves less room may
        take what is left, as 2.58's engine allows (episodes with less room are generated apart,
        each batch as far as its room goes). An episode whose transcript fills the context ends
        (``cut``), as does one that reaches ``data.max_turns``.
    """
    episodes = [Episode(seed=s, owner=o) for s, o in seeds]
    with Bound(data.timeout) as bound:
        game = _Game(data, conversation, bound, context)
        try:
            for episode in episodes:
                _open(episode, game)
            for turn in range(data.max_turns):
                for episode in episodes:
                    if not episode.done and len(episode.ids) >= context:
                        episode.done = episode.cut = True
                running = [e for e in episodes if not e.done]
                if not running:
                    break
                for batch in _by_room(running, context, reply_room):
                    done = generate([e.ids for e in batch], [e.owner for e in batch])
                    for row, episode in enumerate(batch):
                        reply = done.ids[row][done.completion[row]].tolist()
                        _take_turn(episode, reply, done.texts[row], turn, game)
        finally:
            for episode in episodes:
                _close(episode.env)
                episode.env = None
    return episodes


def _by_room(running: list[Episode], context: int, reply_room: int) -> list[list[Episode]]:
    """The running episodes in batches of one generation call each: those with room for a
    whole reply together, the others by the room they have left, so that no reply is cut to
    the room of a longer transcript than its own."""
    rooms: dict[int, list[Episode]] = {}
    for episode in running:
        rooms.setdefault(min(reply_room, context - len(episode.ids)), []).append(episode)
    return [rooms[room] for room in sorted(rooms, reverse=True)]


@dataclass
class _Game:
    """What playing takes besides the episodes: the environment, how its turns are written
    as tokens, the bound on its calls, and the tokens a transcript may hold."""

    data: MultiTurnData
    conversation: Conversation
    bound: Bound
    context: int

    def mended(self, episode: Episode, what: str, said: str, *, keep_end: bool) -> str:
        """``said``, a text the environment gave, as a transcript takes it: cut to
        :data:`~agile_llm.text.CHARS_PER_TOKEN` characters a token of the context (keeping
        its end for the opening, its start after a reply: the part that can fit), its lone
        surrogates and NULs, which no tokenizer takes, replaced by U+FFFD. Each kind of change
        is noted once a run."""
        limit = max(self.context, 1) * text.CHARS_PER_TOKEN
        where = _where(self.data, episode, what)
        if len(said) > limit:
            end = "last" if keep_end else "first"
            self._note("long", f"{where} gave a text of {len(said):,} characters, more than "
                       f"a transcript of max_context_length tokens can use; it is cut to its "
                       f"{end} {limit:,}")  # fmt: skip
            said = said[-limit:] if keep_end else said[:limit]
        mended = text.clean(said)
        if mended != said:
            unreadable = "lone surrogates or NUL characters, which no tokenizer takes"
            self._note("unreadable", f"{where} gave {unreadable}; they are replaced by U+FFFD")
        return mended

    def _note(self, kind: str, message: str) -> None:
        if kind not in self.data.noted:
            self.data.noted.add(kind)
            warnings.warn(message, stacklevel=3)


def _open(episode: Episode, game: _Game) -> None:
    data = game.data
    episode.env = _made(data.factory, data.label)
    returned = _call(game.bound, data, episode, "reset",
                     lambda: episode.env.reset(seed=episode.seed))  # fmt: skip
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise _bad_return(data, episode, "reset", returned, "(observation, info)")
    observation, info = returned
    messages = []
    system = getattr(episode.env, "system_prompt", None)
    if isinstance(system, str) and system.strip():
        system = game.mended(episode, "system_prompt", system, keep_end=False)
        messages.append({"role": "system", "content": system})
    said = _observation(game, episode, "reset", observation, info)
    said = game.mended(episode, "reset()", said, keep_end=True)
    messages.append({"role": "user", "content": said})
    episode.messages = messages
    episode.tools = _offered_tools(episode, game)
    episode.ids = game.conversation.opening(messages, episode.tools)
    episode.turn_of = [-1] * len(episode.ids)


def _offered_tools(episode: Episode, game: _Game) -> list[Any] | None:
    """The tool schemas an environment offers (its ``tools``, with a ``call_tool`` method to
    run them), or None for an environment of text."""
    schemas = getattr(episode.env, "tools", None)
    if not (isinstance(schemas, list) and schemas and callable(getattr(episode.env, "call_tool",
                                                                       None))):  # fmt: skip
        return None
    if game.conversation.parser is None:
        raise TrainingError(
            f"{game.data.label} offers tools, and the model's chat template writes tool calls "
            "in no format agile reads (tool_call, granite3, gemma4, harmony)",
            "fine-tune a model of a family that calls tools (Qwen, Granite, Gemma 4, gpt-oss), "
            "or give the environment no tools",
        )
    return list(schemas)


def _take_turn(episode: Episode, reply: list[int], said: str, turn: int, game: _Game) -> None:
    """Record the model's reply, step the environment with it (its text, or the tool calls it
    makes) and, unless the episode ends, append the boundary and what the environment answers
    (as much of it as the context holds)."""
    history = list(episode.messages)
    episode.ids += reply
    episode.turn_of += [turn] * len(reply)
    episode.messages.append({"role": "assistant", "content": said})
    last = turn + 1 >= game.data.max_turns
    if episode.tools is None:
        reward, following = _text_turn(episode, said, game, last)
    else:
        written = game.conversation.written(reply)
        reward, following = _tool_turn(episode, written, said, game, last)
    episode.rewards.append(reward)
    if not following:
        episode.done = True
        return
    room = max(game.context - len(episode.ids), 0)  # what follows is never trained: the rest
    episode.ids += game.conversation.boundary(history, reply, following, episode.tools)[:room]
    episode.turn_of += [-1] * (len(episode.ids) - len(episode.turn_of))
    episode.messages += following


def _text_turn(episode: Episode, said: str, game: _Game, last: bool) -> tuple[float, list[Message]]:
    """The reward of stepping the environment with the reply's text, and its answer as the
    user's next turn (none when the episode ends)."""
    action = _action(game, episode, said)
    returned = _call(game.bound, game.data, episode, "step", lambda: episode.env.step(action))
    observation, reward, ended, info = _stepped(game, episode, "step", returned)
    if ended or last:
        return reward, []
    message = _observation(game, episode, "step", observation, info, reward)
    return reward, [{"role": "user", "content": game.mended(episode, "step()", message,
                                                            keep_end=False)}]  # fmt: skip


def _tool_turn(
    episode: Episode, written: str, said: str, game: _Game, last: bool
) -> tuple[float, list[Message]]:
    """The reward of the reply's tool calls (each run by the environment's ``call_tool``, in
    order; parsed from the reply ``written`` with its special tokens, which may delimit a
    call), and their results as tool messages; a turn without calls sends its text ``said``
    (no special tokens) to ``answer_tool``. A turn that calls nothing runnable (a malformed
    call, or none without ``answer_tool``) runs nothing, scores ``min_reward`` and is told
    why, as 2.58 does."""
    data = game.data
    assert game.conversation.parser is not None and episode.tools is not None
    turn = game.conversation.parser.parse(written, episode.tools)
    routed = tools.route(turn, data.answer_tool, data.action_field, tools.action_text(said))
    if isinstance(routed, tools.Feedback):
        return data.min_reward, [] if last else [routed.as_message()]
    total, results, run = 0.0, [], episode.env.call_tool
    for call in routed:
        returned = _call(game.bound, data, episode, "call_tool",
                         lambda c=call: run(c.name, dict(c.arguments)))  # fmt: skip
        observation, reward, ended, info = _stepped(game, episode, "call_tool", returned)
        total += reward
        if ended:
            return total, []
        said = _observation(game, episode, "call_tool", observation, info, reward)
        results.append(tools.tool_message(call.name, game.mended(episode, "call_tool()", said,
                                                                   keep_end=False)))  # fmt: skip
    return total, [] if last else results


def _stepped(
    game: _Game, episode: Episode, method: str, returned: Any
) -> tuple[Any, float, bool, Any]:
    """``(observation, reward, ended, info)`` of what a step (or a tool call) returned,
    checked to be the protocol's five-tuple with a finite reward."""
    if not (isinstance(returned, tuple) and len(returned) == 5):
        raise _bad_return(game.data, episode, method, returned,
                          "(observation, reward, terminated, truncated, info)")  # fmt: skip
    observation, reward, terminated, truncated, info = returned
    number = as_number(reward)
    if number is None:
        raise _bad_return(game.data, episode, method, reward, "a finite number as the reward")
    return observation, number, bool(terminated or truncated), info


def _observation(
    game: _Game, episode: Episode, method: str, observation: Any, info: Any,
    reward: float | None = None,
) -> str:  # fmt: skip
    """The text of an observation: the observation processor's rendering of it, or the text
    itself framed by the info's ``prefix`` and ``suffix``."""
    data = game.data
    if data.observe is not None:
        payload = {"prompt": observation, "reward": reward, "done": False, "metadata": info}
        observe = data.observe
        observation = _call(game.bound, data, episode, "observation_processor",
                            lambda: observe(payload))  # fmt: skip
        if not isinstance(observation, str):
            raise _bad_return(data, episode, "observation_processor", observation, "text")
        return observation
    if not isinstance(observation, str):
        raise _bad_return(data, episode, method, observation, "text (a str) as the observation")
    if isinstance(info, dict):
        prefix, suffix = info.get("prefix"), info.get("suffix")
        if isinstance(prefix, str) and prefix:
            observation = prefix + observation
        if isinstance(suffix, str) and suffix:
            observation = f"{observation}\n{suffix}"
    return observation


def _where(data: MultiTurnData, episode: Episode, what: str) -> str:
    """Where the environment gave ``what`` (``reset()``, ``system_prompt``), for a message."""
    return f"{data.label}: {what} of the episode seeded {episode.seed}, turn {episode.turns}"


def _action(game: _Game, episode: Episode, said: str) -> str:
    """What the environment is sent for the reply ``said``: itself, or the action processor's
    rewriting of its text after any ``</think>``."""
    act = game.data.act
    if act is None:
        return said
    answer = said.rpartition("</think>")[2]
    action = _call(game.bound, game.data, episode, "action_processor", lambda: act(answer))
    if not isinstance(action, str):
        raise _bad_return(game.data, episode, "action_processor", action, "text")
    return action


def _call(bound: Bound, data: MultiTurnData, episode: Episode, method: str, call: Any) -> Any:
    where = _where(data, episode, f"{method}()")
    try:
        with bound.call(where):
            return call()
    except RewardTimeout:
        raise TrainingError(
            f"{where} ran for more than {data.timeout:g} s",
            "make the environment faster, or raise environment.reward_timeout",
        ) from None
    except (Exception, SystemExit) as error:  # sys.exit() in it must not end the run unsaid
        raise TrainingError(
            f"{where} raised {type(error).__name__}: {error_detail(error)}",
            "fix the environment; it is called as reset(seed=...) and step(text)",
        ) from None


def _bad_return(data: MultiTurnData, episode: Episode, method: str, value: Any, wanted: str) -> Any:
    shown = printable(repr(value))
    shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
    return TrainingError(
        f"{data.label}: {method} gave {shown} in the episode seeded {episode.seed} "
        f"(turn {episode.turns}), not {wanted}",
        "reset(seed) returns (text, info); step(text) returns "
        "(text, reward, terminated, truncated, info)",
    )


# -- learning from episodes ----------------------------------------------------------------------


@dataclass
class Transcripts:
    """Episodes as a right-padded batch: ``ids``, ``mask``, ``labels`` (the generated tokens;
    all else :data:`~agile_llm.objectives.IGNORE`) and ``turn`` (each label's turn, ``-1``
    elsewhere), all ``[N, T]``."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    turn: torch.Tensor

    def sequences(self) -> text.Sequences:
        """The transcripts as training rows (ids, mask, labels)."""
        return text.Sequences(self.ids, self.mask, self.labels)


def transcripts(episodes: list[Episode], pad: int, device: Any) -> Transcripts:
    import torch

    from agile_llm.objectives import IGNORE

    width = max(len(e.ids) for e in episodes)
    ids = torch.full((len(episodes), width), pad, dtype=torch.long)
    mask = torch.zeros((len(episodes), width), dtype=torch.long)
    turn = torch.full((len(episodes), width), -1, dtype=torch.long)
    for row, episode in enumerate(episodes):
        n = len(episode.ids)
        ids[row, :n] = torch.tensor(episode.ids)
        mask[row, :n] = 1
        turn[row, :n] = torch.tensor(episode.turn_of)
    labels = ids.masked_fill(turn < 0, IGNORE)
    return Transcripts(ids.to(device), mask.to(device), labels.to(device), turn.to(device))


def turn_advantages(
    episodes: list[Episode], group: int, fallback: torch.Tensor | None, eps: float = 1e-4
) -> torch.Tensor:
    """``[N, K]`` advantages per turn: each turn's return from there on, standardised among
    the episodes of its group (``group`` consecutive episodes, one seed) that reached that
    turn. A turn fewer than two of the group reached takes the episode's ``fallback``
    (its trajectory advantage), or zero without one."""
    import torch

    turns = max(1, *(e.turns for e in episodes))  # an episode cut before its first reply has 0
    to_go = torch.full((len(episodes), turns), math.nan)
    for row, episode in enumerate(episodes):
        rewards = torch.tensor(episode.rewards, dtype=torch.float32)
        to_go[row, : episode.turns] = rewards.flip(0).cumsum(0).flip(0)
    grouped = to_go.view(-1, group, turns)
    reached = ~grouped.isnan()
    count = reached.sum(dim=1, keepdim=True)
    values = grouped.nan_to_num(0.0)
    mean = values.sum(dim=1, keepdim=True) / count.clamp(min=1)
    spread = ((values - mean) ** 2 * reached).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)
    advantage = (values - mean) / (spread.sqrt() + eps)
    alone = (count < 2).expand_as(advantage)
    backup = torch.zeros_like(advantage) if fallback is None else (
        fallback.view(-1, group, 1).expand_as(advantage).to(advantage.dtype).cpu()
    )  # fmt: skip
    advantage = torch.where(alone, backup, advantage)
    return advantage.masked_fill(~reached, 0.0).view(-1, turns)


def per_token(turn: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """``[N, T - 1]`` per-token advantages (aligned with the shifted labels) from the turn of
    each token ``turn`` ``[N, T]`` and ``[N, K]`` turn advantages; zero off the generated
    tokens."""
    import torch

    shifted = turn[:, 1:]
    index = shifted.clamp(min=0)
    values = torch.gather(advantage.to(shifted.device), 1, index.clamp(max=advantage.shape[1] - 1))
    return torch.where(shifted >= 0, values, torch.zeros_like(values))


def summary(episodes: list[Episode], data: MultiTurnData) -> dict[str, float]:
    """Held-out metrics of played episodes: mean return, success rate (with ``max_reward``),
    mean turns, and the share cut short by the context."""
    returns = np.array([e.total for e in episodes], dtype=np.float64)
    metrics = {"mean return": float(returns.mean())}
    success = data.accuracy(returns)
    if success is not None:
        metrics["success rate"] = success
    metrics["mean turns"] = float(np.mean([e.turns for e in episodes]))
    cut = float(np.mean([e.cut for e in episodes]))
    if cut:
        metrics["cut by context"] = cut
    return metrics


def shown(episode: Episode) -> tuple[str, str, str]:
    """An episode as ``agile evaluate`` shows it: the opening message, the model's replies,
    and the turns' rewards."""
    opening = episode.messages[0]["content"] if episode.messages else ""
    for message in episode.messages:
        if message["role"] == "user":
            opening = message["content"]
            break
    replies = " | ".join(episode.replies())
    rewards = " ".join(f"{r:g}" for r in episode.rewards)
    return opening, replies, f"rewards {rewards} (return {episode.total:g})"
