"""Stacked forward passes compiled with ``torch.compile``, once per network layout.

Eager, a stacked MLP's forward and backward launch a handful of small operations per layer
(the batched product, the layer norm, its scale and shift, the activation, the padding mask),
each reading and writing the whole ``[k, B, W]`` activation; the layer norms and elementwise
operations take more time than the products (see ``benchmarks/update_floor.py``). Compiled,
each layer is its product and one fused loop, forward and backward alike.

**Shapes that mutations do not break.** What is compiled is a function of tensors only, one
per :class:`Program`: the layout of a network with its widths left out (layers, layer norms,
activations, heads), which node mutations, batch-size mutations and the number of members in
a group do not change. Every size is symbolic (``dynamic=True``), and every hidden layer takes
its padding mask whether its members' widths differ or not (a mask of ones costs nothing fused
into the activation), so a group padded differently next generation runs the same compiled
code: a population compiles once per layout and grad mode, in the first generation
(:func:`compilations` counts, and the runners report the count in ``metrics.jsonl``), and
once more for a group of one member or a batch of one row where a run has them (see
:func:`_configure`).

**On disk.** Inductor's graph caches live under :func:`cache_dir` (``~/.cache/agile/compile``
unless ``TORCHINDUCTOR_CACHE_DIR`` says otherwise), so a second run of a layout loads its
kernels instead of compiling them.

**Measured units.** Where a member's units' gradients are summed for its dormant-neuron resets
(:class:`~agile_rl.nn.neurons.GradientSums`), an eager pass hooks each pre-activation; a
compiled pass instead adds a zero *probe* to it (the same values), and the group's gradient
step asks for the probe's gradient, the pre-activations', beside the parameters'
(:meth:`~agile_rl.runtime.group.MemberGroup.minimise`). A pass takes one probe ``[k, B, U]``
for all its measured layers' ``U`` units, split inside the graph as the parameters are (one
input for dynamo to trace and guard, not one per layer).

**Masks.** A padded unit's pre-activation is zero; where the activation keeps zero at zero
(:data:`ZERO_AT_ZERO`) the mask is applied before it, which is the same function and
gradient, and lets inductor fuse the pass (masking after ReLU, it saved a boolean mask that
made the fused kernel 5x slower with probes on this CPU; see docs/performance.md).

**Calls.** A pass takes the stacked network's flat ``[k, P]`` parameters and splits them
inside the graph (:attr:`Program.parameters` says how), so that a call checks a handful of
tensors and the gradient comes back as one ``[k, P]`` tensor; each program, grad mode and
probing is a compiled function of its own, which keeps dynamo's per-call guard checks to the
tensors and grad mode (:func:`compiled_forward`). ReLU, LeakyReLU and ELU take their
gradients from their outputs (:class:`_FromOutput`): inductor would store a boolean mask, which
its CPU kernels write slowly.

What is not compiled runs eagerly: networks with convolutions (their arithmetic dwarfs the
launches), recurrent or noisy layers, and borrowed encoders.
"""

from __future__ import annotations

import math
import os
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agile_rl.nn.activations import ACTIVATIONS, make_activation
from agile_rl.nn.modules import MLP, BorrowedEncoder, EvolvableNetwork
from agile_rl.nn.noisy import NoisyLinear

#: How ``torch.compile`` is asked for: "on", "off", or "auto" (see :func:`resolve`).
MODES = ("auto", "on", "off")

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which the members' norms use

#: The most compiled variants one compiled function keeps (torch's default is 8).
_VARIANTS = 256

#: A dimension of a parameter: the width of a masked layer (its name), of the encoder's input
#: ("in"), of the heads' input ("head_in": the latent, and the extra input), or a fixed one.
Width = str | int


