"""Writing an agent's greedy policy as a file that runs without agile: TorchScript, which
``torch.jit.load`` reads, or ONNX, which ``onnxruntime.InferenceSession`` runs.

The policy is the module :meth:`~agile_rl.Algorithm.export_policy` returns; it is traced on a
few observations sampled from its spaces, with the batch dimension left free. Torch and onnx
are imported here, on use.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, cast

from agile_cli.errors import AgileError, UsageError

if TYPE_CHECKING:
    import torch

    from agile_cli.member import Member, PolicyModule

FORMATS = {"onnx": ".onnx", "torchscript": ".ts"}
"""Each format and the suffix of its default file name."""

ONNX_OPSET = 17
TRACE_BATCH = 4  # observations the policy is traced on (any batch size runs afterwards)


def default_path(source: Path, fmt: str) -> Path:
    """``elite.<suffix>`` in a run folder, or next to the given ``.pt`` file."""
    stem = source / "elite" if source.is_dir() else source.with_suffix("")
    return stem.with_suffix(FORMATS[fmt])


def exported_policy(agent: Member, name: str) -> PolicyModule:
    """The agent's greedy policy module, on the CPU.

    :param name: the algorithm's name, for the refusal.
    :raises UsageError: the algorithm has no exported form, or this member has none.
    """
    try:
        policy = agent.export_policy()
    except NotImplementedError as error:
        raise UsageError(f"{name} cannot be exported ({error})") from None
    if policy is None:
        raise UsageError(
            f"{name} cannot be exported (it defines no standalone greedy policy)",
            "its plugin can add one by overriding Algorithm.export_policy",
        )
    return policy.cpu().eval()


def write(policy: PolicyModule, fmt: str, path: Path) -> None:
    """Write ``policy`` to ``path`` as ``fmt`` (``onnx`` or ``torchscript``), whole or not at
    all, replacing (never following) a link at ``path``.

    :raises AgileError: (exit 1) onnx is not installed.
    """
    import torch

    from agile_cli.training import files

    path.parent.mkdir(parents=True, exist_ok=True)
    example = policy.example_inputs(TRACE_BATCH)
    with torch.no_grad(), warnings.catch_warnings(), files.replacing(path) as written:
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        if fmt == "torchscript":
            # torch.jit.trace carries no annotations
            traced = torch.jit.trace(policy, example, check_trace=False)  # type: ignore[no-untyped-call]  # untyped in torch
            torch.jit.save(traced, str(written))
        else:
            _write_onnx(policy, example, written)


def _write_onnx(policy: PolicyModule, example: tuple[object, ...], path: Path) -> None:
    """The legacy (tracing) exporter: the dynamo one needs onnxscript, and these policies
    are plain feed-forward graphs."""
    if importlib.util.find_spec("onnx") is None:
        raise AgileError(
            "writing ONNX needs the onnx package",
            "install it with `pip install onnx onnxruntime` or, in agile's folder, "
            '`pip install -e ".[export]"`; or use --format torchscript',
        )
    import torch

    names = [*policy.input_names, *policy.output_names]
    module = cast("torch.nn.Module", policy)  # the contract: a torch module
    torch.onnx.export(
        module, tuple(example), str(path), input_names=policy.input_names,
        output_names=policy.output_names, dynamic_axes={name: {0: "batch"} for name in names},
        opset_version=ONNX_OPSET, dynamo=False,
    )  # fmt: skip


def describe(policy: PolicyModule, fmt: str, path: Path) -> list[str]:
    """What ``agile export`` prints: the inputs and outputs, and how to run the file."""
    import torch

    with torch.no_grad():
        outputs = policy(*policy.example_inputs(1))
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    lines = ["inputs:"]
    for name, tensor in zip(policy.input_names, policy.example_inputs(1), strict=True):
        lines.append(f"  {name}: {_shape(tensor)} {_dtype(tensor)}")
    lines.append("outputs:")
    for name, tensor in zip(policy.output_names, outputs, strict=True):
        lines.append(f"  {name}: {_shape(tensor)} {_dtype(tensor)}")
    return [*lines, "usage:", *(f"  {line}" for line in _usage(policy, fmt, path))]


def _usage(policy: PolicyModule, fmt: str, path: Path) -> list[str]:
    if fmt == "torchscript":
        args = ", ".join(policy.input_names)
        what = "a tensor" if len(policy.output_names) == 1 else "a tuple of tensors, one per output"
        return [
            "import torch",
            f'policy = torch.jit.load("{path}")',
            f"actions = policy({args})  # {what}, batch first",
        ]
    feeds = ", ".join(f'"{name}": {name}' for name in policy.input_names)
    return [
        "import onnxruntime",
        f'session = onnxruntime.InferenceSession("{path}")',
        f"actions = session.run(None, {{{feeds}}})  # numpy arrays, one per output",
    ]


def _shape(tensor: torch.Tensor) -> str:
    return "[" + ", ".join(["batch", *map(str, tensor.shape[1:])]) + "]"


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")
