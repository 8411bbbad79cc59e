"""A model folder, checked before its model is built and after its weights are loaded.

A folder from a stranger can describe in ``config.json`` a model far larger than its weights
(``num_hidden_layers: 200000`` over a checkpoint of two layers): transformers would build all
of it, at random, for minutes, load the two layers the file holds and leave the rest random,
saying so only in a log agile silences. So before building the model agile reads
``config.json`` (at most :data:`CONFIG_BYTES`, nested at most
:data:`~agile_llm.data.MAX_NESTING` deep), estimates from its sizes the parameters the model
will have (:func:`estimate`, a lower bound compared with the memory free) and counts the layers
the safetensors files hold, from their headers alone (:func:`check_layers`); after loading, a
model with weights the files did not hold, held at other shapes, or held with no place for them
is refused (:func:`check_loaded`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agile_cli import UsageError
from agile_cli.helpers import format_bytes, printable
from agile_llm.data import MAX_NESTING, nesting
from agile_llm.messages import error_detail

#: The largest config.json agile reads (real ones take a few kilobytes).
CONFIG_BYTES = 4 << 20
#: Bytes a parameter takes, by the dtype config.json names (the dtype transformers loads).
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
#: The names config.json gives each size, by model family.
_SIZES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "expert_size": ("moe_intermediate_size", "intermediate_size"),
}
#: ``<stack>.<i>.`` (``model.layers.0.``): where a weight's name says which layer it is in.
_LAYER = re.compile(r"^((?:.*?\.)?(?:layers|h|blocks|layer))\.(\d+)\.")
_HINT = (
    "use the config.json the weights were saved with (save_pretrained writes both), or point "
    "network.pretrained_model_name_or_path at another model"
)


def read_config(folder: Path) -> dict[str, Any] | None:
    """The model's ``config.json``; None where the folder has none (loading says so).

    :raises UsageError: it is larger than :data:`CONFIG_BYTES`, not a JSON object, or nested
        deeper than :data:`~agile_llm.data.MAX_NESTING`.
    """
    file = folder / "config.json"
    if not file.is_file():
        return None
    if file.stat().st_size > CONFIG_BYTES:
        raise UsageError(
            f"{file} takes {format_bytes(file.stat().st_size)}, more than the "
            f"{format_bytes(CONFIG_BYTES)} agile reads of a model's config", _HINT,
        )  # fmt: skip
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError
        what = "nests too deep" if isinstance(error, RecursionError) else error_detail(error)
        raise UsageError(f"{file} is not a JSON object ({what})", _HINT) from None
    if not isinstance(config, dict) or nesting(config) > MAX_NESTING:
        raise UsageError(
            f"{file} is not a JSON object of sizes nested at most {MAX_NESTING} deep", _HINT
        )
    return config


@dataclass(frozen=True)
class Estimate:
    """The model config.json describes: ``parameters`` (a lower bound), their ``nbytes``,
    ``field`` (the size that makes most of them, as ``name value``) and ``detail``."""

    parameters: int
    nbytes: int
    field: str
    detail: str


def estimate(config: dict[str, Any]) -> Estimate | None:
    """The parameters config.json's sizes make at least: the embeddings (twice when the
    output layer is not tied to them) and, in each layer, a query and an output projection
    (``2 h^2``) and an up and a down one (``2 h i``; ``i`` is ``2 h`` where the config gives
    none, half of what such models use, and each expert's for a mixture of experts); None
    without a hidden size. Real models hold more (keys, values, a gate, norms, positions)."""
    sizes = config if _size(config, "hidden_size") else config.get("text_config")
    found = _size(sizes, "hidden_size") if isinstance(sizes, dict) else None
    if not isinstance(sizes, dict) or found is None:
        return None
    hidden = found[1]
    layers, vocab = _size(sizes, "num_hidden_layers"), _size(sizes, "vocab_size")
    inner, experts = _size(sizes, "intermediate_size"), _size(sizes, "experts")
    per_layer = 2 * hidden * hidden + 2 * hidden * _mlp_width(sizes, hidden)
    tied = sizes.get("tie_word_embeddings", config.get("tie_word_embeddings", True)) is not False
    embeddings = vocab[1] * hidden * (1 if tied else 2) if vocab else 0
    stack = per_layer * layers[1] if layers else 0
    dtype = str(sizes.get("dtype") or sizes.get("torch_dtype") or "float32").removeprefix("torch.")
    parameters = embeddings + stack
    biggest = layers if layers and stack >= embeddings else vocab or layers
    field = f"{biggest[0]} {biggest[1]:,}" if biggest else f"hidden_size {hidden:,}"
    shown = [f"{size[0]} {size[1]:,}" for size in (layers, vocab, inner, experts) if size]
    detail = f"about {parameters:,} parameters in {dtype} from hidden_size {hidden:,}"
    detail += f", {', '.join(shown)}" if shown else ""
    return Estimate(parameters, parameters * DTYPE_BYTES.get(dtype, 4), field, detail)


def _mlp_width(sizes: dict[str, Any], hidden: int) -> int:
    """The width of a layer's MLP: ``intermediate_size`` (``2 h`` where none is given), or
    the experts' together in a mixture of experts (where a few layers may instead hold one
    wider MLP, they hold fewer parameters than all the experts: a lower bound still)."""
    width = (_size(sizes, "intermediate_size") or ("", 2 * hidden))[1]
    experts = _size(sizes, "experts")
    return experts[1] * (_size(sizes, "expert_size") or ("", width))[1] if experts else width


def _size(config: dict[str, Any], name: str) -> tuple[str, int] | None:
    """``(field, value)`` of the first positive integer config.json gives the size under
    one of its names."""
    for key in _SIZES[name]:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def weight_names(folder: Path) -> list[str]:
    """The names of the tensors in the folder's safetensors files, read from their headers.

    :raises UsageError: a file's header cannot be read.
    """
    from safetensors import SafetensorError, safe_open

    names: list[str] = []
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as weights:
                names += list(weights.keys())
        except (OSError, SafetensorError) as error:
            raise UsageError(
                f"{file} cannot be read as safetensors ({error_detail(error)})",
                "use a model folder that save_pretrained wrote whole",
            ) from None
    return names


def check_layers(folder: Path, config: dict[str, Any]) -> None:
    """Refuse a config.json whose ``num_hidden_layers`` asks for more layers than any stack of
    layers in the weights holds, before the model is built (a stack is the weights named
    ``<prefix>.layers.<i>.``, ``<prefix>.h.<i>.`` or the like)."""
    sizes = config if _size(config, "num_hidden_layers") else config.get("text_config")
    layers = _size(sizes, "num_hidden_layers") if isinstance(sizes, dict) else None
    if layers is None:
        return
    stacks: defaultdict[str, set[int]] = defaultdict(set)
    for name in weight_names(folder):
        match = _LAYER.match(name)
        if match:
            stacks[match.group(1)].add(int(match.group(2)))
    if not stacks or any(len(held) >= layers[1] for held in stacks.values()):
        return
    prefix, held = max(stacks.items(), key=lambda stack: len(stack[1]))
    raise UsageError(
        f"{folder / 'config.json'} gives {layers[0]} {layers[1]:,}, and the weights in "
        f"{folder} hold {len(held):,} layer{'s' if len(held) != 1 else ''} "
        f"({printable(prefix)}.{min(held)} to {printable(prefix)}.{max(held)}): the rest "
        "would be random", _HINT,
    )  # fmt: skip


def check_loaded(path: str, info: dict[str, Any]) -> None:
    """Refuse a loaded model whose weights did not all come from its files.

    :param path: the model, as the manifest names it.
    :param info: transformers' loading info (``output_loading_info``): ``missing_keys``,
        ``mismatched_keys`` (name, shape saved, shape wanted) and ``unexpected_keys``; weights
        it ties or makes itself are in none of them.
    :raises UsageError: any of them is not empty.
    """
    missing = sorted(str(key) for key in info.get("missing_keys") or ())
    if missing:
        raise UsageError(
            f"the weights of {path} lack {_count(missing, 'tensor')} of the model its "
            f"config.json describes ({_first(missing)}), which would start at random", _HINT,
        )  # fmt: skip
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda found: str(found[0]))
    if mismatched:
        name, saved, wanted = mismatched[0]
        raise UsageError(
            f"the weights of {path} do not fit the model its config.json describes: "
            f"{_count(mismatched, 'tensor')} differ in shape, the first {printable(str(name))} "
            f"({list(saved)} in the weights, {list(wanted)} by the config)", _HINT,
        )  # fmt: skip
    unexpected = sorted(str(key) for key in info.get("unexpected_keys") or ())
    if unexpected:
        raise UsageError(
            f"the weights of {path} hold {_count(unexpected, 'tensor')} the model its "
            f"config.json describes has no place for ({_first(unexpected)})", _HINT,
        )  # fmt: skip


def _count(items: list[Any], noun: str) -> str:
    return f"{len(items):,} {noun}{'s' if len(items) != 1 else ''}"


def _first(names: list[str], shown: int = 3) -> str:
    return printable(", ".join(names[:shown])) + (", ..." if len(names) > shown else "")