@dataclass(frozen=True)
class Part:
    """One MLP of a network (its encoder or a head): where its parameters are, whether each
    hidden layer has a layer norm, the hidden activation's and the output's activation names,
    whether the output is layer-normalised (a normalised latent) and masked (an encoder's
    latent, whose width mutations change; a head's outputs are the action's)."""

    prefix: str
    norms: tuple[bool, ...]
    activations: tuple[str, ...]
    out_activation: str
    out_norm: bool
    out_masked: bool


@dataclass(frozen=True)
class Program:
    """A network's layout without its widths: its encoder, its heads by name, whether the
    heads also read an extra input (a critic's actions), and each parameter, in the order of
    the stacked network's flat buffer, with its shape in :data:`Width` terms."""

    encoder: Part
    heads: tuple[tuple[str, Part], ...]
    head_extra: bool
    parameters: tuple[tuple[str, tuple[Width, ...]], ...]


def program_of(network: nn.Module) -> Program | None:
    """The :class:`Program` of ``network``, or None where its forward pass is not compiled (see
    the module)."""
    if not isinstance(network, EvolvableNetwork) or network.recurrent:
        return None
    if isinstance(network.encoder, BorrowedEncoder) or not isinstance(network.encoder, MLP):
        return None
    if any(isinstance(module, NoisyLinear) for module in network.modules()):
        return None
    heads = []
    for name, head in network.heads.items():
        if not isinstance(head, MLP):
            return None
        heads.append((name, _part(f"heads.{name}", head, masked=False)))
    encoder = _part("encoder", network.encoder, masked=True)
    dims = _dimensions(encoder, heads, network.head_sizes)
    names = [name for name, _ in network.named_parameters()]
    if any(name not in dims for name in names):
        return None
    parameters = tuple((name, dims[name]) for name in names)
    program = Program(encoder, tuple(heads), bool(network.head_extra), parameters)
    if not _activation_names(program) <= {*ACTIVATIONS, "Identity"}:
        return None
    return program if _shapes_hold(program, network) else None


def _dimensions(
    encoder: Part, heads: list[tuple[str, Part]], sizes: dict[str, int]
) -> dict[str, tuple[Width, ...]]:
    """Every parameter's shape, by name, in :data:`Width` terms."""
    dims: dict[str, tuple[Width, ...]] = {}
    parts: list[tuple[Part, Width, Width]] = [(encoder, "in", "encoder.out")]
    parts += [(part, "head_in", sizes[name]) for name, part in heads]
    for part, inputs, outputs in parts:
        for index in range(len(part.norms)):
            layer = f"{part.prefix}.layers.{index}"
            dims[f"{layer}.weight"], dims[f"{layer}.bias"] = (layer, inputs), (layer,)
            for key in ("weight", "bias"):
                dims[f"{part.prefix}.norms.{index}.{key}"] = (layer,)
            inputs = layer
        dims[f"{part.prefix}.out.weight"] = (outputs, inputs)
        dims[f"{part.prefix}.out.bias"] = (outputs,)
    return dims


def _shapes_hold(program: Program, network: nn.Module) -> bool:
    """Whether :attr:`Program.parameters` gives ``network``'s own parameters' shapes."""
    own = dict(network.named_parameters())
    widths = {layer: own[f"{layer}.weight"].shape[0] for layer in masked_layers(program)}
    widths["in"] = own["encoder.layers.0.weight" if program.encoder.norms else
                       "encoder.out.weight"].shape[1]  # fmt: skip
    first = program.heads[0][1]
    key = f"{first.prefix}.layers.0.weight" if first.norms else f"{first.prefix}.out.weight"
    widths["head_in"] = own[key].shape[1]
    return all(
        tuple(own[name].shape) == tuple(widths[d] if isinstance(d, str) else d for d in dims)
        for name, dims in program.parameters
    )


def _activation_names(program: Program) -> set[str]:
    names = {*program.encoder.activations, program.encoder.out_activation}
    for _, part in program.heads:
        names |= {*part.activations, part.out_activation}
    return names


