"""What an RL run needs in memory, estimated before anything large is allocated.

The RL paradigms name these needs to the core (:meth:`agile_cli.Paradigm.memory_needs`), which
compares them with what is available (:mod:`agile_cli.memory`) once the vector environment is
built (so its spaces are known) and before the population and the replay buffer exist:

- the population: each member's networks at their largest, counted from the network section
  (or from the largest architecture a recipe's schedule gives the member) and the spaces (at
  least one network per distinct agent; algorithms add critics and targets), 16 bytes a
  parameter with its gradient and Adam's two moments, for every member held at once (while a
  generation is selected: the old population, the new one and the elite);
- the replay buffer: ``max_size`` transitions as the buffer lays them out (observation and
  next observation, action, reward, termination and discount, per agent for teams; and each
  n-step row's first step where the buffer keeps it), plus the priority tree of prioritised
  replay;
- an on-policy rollout of ``learn_step`` environment steps.

All three live on the training device. The figures are lower bounds, so a run that fits is
never refused.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from agile_cli import Need, TrainingManifest
from agile_rl import experience

#: Bytes a trained parameter takes: float32 weight, gradient, and Adam's two moments.
BYTES_PER_PARAMETER = 16
#: Columns of a rollout row besides observation and action: log-prob, value, advantage,
#: return, reward and done, float32 each.
_ROLLOUT_EXTRA = 6 * 4


def needs(manifest: TrainingManifest, env: Any, members: int = 1) -> list[Need]:
    """What an RL run of ``manifest`` holds: the population's networks, the replay buffer or
    the rollouts of ``members`` members training at once in ``env``."""
    rollout = _rollout(manifest, env, members)
    found = [_population(manifest, env), *_replay_buffer(manifest, env), rollout]
    return [need for need in found if need is not None]


# -- the parts -----------------------------------------------------------------------------------


def _population(manifest: TrainingManifest, env: Any) -> Need:
    pop_size = manifest.training.pop_size
    held = 2 * pop_size + 1 if manifest.evolves else pop_size
    parameters, field = _largest_member(manifest, env)
    detail = (
        f"at least {parameters:,} parameters a member, {BYTES_PER_PARAMETER} B each with "
        f"gradients and Adam state, {held:,} member{'s' if held != 1 else ''} held at once"
    )
    hint = "narrow the network (hidden_size, latent_dim, channel_size) or lower training.pop_size"
    if field != "network":
        hint = "narrow that architecture (its hidden_size, latent_dim, channel_size)"
    return Need(
        field, "the population", detail, held * parameters * BYTES_PER_PARAMETER, True, hint
    )


def _replay_buffer(manifest: TrainingManifest, env: Any) -> list[Need]:
    if manifest.replay_buffer is None:
        return []
    spec = experience.replay_spec(manifest)
    row = transition_bytes(
        *_team_spaces(manifest, env), first_steps=experience.keeps_first_steps(manifest)
    )
    detail = f"{spec.max_size:,} transitions of {row:,} B"
    hint = "lower replay_buffer.max_size"
    needs = [Need("replay_buffer.max_size", "the replay buffer", detail, spec.max_size * row,
                  True, hint)]  # fmt: skip
    if spec.per_buffer:  # a float64 sum tree over the slots padded to a power of two, on the host
        leaves = 1 << (spec.max_size - 1).bit_length()
        needs.append(Need("replay_buffer.max_size", "the priority tree",
                          f"{2 * leaves:,} float64 nodes", 16 * leaves, False, hint))  # fmt: skip
    return needs


def _rollout(manifest: TrainingManifest, env: Any, members: int) -> Need | None:
    """A member's rollout, times the ``members`` that hold theirs at once."""
    learn_step = getattr(manifest.algorithm, "learn_step", None)
    paradigm = manifest.paradigm
    if paradigm is None or paradigm.uses_replay_buffer or not isinstance(learn_step, int):
        return None
    num_envs = max(1, int(getattr(env, "num_envs", 1)) // members)
    steps = math.ceil(learn_step / num_envs) * num_envs
    observations, actions = _team_spaces(manifest, env)
    row = sum(4 * _flat_size(space) for space in observations)
    row += sum(space_bytes(space) for space in actions) + _ROLLOUT_EXTRA * len(observations)
    what = "a rollout" if members == 1 else f"{members} members' rollouts at once"
    each = "" if members == 1 else " each"
    return Need(
        "algorithm.learn_step", what, f"{steps:,} environment steps of {row:,} B{each}",
        members * steps * row, True, "lower algorithm.learn_step or training.pop_size",
    )  # fmt: skip


def _team_spaces(manifest: TrainingManifest, env: Any) -> tuple[list[Any], list[Any]]:
    """Every agent's observation and action space (one agent for single-agent families)."""
    if manifest.paradigm is not None and manifest.paradigm.multi_agent:
        agents = list(env.single_observation_spaces)
        observations = [env.single_observation_spaces[agent] for agent in agents]
        return observations, [env.single_action_spaces[agent] for agent in agents]
    return [env.single_observation_space], [env.single_action_space]


# -- sizes of spaces and networks ----------------------------------------------------------------


def transition_bytes(
    observations: list[Any], actions: list[Any], *, first_steps: bool = False
) -> int:
    """Bytes of one replay-buffer row for a team of agents (a team of one: single-agent):
    observation and next observation, action, then float32 reward and termination per agent
    and one discount; with ``first_steps``, the first step's next observation, reward and
    termination too."""
    copies = 3 if first_steps else 2
    stored = sum(copies * space_bytes(space) for space in observations)
    stored += sum(space_bytes(space) for space in actions)
    return stored + (16 if first_steps else 8) * len(observations) + 4


def space_bytes(space: Any) -> int:
    """Bytes of one element of ``space`` as the replay buffer stores it: uint8 images as
    bytes, other boxes and binaries as float32, discrete values as int64."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict | spaces.Tuple):
        children = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return sum(space_bytes(child) for child in children)
    if isinstance(space, spaces.Discrete):
        return 8
    if isinstance(space, spaces.MultiDiscrete):
        return 8 * int(math.prod(space.shape))
    if isinstance(space, spaces.Box) and space.dtype is not None and space.dtype.itemsize == 1:
        return int(math.prod(space.shape))
    return 4 * _flat_size(space)


def _flat_size(space: Any) -> int:
    from gymnasium import spaces

    try:
        return int(spaces.flatdim(space))
    except (NotImplementedError, ValueError, TypeError):
        return int(math.prod(getattr(space, "shape", None) or (1,)))


def member_parameters(manifest: TrainingManifest, env: Any) -> int:
    """A lower bound of one member's parameters at its largest: one network per distinct
    (observation, action) space pair of its agents, of the network section's architecture or
    of the largest one the manifest's recipe gives the member."""
    return _largest_member(manifest, env)[0]


def _largest_member(manifest: TrainingManifest, env: Any) -> tuple[int, str]:
    """:func:`member_parameters`, and the field whose architecture gives it: ``network``, or
    the recipe's ``recipe.schedule[i].architecture``."""
    from agile_rl.models.network import evolvable_network
    from agile_rl.nn.arch import NetworkArch, arch_from_spec
    from agile_rl.spec import RLOptions

    recurrent = bool(getattr(manifest.algorithm, "recurrent", False))
    pairs: list[tuple[Any, Any]] = []
    for pair in zip(*_team_spaces(manifest, env), strict=True):
        if pair not in pairs:
            pairs.append(pair)
    largest, field = 0, "network"
    for observation, action in pairs:
        try:
            arch = arch_from_spec(
                evolvable_network(manifest), observation, recurrent=recurrent,
                latent_norm=RLOptions.has(type(manifest.algorithm), "normalised_latent"),
            )  # fmt: skip
        except (NotImplementedError, ValueError):
            continue  # building the population reports it
        largest += network_parameters(arch, observation, _flat_size(action))
    schedule = manifest.recipe.schedule if manifest.recipe is not None else []
    for position, step in enumerate(schedule):
        if step.architecture is None:
            continue
        try:
            adopted = NetworkArch.from_dict(step.architecture)
            count = sum(network_parameters(adopted, o, _flat_size(a)) for o, a in pairs)
        except (ValueError, IndexError):
            continue  # validation refused it, or it does not read these spaces: adopting says so
        if count > largest:
            largest, field = count, f"recipe.schedule[{position}].architecture"
    return largest, field


def network_parameters(arch: Any, space: Any, outputs: int) -> int:
    """Parameters of an :class:`~agile_rl.nn.modules.EvolvableNetwork` of ``arch`` reading
    ``space``, with one head of ``outputs`` units."""
    head = arch.head
    encoder = _encoder_parameters(arch.encoder, space, arch.latent_dim)
    return encoder + _mlp(arch.latent_dim, head.hidden_size, outputs, head.layer_norm)


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int, layer_norm: bool) -> int:
    widths = (n_in, *hidden, n_out)
    linear = sum(a * b + b for a, b in pairwise(widths))
    return linear + (2 * sum(hidden) if layer_norm else 0)


