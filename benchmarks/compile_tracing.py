"""What tracing a stacked pass costs torch.compile, with symbolic sizes and with fixed ones.

A stand-alone measurement of the part of ``--compile on``'s first-generation cost that no
cache on disk removes: dynamo's tracing of the Python and aot_autograd's tracing of the
forward and backward, which every process pays again for each compiled variant. The pass is
the shape of agile's compiled ones (``plugins/agile_rl/runtime/compiled.py``): a population's
flat ``[k, P]`` parameters split inside the graph into each layer's weight, bias and layer
norm, then ``baddbmm``, layer norm and ReLU layer after layer, and a backward pass. It is
compiled with the ``aot_eager`` backend, so no kernel is generated and the figure is tracing
alone; each repeat compiles a function with a code object of its own (as agile's are), so
that it traces afresh, and the first repeat also pays for torch's imports and warm-up::

    python benchmarks/compile_tracing.py [--repeats 3] [--widths 64 72 64 2] [--fake-tensor-cache]

It prints seconds per compile with every size symbolic (``dynamic=True``, how agile compiles,
so that node and batch-size mutations do not compile again) and with every size fixed
(``dynamic=False``, one compile per shape), and the median of the repeats after the first.
Fake tensors' dispatch cache is off, as agile compiles; ``--fake-tensor-cache`` leaves it on
(torch's default).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import types
from collections.abc import Callable, Sequence

import torch
import torch.fx.experimental._config as shapes
from torch.nn import functional

Shape = tuple[int, ...]


def layer_shapes(widths: Sequence[int], inputs: int) -> list[Shape]:
    """Each layer's weight, bias, norm weight and norm bias, in the flat buffer's order."""
    found: list[Shape] = []
    previous = inputs
    for width in widths:
        found += [(width, previous), (width,), (width,), (width,)]
        previous = width
    return found


def stacked_pass(flat: torch.Tensor, masks: list[torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
    """The stacked MLP: parameters split from ``flat``, widths read from the masks."""
    found = layer_shapes([mask.shape[-1] for mask in masks], obs.shape[-1])
    pieces = flat.split([math.prod(shape) for shape in found], dim=1)
    views = [piece.view(flat.shape[0], *shape) for piece, shape in zip(pieces, found, strict=True)]
    x = obs
    for layer in range(len(masks)):
        weight, bias, gain, shift = views[4 * layer : 4 * layer + 4]
        x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        x = functional.layer_norm(x, x.shape[-1:]) * gain.unsqueeze(1) + shift.unsqueeze(1)
        x = torch.relu(x) * masks[layer].unsqueeze(1)
    return x


def fresh(function: Callable[..., torch.Tensor], number: int) -> Callable[..., torch.Tensor]:
    """``function`` with a code object of its own, which dynamo has not traced."""
    name = f"{function.__name__}_{number}"
    code = function.__code__.replace(co_name=name)
    return types.FunctionType(code, function.__globals__, name)


def compile_seconds(dynamic: bool, repeats: int, widths: Sequence[int]) -> list[float]:
    members, batch, inputs = 4, 64, 4
    sizes = [math.prod(shape) for shape in layer_shapes(widths, inputs)]
    flat = torch.randn(members, sum(sizes), requires_grad=True)
    masks = [torch.ones(members, width) for width in widths]
    obs = torch.randn(members, batch, inputs)
    seconds = []
    for number in range(repeats):
        compiled = torch.compile(fresh(stacked_pass, number), dynamic=dynamic, backend="aot_eager")
        start = time.perf_counter()
        compiled(flat, masks, obs).sum().backward()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 72, 64, 2])
    parser.add_argument("--fake-tensor-cache", action="store_true", help="torch's default")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.fake_tensor_cache_enabled = args.fake_tensor_cache
    shapes.backed_size_oblivious = False  # as agile compiles (compiled._configure)
    shapes.use_duck_shape = False
    for dynamic in (True, False):
        seconds = compile_seconds(dynamic, args.repeats, args.widths)
        label = "symbolic sizes" if dynamic else "fixed sizes"
        steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
        listed = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"{label:<15} {listed} s; median after the first {steady:.2f} s")


if __name__ == "__main__":
    main()