def _part(prefix: str, mlp: MLP, *, masked: bool) -> Part:
    norms = tuple(isinstance(norm, nn.LayerNorm) for norm in mlp.norms)
    activations = tuple(type(act).__name__ for act in mlp.acts)
    out_norm = isinstance(mlp.out_norm, nn.LayerNorm)
    return Part(prefix, norms, activations, type(mlp.out_act).__name__, out_norm, masked)


def masked_layers(program: Program) -> list[str]:
    """The layers whose outputs a compiled pass masks: every hidden layer, and the latent."""
    parts = [program.encoder, *(part for _, part in program.heads)]
    layers = [f"{p.prefix}.layers.{i}" for p in parts for i in range(len(p.norms))]
    return [*layers, "encoder.out"]


# -- the compiled function -------------------------------------------------------------------

Masks = dict[str, torch.Tensor]
Tensors = dict[str, torch.Tensor]
Forward = Callable[
    [torch.Tensor, Masks, torch.Tensor, torch.Tensor | None, torch.Tensor | None], Any
]

#: Activations whose value at zero is zero: masking their input is masking their output.
ZERO_AT_ZERO = frozenset({"ReLU", "Tanh", "GELU", "ELU", "LeakyReLU", "Identity"})
_compiled: dict[tuple[Program, bool, bool], Forward] = {}
_lock = threading.Lock()


def compiled_forward(program: Program, probed: bool) -> Forward:
    """The compiled forward pass of networks of ``program``: called with the stacked flat
    parameters ``[k, P]`` (laid out as :attr:`Program.parameters` says), the masks ``[k, W]``
    of :func:`masked_layers` (each member's real units 1, its padding 0), observations
    ``[k, B, ...]``, the extra head input or None, and the probe (see the module) added to the
    pre-activations of the layers :func:`masked_layers` names, their units side by side in
    that order (None unless ``probed``); returns every head's output ``[k, B, width]``.

    One compiled function per program, grad mode and ``probed``, each its own code object:
    dynamo then keeps one variant per function, and needs to guard only on what can change
    between calls of it (the tensors' sizes, strides and flags, and grad mode: see
    :func:`_guarded`), which checks in half the time of dynamo's full guards."""
    key = (program, torch.is_grad_enabled(), probed)
    forward = _compiled.get(key)
    if forward is None:
        with _lock:
            forward = _compiled.get(key) or _compile(program, len(_compiled))
            _compiled[key] = forward
    return forward


def _compile(program: Program, number: int) -> Forward:
    _configure()
    acts: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        name: make_activation(None if name == "Identity" else name)
        for name in _activation_names(program)
    }
    acts.update({name: f.apply for name, f in _FROM_OUTPUT.items() if name in acts})

    def forward(
        flat: torch.Tensor, masks: Masks, obs: torch.Tensor, extra: torch.Tensor | None,
        probe: torch.Tensor | None,
    ) -> Tensors:  # fmt: skip
        obs = obs.reshape(*obs.shape[:2], -1)
        if extra is not None:
            extra = extra.reshape(*extra.shape[:2], -1)
        views = _unflattened(program, flat, masks, obs, extra)
        pass_ = _Pass(acts, views, masks, None if probe is None else probe_parts(probe, masks))
        latent = pass_.mlp(program.encoder, obs)
        if extra is not None:
            latent = torch.cat([extra, latent], dim=-1)
        return {name: pass_.mlp(part, latent) for name, part in program.heads}

    name = f"stacked_forward_{number}"  # a code object of its own: see compiled_forward
    forward = types.FunctionType(
        forward.__code__.replace(co_name=name), forward.__globals__, name, None,
        forward.__closure__,
    )  # fmt: skip
    options: dict[str, str | int | bool | Callable[..., Any]] = {"guard_filter_fn": _guarded}
    return _timed(torch.compile(forward, dynamic=True, backend=_counted, options=options))


