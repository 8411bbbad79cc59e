"""An LLM population: one frozen base model, one LoRA adapter per member.

:class:`SharedModel` loads the base model and its tokenizer once; each :class:`LLMMember` owns
one named adapter of it and an AdamW optimizer over that adapter's weights. Cloning a member
(tournament selection) copies its adapter into a new one and its optimizer state with it; a
member that leaves the population frees its adapter. Memory is the base once, plus, per member
alive, an adapter, its gradients and its optimizer's two moments.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

import torch

from agile_cli import (
    AgentContext,
    Member,
    MemberBasics,
    MemberRecord,
    TrainingError,
    TrainingManifest,
    UsageError,
)
from agile_cli.helpers import printable
from agile_llm import groups, templates, text
from agile_llm.adapters import AdapterPopulation, read_adapter
from agile_llm.environment import PromptData
from agile_llm.messages import error_detail
from agile_llm.model import load_model, load_tokenizer
from agile_llm.options import generates_with_vllm
from agile_llm.spec import FinetuningNetworkSpec, LLMSpec, LoraSpec

if TYPE_CHECKING:
    from agile_llm.vllm_engine import VLLMGenerator

Row = dict[str, Any]


class SharedModel:
    """The base model every member adapts, its tokenizer, and the adapters alive."""

    def __init__(self, manifest: TrainingManifest, device: torch.device) -> None:
        spec = manifest.algorithm
        assert isinstance(spec, LLMSpec)
        self.path = spec.model_path(manifest)
        self.tokenizer = load_tokenizer(self.path)
        _chat_settings(self.tokenizer, getattr(manifest, "environment", None))
        attention = getattr(spec, "attn_implementation", None)
        self.base = load_model(self.path, device=device, attn_implementation=attention,
                               quantization=spec.quantization)  # fmt: skip
        if spec.gradient_checkpointing:
            self.base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.lora: LoraSpec = spec.lora(manifest)
        #: ``lora_target_scope``: the module path the adapted modules are under (None: all).
        self.scope: str | None = getattr(spec, "lora_target_scope", None)
        network = cast(FinetuningNetworkSpec, manifest.network)  # the LLM paradigm's section
        self.start = read_adapter(network.adapter_path)
        limit = getattr(self.base.config, "max_position_embeddings", None) or 10**9
        self.context_length = min(spec.context_length(manifest), int(limit))
        self.device = device
        self.adapters: AdapterPopulation | None = None
        self._made = 0
        #: Prompts are read as written (the tokenizer adds its own special tokens), not
        #: rendered by the chat template: set from the environment by :func:`build_population`.
        self.prompts_as_written = False
        self._vllm = generates_with_vllm(getattr(spec, "use_vllm", False))
        self._vllm_options: dict[str, Any] = {
            "config": getattr(spec, "vllm_config", None),
            "adapters": int(getattr(getattr(manifest, "training", None), "pop_size", 1)),
            "seed": int(getattr(spec, "seed", 0) or 0),
        }
        self._engine: VLLMGenerator | None = None
        buffer = getattr(manifest, "replay_buffer", None)
        #: ``replay_buffer.group_replay_max_age``: updates a stored completion may be replayed.
        self.group_replay_age = int(getattr(buffer, "group_replay_max_age", 0) or 0)
        #: ``training.checkpoint_export``: when the elite is also written merged into the base.
        self.export = getattr(getattr(manifest, "training", None), "checkpoint_export", None)

    def engine(self) -> VLLMGenerator | None:
        """The vLLM engine that generates for every member (``use_vllm``), started at its
        first use; None: the training model generates."""
        if not self._vllm:
            return None
        if self._engine is None:
            from agile_llm.vllm_engine import VLLMGenerator

            self._engine = VLLMGenerator(self.path, rank=self.rank, context=self.context_length,
                                         **self._vllm_options)  # fmt: skip
            weakref.finalize(self, self._engine.close)
        return self._engine

    @property
    def model(self) -> Any:
        """The PEFT model (the base with every adapter)."""
        assert self.adapters is not None, "a member made the first adapter"
        return self.adapters.model

    def new_adapter(self, source: str | None = None) -> str:
        """A new adapter's name: fresh, or a copy of adapter ``source``."""
        name = f"member_{self._made}"
        self._made += 1
        if self.adapters is None:
            self.adapters = self._first_adapter(name)
        else:
            self.adapters.add(name, source)
        if source is None and self.start is not None:
            self.start.load_into(self.adapters.model, name)
        return name

    def _first_adapter(self, name: str) -> AdapterPopulation:
        """The population, made with its first adapter (which wraps the base model)."""
        lora = self.start.config if self.start else self.lora.peft_kwargs()
        if self.start is None and self.scope is not None:
            lora = {**lora, "target_modules": scoped_targets(self.base, lora, self.scope)}
        try:
            return AdapterPopulation(self.base, lora, [name])
        except (ValueError, TypeError) as exc:  # peft refuses the settings
            if self.start is not None:
                raise self.start.unusable(f"peft cannot apply it: {error_detail(exc)}") from None
            raise UsageError(
                f"network.lora_config: peft cannot make these adapters of {self.path}: "
                f"{error_detail(exc)}",
                f"the model's linear layers are named {_linear_layers(self.base)}; name some "
                "of them in target_modules",
            ) from None

    @property
    def rank(self) -> int:
        """The adapters' LoRA rank."""
        return int(self.start.config.r) if self.start else self.lora.lora_r

    def release(self, name: str) -> None:
        """Free an adapter no member holds any more."""
        if self.adapters is not None:
            self.adapters.remove(name)

    def reference(self) -> Any:
        """A context in which the model is the base alone (every adapter off)."""
        assert self.adapters is not None
        return self.adapters.reference()