def _encoder_parameters(encoder: Any, space: Any, latent: int) -> int:
    from agile_rl.nn.arch import CNNArch, CnnLstmArch, MLPArch, MultiInputArch, SimBaArch
    from agile_rl.nn.recurrent_arch import LSTMArch

    if isinstance(encoder, MultiInputArch):
        return _multi_input(encoder, space, latent)
    if isinstance(encoder, CNNArch):
        return _cnn(encoder, tuple(space.shape), latent)
    if isinstance(encoder, CnnLstmArch):
        convolutions, features = _convolutions(encoder.cnn, tuple(space.shape))
        return convolutions + _lstm(encoder.lstm, features, latent)
    n_in = _flat_size(space)
    if isinstance(encoder, MLPArch):
        return _mlp(n_in, encoder.hidden_size, latent, encoder.layer_norm)
    if isinstance(encoder, SimBaArch):
        width, inner = encoder.hidden_size, encoder.scale_factor * encoder.hidden_size
        block = 2 * width + (width * inner + inner) + (inner * width + width)
        return (n_in + 1) * width + encoder.num_blocks * block + 2 * width + (width + 1) * latent
    if isinstance(encoder, LSTMArch):
        return _lstm(encoder, n_in, latent)
    return 0


def _lstm(encoder: Any, n_in: int, latent: int) -> int:
    """An LSTM encoder's parameters: its layers reading ``n_in`` features, and ``out``."""
    size = encoder.hidden_state_size
    first, deeper = 4 * size * (n_in + size + 2), 4 * size * (2 * size + 2)
    return first + (encoder.num_layers - 1) * deeper + (size + 1) * latent