def _timed(compiled: Forward) -> Forward:
    """``compiled``, each call that compiled a graph timed whole into :func:`compilations`:
    dynamo's tracing, aot_autograd's of the forward and backward (which it compiles ahead of
    the first backward pass, its sizes being symbolic) and inductor's compiling or loading."""

    def call(
        flat: torch.Tensor, masks: Masks, obs: torch.Tensor, extra: torch.Tensor | None,
        probe: torch.Tensor | None,
    ) -> Tensors:  # fmt: skip
        graphs = _graphs[0]
        start = time.perf_counter()
        try:
            return compiled(flat, masks, obs, extra, probe)
        finally:
            if _graphs[0] != graphs:
                _graphs[1] += time.perf_counter() - start

    return call


def _unflattened(
    program: Program, flat: torch.Tensor, masks: Masks, obs: torch.Tensor,
    extra: torch.Tensor | None,
) -> Tensors:  # fmt: skip
    """The parameters ``[k, *shape]`` by name, split from ``flat``: split, so that the gradient
    of ``flat`` is their gradients joined (slices of symbolic offsets would scatter)."""
    widths: dict[Width, Any] = {layer: mask.shape[-1] for layer, mask in masks.items()}
    widths["in"] = obs.shape[-1]
    widths["head_in"] = widths["encoder.out"] + (0 if extra is None else extra.shape[-1])
    shapes = [[widths[d] if isinstance(d, str) else d for d in dims]
              for _, dims in program.parameters]  # fmt: skip
    sizes = [math.prod(shape) for shape in shapes]
    pieces = flat.split(sizes, dim=1)
    return {
        name: piece.view(flat.shape[0], *shape)
        for (name, _), piece, shape in zip(program.parameters, pieces, shapes, strict=True)
    }


def probe_parts(probe: torch.Tensor, masks: Masks) -> Tensors:
    """A probe ``[k, B, U]`` (or its gradient) split into each masked layer's ``[k, B, W]``, by
    layer: inside a compiled pass, and where the gradient step counts the probe's gradient."""
    pieces = probe.split([mask.shape[-1] for mask in masks.values()], dim=-1)
    return dict(zip(masks, pieces, strict=True))


def _guarded(guards: list[Any]) -> list[bool]:
    """The guards a compiled pass keeps: grad mode, the symbolic sizes' relations, and each
    input tensor's dtype, device, size, stride and requires_grad. What it drops (the keys of
    the dict of masks, whether the probe and the extra input are None, the closure)
    is fixed for one compiled function (:func:`compiled_forward`)."""
    return torch.compiler.keep_portable_guards_unsafe(guards)