@dataclass
class Scores:
    """A member scored on held-out rows: its fitness, named metrics and a few samples."""

    fitness: float
    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[tuple[str, str, str]] = field(default_factory=list)  # prompt, output, target


class LLMMember(MemberBasics):
    """One member: an adapter of the shared model and the optimizer that trains it.

    It implements the :class:`~agile_cli.Member` contract itself rather than subclass
    :class:`~agile_rl.Algorithm`: an adapter has no spaces, no architecture and no networks
    built from a network section, so only hyperparameter mutation applies to it. Subclasses
    implement :meth:`train_group` and :meth:`score_group`.
    """

    spec: Any  # the algorithm's LLMSpec subclass, whose fields the subclasses read
    lr_field: ClassVar[str] = "lr"
    """The hyperparameter that is the adapter optimizer's learning rate."""

    def __init__(
        self,
        spec: LLMSpec,
        *,
        shared: SharedModel,
        context: AgentContext,
        index: int = 0,
        adapter: str | None = None,
    ) -> None:
        self.spec = spec.model_copy()  # this member's own: mutation replaces it
        self.context = context
        self.device = context.device
        self.index = index
        self.record = MemberRecord()
        self.shared = shared
        self.last_rewards: torch.Tensor | None = None  # of the latest sampled completions
        self.adapter = adapter or shared.new_adapter()
        weakref.finalize(self, shared.release, self.adapter)
        self._seed_generators()
        self.optimizers: dict[str, torch.optim.Optimizer] = {"adapter": self._adapter_optimizer()}
        self.updates = 0  # optimizer steps taken: where the learning-rate schedule is
        self.build()

    # -- what subclasses implement -----------------------------------------------------------

    def build(self) -> None:
        """Create what the member needs besides its adapter."""

    @classmethod
    def train_group(cls, members: list[Self], rows: list[list[Row]], data: Any) -> list[float]:
        """One training step of each of ``members`` on its batch (``rows[i]`` member
        ``i``'s), as one computation (:mod:`.groups`); returns each member's loss. The runner
        passes members that can share a pass (:func:`~agile_llm.groups.compatible`); a member
        alone is a group of one."""
        raise NotImplementedError

    @classmethod
    def score_group(cls, members: list[Self], rows: list[Row], data: Any) -> list[Scores]:
        """Each of ``members`` scored on held-out ``rows``, as one computation."""
        raise NotImplementedError

    def train_step(self, rows: list[Row], data: Any) -> float:
        """One training step of this member alone on ``rows``; returns its loss."""
        return self.train_group([self], [rows], data)[0]

    def score(self, rows: list[Row], data: Any) -> Scores:
        """This member alone scored on held-out ``rows``."""
        return self.score_group([self], rows, data)[0]

    # -- acting ----------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self.shared.tokenizer

    def act(self, obs: Any, *, explore: bool) -> list[str]:
        """Completions of prompt texts: sampled when exploring, else greedy."""
        return self.complete(self.prompt_ids(list(obs)), explore=explore).texts

    def reset_state(self, envs: Any = None) -> None:
        """Nothing to forget: a completion depends on its prompt alone."""

    def render_prompts(self, rows: list[dict[str, Any]], data: Any) -> list[str]:
        """Each row's prompt as the text the model continues: its turns rendered by the chat
        template, or, read as written, their texts joined by newlines."""
        chat = data.chat_prompts
        return [text.render(self.tokenizer, data.messages(row), chat=chat) for row in rows]

    def prompt_ids(self, prompts: list[str], limit: int | None = None) -> list[list[int]]:
        """Prompt texts as token ids, each cut to ``limit`` (by default, to leave room for a
        completion), keeping its end."""
        row = self.row_tokens()
        reserved = min(self.output_tokens(), row // 2)
        room = max(row - reserved, 1) if limit is None else limit
        special = self.shared.prompts_as_written
        encoded = text.encode_all(self.tokenizer, prompts, room, keep_end=True, special=special)
        # An empty prompt starts from the start token: generation needs a position to go on from.
        return [ids or text.start_ids(self.tokenizer) for ids in encoded]

    def output_tokens(self) -> int:
        """The most tokens a completion may have (``max_output_tokens``; null: as many as the
        context leaves). A prompt keeps at least half the context, whatever it reserves."""
        wanted = getattr(self.spec, "max_output_tokens", None)
        return int(wanted or self.row_tokens())

    def row_tokens(self) -> int:
        """Tokens one sampled row (a prompt and its completion, an episode's transcript) may
        hold: the context, or ``max_row_tokens`` when it is smaller."""
        bound = getattr(self.spec, "max_row_tokens", None)
        return int(min(self.shared.context_length, bound or self.shared.context_length))

    def complete(self, prompts: list[list[int]], *, explore: bool) -> text.Completions:
        """Completions of token-id prompts through this member's adapter (by vLLM with
        ``use_vllm``): sampled at its temperature when exploring, else greedy."""
        seed = groups.draw([self]) if explore else None
        return groups.generate([self], prompts, [0] * len(prompts), explore=explore, seed=seed)

    # -- learning --------------------------------------------------------------------------------

    def transcripts(self, episodes: list[Any]) -> Any:
        """Played ``episodes`` as this member's right-padded training rows
        (:func:`agile_llm.multiturn.transcripts`)."""
        from agile_llm.multiturn import transcripts

        return transcripts(episodes, int(self.tokenizer.pad_token_id), self.device)

    def trained_parameters(self) -> list[torch.nn.Parameter]:
        assert self.shared.adapters is not None
        return list(self.shared.adapters.adapter_parameters(self.adapter).values())

    def _adapter_optimizer(self) -> torch.optim.Optimizer:
        lr = float(getattr(self.spec, self.lr_field))
        # foreach: one call over the adapter's many small tensors, not a Python loop of them
        return torch.optim.AdamW(self.trained_parameters(), lr=lr, weight_decay=0.0, foreach=True)

    def step(self) -> None:
        """Clip the gradients already accumulated and take one optimizer step, at the learning
        rates the cosine schedule gives this update (``cosine_lr_schedule_config``)."""
        parameters = self.trained_parameters()
        if self.spec.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(parameters, self.spec.max_grad_norm)
        self._apply_rates()
        for optimizer in self.optimizers.values():
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        self.updates += 1

    def _apply_rates(self) -> None:
        """Every optimizer at its rate for the next update: :meth:`base_rate` times the
        cosine schedule's share for it."""
        factor = schedule_factor(getattr(self.spec, "cosine_lr_schedule_config", None),
                                 self.updates)  # fmt: skip
        for name, optimizer in self.optimizers.items():
            for group in optimizer.param_groups:
                group["lr"] = self.base_rate(name) * factor

    def base_rate(self, optimizer: str) -> float:
        """The learning rate of optimizer ``optimizer`` before any schedule: the adapter's is
        :attr:`lr_field`'s."""
        return float(getattr(self.spec, self.lr_field))

    def micro_batches(self, size: int) -> list[slice]:
        """Slices of a batch of ``size`` rows, ``micro_batch_size_per_gpu`` at a time within
        each of its mini-batches."""
        micro = getattr(self.spec, "micro_batch_size_per_gpu", None)
        return [slice(mini.start + part.start, mini.start + part.stop)
                for mini in self.mini_batches(size)
                for part in groups.slices(mini.stop - mini.start, micro or size)]  # fmt: skip

    def mini_batches(self, size: int) -> list[slice]:
        """Slices of a batch of ``size`` rows, one optimiser step each: ``mini_batch_size``
        rows at a time (the whole batch by default)."""
        return groups.slices(size, getattr(self.spec, "mini_batch_size", None) or size)

    def mini_batch_of(self, part: slice, size: int) -> slice:
        """The mini-batch of a batch of ``size`` rows that holds ``part`` of it."""
        return next(
            mini for mini in self.mini_batches(size) if mini.start <= part.start < mini.stop
        )

    # -- evolution and checkpoints ---------------------------------------------------------------

    def describe_network(self) -> str:
        """The adapter's rank and size, for the progress table."""
        count = sum(p.numel() for p in self.trained_parameters())
        return f"LoRA r={self.shared.rank} ({count:,} weights)"

    def set_hyperparameter(self, name: str, value: float | int) -> None:
        """Replace the spec by a copy with the new value; the optimizers follow their rates
        (:meth:`base_rate`)."""
        self.spec = self.spec.model_copy(update={name: value})
        self._apply_rates()

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Every weight this member trains: its adapter's."""
        yield from self.trained_parameters()

    def clone(self, index: int) -> LLMMember:
        """An independent copy: its own adapter (a copy of this one), optimizer state, spec
        and record; under a new index, generators of its own."""
        twin = type(self)(
            self.spec, shared=self.shared, context=self.context, index=self.index,
            adapter=self.shared.new_adapter(source=self.adapter),
        )  # fmt: skip
        twin.load_state_dict(self.state_dict(weights=False))
        if index != self.index:
            twin.index = index
            twin._seed_generators()
        return twin

    def state_dict(self, *, weights: bool = True) -> dict[str, Any]:
        """Everything needed to restore this member (``weights`` False: all but the adapter's
        weights, for a copy that already has them)."""
        assert self.shared.adapters is not None
        return {
            "index": self.index,
            "hyperparameters": self.hyperparameters(),
            "adapter": self.shared.adapters.weights(self.adapter) if weights else None,
            # Not copied: load_state_dict copies, and checkpoints are written at once.
            "optimizers": {name: o.state_dict() for name, o in self.optimizers.items()},
            "updates": self.updates,
            "record": copy.deepcopy(self.record.__dict__),
            "torch_rng": self.generator.get_state(),
            "numpy_rng": copy.deepcopy(self.rng.bit_generator.state),
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (its adapter's weights when it holds them)."""
        assert self.shared.adapters is not None
        self.index = state["index"]
        for name, value in state["hyperparameters"].items():
            self.set_hyperparameter(name, value)
        if state["adapter"] is not None:
            self.shared.adapters.load_weights(self.adapter, state["adapter"])
        for name, optimizer_state in state["optimizers"].items():
            self.optimizers[name].load_state_dict(copy.deepcopy(optimizer_state))
        self.updates = int(state.get("updates", 0))  # checkpoints before schedules had none
        self.record = MemberRecord(**copy.deepcopy(state["record"]))
        self.generator.set_state(state["torch_rng"])
        self.rng.bit_generator.state = copy.deepcopy(state["numpy_rng"])
        self.load_extra_state(state["extra"])

    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state to checkpoint (LLMPPO's value head); none by default."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` saved."""

    def export_policy(self) -> None:
        """:raises NotImplementedError: a language model generates text token by token; its
        portable form is the PEFT adapter folder :meth:`save_portable` writes."""
        raise NotImplementedError(
            "a language model generates text token by token; its PEFT adapter folder, saved "
            "next to elite.pt, is its portable form"
        )

    def save_portable(self, directory: Path) -> bool:
        """The adapter in PEFT's folder format (``adapter_config.json`` and
        ``adapter_model.safetensors``), which ``peft.PeftModel.from_pretrained`` loads onto
        the base model."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        assert self.shared.adapters is not None
        directory.mkdir(parents=True, exist_ok=True)
        model = self.shared.adapters.model
        config = copy.deepcopy(model.peft_config[self.adapter])
        config.base_model_name_or_path = self.shared.path
        config.save_pretrained(str(directory))
        weights = get_peft_model_state_dict(model, adapter_name=self.adapter)
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()},
                  str(directory / "adapter_model.safetensors"))  # fmt: skip
        return True

    def export_elite(self, run_folder: Path, *, at_end: bool) -> list[Path]:
        """The elite merged into the base model as ``merged/`` beside its adapter
        (``elite/``), where ``checkpoint_export`` asks for it: at every save (``every``; the
        run's last save reports it), or at the run's end (``final``, and ``best``: agile's last
        elite is the best member, scored again). ``on_demand`` never (``agile llm merge``)."""
        from agile_llm.export import MERGED, write_merged

        adapter, target, export = run_folder / "elite", run_folder / MERGED, self.shared.export
        if export is None or export.format != "merged" or not adapter.is_dir():
            return []
        if export.trigger == "every":
            if at_end:  # the save just before wrote it
                return [target] if target.is_dir() else []
        elif export.trigger == "on_demand" or not at_end:
            return []
        return [write_merged(self.shared.path, adapter, target, self.tokenizer)]


def build_population(
    manifest: TrainingManifest, cls: type[Member], env: Any, context: AgentContext, size: int
) -> list[Member]:
    """The paradigm's population: ``size`` members of ``cls`` over one base model."""
    if not issubclass(cls, LLMMember):
        raise TrainingError(
            f"{manifest.algorithm_name}'s implementation {cls.__name__} is not an "
            "agile_llm.population.LLMMember, which the llm paradigm trains"
        )
    spec = manifest.algorithm
    assert isinstance(spec, LLMSpec)
    torch.manual_seed(spec.seed)  # LoRA's initial weights
    shared = SharedModel(manifest, context.device)
    if isinstance(env, PromptData):
        shared.prompts_as_written = not env.chat_prompts
    if getattr(env, "chat_prompts", False):
        # A chat template that breaks a bound or cannot render the prompts fails now, before
        # any run folder: on a stand-in conversation, then on the first row.
        text.check_template(shared.tokenizer)
    if isinstance(env, PromptData) and env.train and env.chat_prompts:
        text.render(shared.tokenizer, env.messages(env.train[0]))
    return [cls(spec, shared=shared, context=context, index=i) for i in range(size)]


def scoped_targets(model: Any, lora: dict[str, Any], scope: str) -> Any:
    """``target_modules`` restricted to the modules under the path ``scope``, as 2.58 does it:
    a regular expression PEFT matches against whole module paths, ``...SCOPE...NAME``, for
    each layer name the targets give (every linear layer's but the output head's for
    ``all-linear``); targets already written as one regular expression are kept.

    :raises UsageError: no linear layer of the model matches.
    """
    import re

    targets = lora["target_modules"]
    if isinstance(targets, str) and targets != "all-linear":
        return targets
    linear = [key for key, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    if targets == "all-linear":
        head = model.get_output_embeddings()
        names = {key.rsplit(".", 1)[-1] for key in linear
                 if model.get_submodule(key) is not head}  # fmt: skip
    else:
        names = {name.removesuffix(".linear") for name in targets}
    choices = "|".join(re.escape(name) for name in sorted(names))
    pattern = rf"(?:.*\.)?{re.escape(scope.strip('.'))}.*\.(?:{choices})(?:\.linear)?$"
    if not any(re.fullmatch(pattern, key) for key in linear):
        raise UsageError(
            f"algorithm.lora_target_scope: {printable(scope)!r} holds none of the layers "
            f"target_modules names ({', '.join(sorted(names)) or 'none'})",
            f"name a module path the model has, e.g. {_paths(linear)}",
        )
    return pattern


def _paths(keys: list[str]) -> str:
    """A few module paths (the parents of linear layers), for a hint."""
    parents = sorted({key.rsplit(".", 1)[0] for key in keys if "." in key})
    return ", ".join(parents[:3]) or "none"


def _linear_layers(model: Any) -> str:
    """The names of ``model``'s linear layers, once each (what LoRA's target_modules name)."""
    names = sorted({key.rsplit(".", 1)[-1] for key, module in model.named_modules()
                    if isinstance(module, torch.nn.Linear)})  # fmt: skip
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") or "none"


def schedule_factor(schedule: Any, update: int) -> float:
    """The share of the learning rate update ``update`` (from 0) takes under the cosine
    ``schedule`` (None: 1): a linear warm-up over ``warmup_proportion`` of ``num_steps``
    updates, then a cosine down to ``min_lr_ratio``, held after ``num_steps``."""
    if schedule is None:
        return 1.0
    steps, floor = int(schedule.num_steps), float(schedule.min_lr_ratio)
    warm = int(schedule.warmup_proportion * steps)
    if update < warm:
        return (update + 1) / warm
    if update >= steps:
        return floor
    progress = (update - warm) / max(steps - warm, 1)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


#: The largest chat template file read (``environment.chat_template_path``).
TEMPLATE_FILE_LIMIT = 1 << 20


def _chat_settings(tokenizer: Any, environment: Any) -> None:
    """The environment's chat template file and template variables, on ``tokenizer``."""
    path = getattr(environment, "chat_template_path", None)
    variables = dict(getattr(environment, "chat_template_kwargs", None) or {})
    template = None if path is None else _template_file(Path(path))
    if template is not None or variables:
        templates.configure(tokenizer, template, variables)


def _template_file(path: Path) -> str:
    """The Jinja text of a chat template file, bounded (it renders in agile's sandbox)."""
    where = "environment.chat_template_path"
    if not path.is_file():
        raise UsageError(f"{where}: no file {path.absolute()}",
                         "paths are relative to the working directory")  # fmt: skip
    if path.stat().st_size > TEMPLATE_FILE_LIMIT:
        raise UsageError(f"{where}: {path} is larger than {TEMPLATE_FILE_LIMIT:,} bytes",
                         "a chat template is a short Jinja file")  # fmt: skip
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{where}: {path} is not UTF-8 text") from None