def _cnn(encoder: Any, shape: tuple[int, ...], latent: int) -> int:
    convolutions, features = _convolutions(encoder, shape)
    return convolutions + (features + 1) * latent


def _convolutions(encoder: Any, shape: tuple[int, ...]) -> tuple[int, int]:
    """A CNN's convolutions (and norms) on images of ``shape``: their parameters, and how many
    features they flatten to."""
    from agile_rl.nn.modules import channels_last

    channels, height, width = (shape[2], *shape[:2]) if channels_last(shape) else shape[-3:]
    total = 0
    sizes = (channels, *encoder.channel_size)
    for (n_in, n_out), kernel, stride in zip(
        pairwise(sizes), encoder.kernel_size, encoder.stride_size, strict=True
    ):
        kernel = max(1, min(kernel, height, width))
        total += n_in * n_out * kernel * kernel + n_out + (2 * n_out if encoder.layer_norm else 0)
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    return total, sizes[-1] * max(height, 1) * max(width, 1)


def _multi_input(encoder: Any, space: Any, latent: int) -> int:
    from agile_rl.nn.arch import is_image_space

    total, joined = 0, 0
    for child in getattr(space, "spaces", {}).values():
        if is_image_space(child):
            total += _cnn(encoder.cnn, tuple(child.shape), encoder.latent_dim)
            joined += encoder.latent_dim
        elif encoder.vector_space_mlp:
            mlp = encoder.mlp
            total += _mlp(_flat_size(child), mlp.hidden_size, encoder.latent_dim, mlp.layer_norm)
            joined += encoder.latent_dim
        else:
            joined += _flat_size(child)
    return total + (joined + 1) * latent