@dataclass
class _Pass:
    """One compiled pass's activations, parameters, masks and probes."""

    acts: dict[str, Callable[[torch.Tensor], torch.Tensor]]
    views: Tensors
    masks: Masks
    probes: Tensors | None

    def mlp(self, part: Part, x: torch.Tensor) -> torch.Tensor:
        """What :meth:`~agile_rl.runtime.stacked.StackedNetwork._mlp` computes, every hidden
        layer masked."""
        for index, (norm, act) in enumerate(zip(part.norms, part.activations, strict=True)):
            layer = f"{part.prefix}.layers.{index}"
            x = self.linear(layer, x)
            mask, count = self.mask(layer)
            if norm:
                names = (f"{part.prefix}.norms.{index}.{key}" for key in ("weight", "bias"))
                weight, bias = (self.views[name].unsqueeze(1) for name in names)
                x = torch.addcmul(bias, masked_layer_norm(x, mask, count), weight)
            x = self.activated(act, self.probed(layer, x), mask)
        x = self.linear(f"{part.prefix}.out", x)
        if not part.out_masked:
            return self.acts[part.out_activation](x)
        mask, count = self.mask(f"{part.prefix}.out")
        if part.out_norm:
            x = masked_layer_norm(x, mask, count)
        return self.activated(part.out_activation, self.probed(f"{part.prefix}.out", x), mask)

    def activated(self, act: str, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``act(x)`` with the padded units masked (see the module)."""
        if act in ZERO_AT_ZERO:
            return self.acts[act](x * mask)
        return self.acts[act](x) * mask

    def probed(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        return x if self.probes is None else x + self.probes[layer]

    def mask(self, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer``'s mask ``[k, 1, W]`` and count of real units ``[k, 1, 1]``, from its
        ``[k, W]`` mask (one input fewer per layer for dynamo to trace and guard; a literal 1
        broadcasts where a size of 1 would not)."""
        mask = self.masks[layer]
        return mask.unsqueeze(1), mask.sum(-1).view(-1, 1, 1)

    def linear(self, layer: str, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.views[f"{layer}.weight"], self.views[f"{layer}.bias"]
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class _FromOutput(torch.autograd.Function):
    """An activation whose gradient is read off its output, which is saved anyway (the next
    layer's weight gradient reads it). Given the input instead, inductor saves the input's
    sign as a boolean tensor for the backward pass, and its CPU kernels store booleans 20x
    slower than eager does (``x <= 0`` on ``[4, 256, 256]``: 5.3 ms compiled against 0.24 ms
    eager, one thread; as a float, 0.22 ms)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)


class _ReLU(_FromOutput):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return grad * output.sign()  # 1 where the unit is active, else 0


class _LeakyReLU(_FromOutput):
    SLOPE = 0.01  # nn.LeakyReLU's default, which members' layers use

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, _LeakyReLU.SLOPE)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return grad * torch.where(output > 0, 1.0, _LeakyReLU.SLOPE)


class _ELU(_FromOutput):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.elu(x)  # alpha 1, nn.ELU's default

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return torch.where(output > 0, grad, grad * (output + 1.0))  # exp(x) = output + 1


#: The activations whose compiled passes take their gradients from their outputs.
_FROM_OUTPUT: dict[str, type[_FromOutput]] = {
    "ReLU": _ReLU, "LeakyReLU": _LeakyReLU, "ELU": _ELU,
}  # fmt: skip


def masked_layer_norm(x: torch.Tensor, mask: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``x`` ``[k, B, W]`` normalised over each member's own units (``mask`` ``[k, 1, W]``,
    ``count`` ``[k, 1, 1]`` of them), no affine part: eager and compiled passes alike."""
    mean = (x * mask).sum(-1, keepdim=True) / count
    centred = (x - mean) * mask
    variance = centred.pow(2).sum(-1, keepdim=True) / count
    return centred * torch.rsqrt(variance + LAYER_NORM_EPS)


# -- counting, caching, choosing -----------------------------------------------------------

_graphs = [0, 0.0]  # graphs compiled in this process, and the seconds it took


def compilations() -> tuple[int, float]:
    """How many graphs this process compiled so far, and the seconds compiling them took: the
    whole of each call that compiled one (:func:`_timed`), tracing included, which a warm
    cache on disk does not save (most of the 2-3 s a graph took here, warm: see
    docs/performance.md)."""
    return int(_graphs[0]), float(_graphs[1])


def _inductor(graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(graph, inputs)


#: What compiles a traced graph: inductor (tests may trace with a cheaper backend).
compiler: Callable[[torch.fx.GraphModule, list[Any]], Any] = _inductor


def _counted(graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    """:data:`compiler`, counted (:func:`_timed` times the call it compiles in)."""
    try:
        return compiler(graph, inputs)
    finally:
        _graphs[0] += 1


def cache_dir() -> Path:
    """Where compiled kernels are kept between runs: ``TORCHINDUCTOR_CACHE_DIR`` if set, else
    ``agile/compile`` in the user's cache folder (``XDG_CACHE_HOME``, default ``~/.cache``)."""
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agile" / "compile"


def _configure() -> None:
    """Point inductor at :func:`cache_dir`, let one traced function keep its variants, and
    keep sizes symbolic across generations (set before the first compilation)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir()))
    import torch._dynamo
    import torch.fx.experimental._config as shapes

    # Sizes of 1 (a group of one member, a batch of one row) compile a variant of their own,
    # once. Treating them as any other size (backed_size_oblivious) made every width static
    # in the passes with gradients: aot_autograd then compiles their backward ahead of the
    # first call with the forward's saved tensors restrided to concrete strides, and inductor
    # guards each width to its first value, so each generation's new widths compiled again.
    shapes.backed_size_oblivious = False
    # sizes that happen to be equal (4 members, 4 rows) are not assumed equal next time
    shapes.use_duck_shape = False
    # aot_autograd's cache (the traced forward and backward, on disk) skips graphs that call
    # an autograd.Function (the activations of _FromOutput) unless told: their forward and
    # backward are traced into the graph, so its key changes with their code (checked by hand:
    # a changed backward missed the cache). Warm, aot_autograd and inductor then take 3.5 s
    # instead of 10.6 over the DQN CartPole passes.
    import torch._functorch.config

    torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True
    config = torch._dynamo.config
    # Fake tensors' dispatch cache costs more than it saves when sizes are symbolic: building
    # each entry works through the outputs' size expressions in sympy. Without it the DQN
    # CartPole passes compiled in 8.6-10.9 s instead of 13.9-14.9 with a warm cache on disk
    # (65.2 s instead of 70.5 cold; docs/performance.md).
    config.fake_tensor_cache_enabled = False
    config.recompile_limit = max(config.recompile_limit, _VARIANTS)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, _VARIANTS)


def unavailable(device: torch.device) -> str | None:
    """Why inductor cannot compile for ``device`` here, completing "cannot compile: ..."; None
    where it can (CPU kernels need a working C++ compiler, CUDA ones Triton)."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "inductor's CUDA kernels need Triton, not installed"
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as error:  # inductor's own message names the compilers it tried
        return f"inductor's CPU kernels need a C++ compiler ({error})"
    return None


@contextmanager
def reported() -> Iterator[None]:
    """Inside, a failure of ``torch.compile`` (tracing a pass, or compiling its graph: in the
    forward pass, or in the backward pass, which inductor may compile when it first runs) is a
    :class:`~agile_cli.TrainingError` naming ``--compile off``, not torch's traceback."""
    try:
        yield
    except Exception as error:  # torch's exception types imported only on a failure's path
        from torch._dynamo.exc import BackendCompilerFailed, TorchDynamoException
        from torch._inductor.exc import InductorError

        from agile_cli import TrainingError

        if not isinstance(error, TorchDynamoException | InductorError):
            raise
        cause = error.inner_exception if isinstance(error, BackendCompilerFailed) else error
        text = (str(cause).strip().splitlines() or [""])[0][:300]
        raise TrainingError(
            f"--compile on: torch.compile failed: {type(cause).__name__}: {text}",
            "train with --compile off: eager passes compute the same",
        ) from error


def resolve(mode: str, device: torch.device) -> bool:
    """Whether stacked passes are compiled under ``mode`` on ``device``: "on" and "off" say so;
    "auto" compiles where it wins: see :data:`AUTO`."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return AUTO.get(device.type, False)


#: Where "auto" compiles, by device type: nowhere yet. On the CPU the compiled update won for
#: DQN and the larger PPO groups on CartPole and lost for the MuJoCo actor-critics
#: (docs/performance.md: DQN 1.50x, 1.21x, 1.33x at populations 4, 16, 64; PPO 0.85x, 1.13x,
#: 1.40x; TD3 0.94x and SAC 0.77x at 4); on CUDA it has not been measured.
AUTO: dict[str, bool] = {"cpu": False, "cuda": False}
