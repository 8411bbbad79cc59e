"""Loading the model to fine-tune and its tokenizer, from disk only.

``pretrained_model_name_or_path`` is a local folder (e.g. one ``agile llm tiny-model`` made) or
a Hugging Face hub id already in the local cache. Nothing is downloaded: the hub is switched to
offline mode before ``transformers`` is imported, and every load passes
``local_files_only=True``, so a model that is not on this machine is an immediate, clear error
naming what to fetch, never a hang on the network.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

from agile_cli import TrainingError, UsageError
from agile_cli.helpers import available_memory, format_bytes, printable
from agile_llm.messages import error_detail

#: Set before transformers or huggingface_hub is imported: the run never reaches the network.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def go_offline() -> None:
    """Switch the Hugging Face libraries to their local cache for this process."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)


def require_stack() -> None:
    """Import the LLM stack, or say how to install it."""
    go_offline()
    try:
        import peft  # noqa: F401
        import transformers
    except ImportError as exc:
        raise TrainingError(
            f"LLM fine-tuning needs {exc.name}, which is not installed",
            "install it with `pip install transformers peft tokenizers datasets` or, in agile's "
            'folder, `pip install -e ".[llm]"`',
        ) from None
    # agile shows its own progress; the libraries' bars and deprecation notes are noise here.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


def load_tokenizer(path: str) -> Any:
    """The model's tokenizer, set up to pad prompts on the left for generation."""
    require_stack()
    from transformers import AutoTokenizer

    try:
        tokenizer = _as_written(AutoTokenizer.from_pretrained(path, local_files_only=True), path)
    except (OSError, ValueError) as exc:
        raise _not_here(path, exc) from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise TrainingError(f"the tokenizer of {path} has neither a pad nor an end token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


#: Text every tokenizer of a model folder must give back as it was read.
_PROBE = "Hello world, 12+3=15 (x) 'y'!"


def _round_trips(tokenizer: Any) -> bool:
    ids = tokenizer(_PROBE, add_special_tokens=False).input_ids
    return bool(tokenizer.decode(ids, skip_special_tokens=True) == _PROBE)


def _as_written(tokenizer: Any, path: str) -> Any:
    """The folder's tokenizer as its ``tokenizer.json`` writes it, where the one transformers
    built loses text that one keeps. transformers 5 builds a known family's tokenizer from its
    own class, by ``config.model_type``, taking only the vocabulary from the file: a character
    vocabulary under a Qwen2 config (the tiny model's) lost every space that way."""
    if _round_trips(tokenizer) or not (Path(path) / "tokenizer.json").is_file():
        return tokenizer
    from transformers import PreTrainedTokenizerFast

    written = PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return written if _round_trips(written) else tokenizer


def load_model(
    path: str, *, device: Any, attn_implementation: str | None = None, quantization: Any = None
) -> Any:
    """The causal language model at ``path``, frozen, in evaluation mode, on ``device``;
    quantised by bitsandbytes when ``quantization`` (AgileRL's presets or settings) asks.

    :raises UsageError: its weight files, or the model its config.json describes, exceed the
        memory available for them; its config.json asks for layers or tensors its weights do
        not hold, or holds tensors of other shapes (:mod:`agile_llm.folder`).
    :raises TrainingError: a quantised base is asked for where bitsandbytes cannot load one,
        or transformers cannot load the folder.
    """
    from agile_llm import folder as checks

    require_stack()
    refuse_pickles(path)
    config = quantization_config(quantization)
    check_folder(path, device, fits=config is None)
    from transformers import AutoModelForCausalLM

    # safetensors only: transformers would otherwise fall back to unpickling pytorch_model.bin.
    options: dict[str, Any] = {"local_files_only": True, "use_safetensors": True}
    options["output_loading_info"] = True
    if attn_implementation not in (None, "auto"):
        options["attn_implementation"] = attn_implementation
    if config is not None:
        require_bitsandbytes(device)
        options.update(quantization_config=config, device_map={"": device})
    else:  # other shapes are named by check_loaded, not raised on with a pointer to a log
        options["ignore_mismatched_sizes"] = True
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(path, **options)
    except Exception as exc:  # a stranger's config can make model code raise anything
        raise _not_here(path, exc) from None
    model, info = loaded
    if config is None:  # a quantiser adds and consumes tensors of its own as it loads
        checks.check_loaded(path, info)
    model.requires_grad_(False)
    # A quantised model is placed as it loads (and cannot be moved after).
    return (model if config is not None else model.to(device)).eval()


def check_folder(path: str, device: Any, *, fits: bool) -> None:
    """Hold the model folder's config.json, before the model is built, to the memory free
    where the weights would live (with ``fits``: :func:`check_fits`) and to the layers its
    weights hold (:func:`agile_llm.folder.check_layers`)."""
    from agile_llm import folder as checks

    found = model_folder(path)
    config = checks.read_config(found) if found is not None else None
    if fits:
        check_fits(path, device, config)
    if found is not None and config is not None:
        checks.check_layers(found, config)


#: AgileRL's quantisation presets, by the form they take without case or spaces.
INT8_PRESETS = frozenset({"int8"})
NF4_PRESETS = frozenset({"nf4", "4bit", "4-bit", "bnb-4bit", "bnb_4bit"})
_DTYPE_SETTINGS = ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage")


def quantization_config(value: str | dict[str, Any] | None) -> Any:
    """``algorithm.quantization`` as a transformers ``BitsAndBytesConfig``, as AgileRL reads
    it: ``int8`` (LLM.int8() weights), ``nf4`` and its aliases (4-bit NF4, bfloat16 compute
    and storage, double quantisation: the QLoRA recipe), or a mapping of the config's own
    settings (dtype names such as ``bfloat16`` allowed); None for ``none`` or no value."""
    if value is None:
        return None
    preset = "".join(value.split()).lower() if isinstance(value, str) else None
    if preset == "none":
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if preset in INT8_PRESETS:
        return BitsAndBytesConfig(load_in_8bit=True)
    if preset in NF4_PRESETS:
        return BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_quant_storage=torch.bfloat16, bnb_4bit_use_double_quant=True,
        )  # fmt: skip
    settings = dict(value) if isinstance(value, dict) else {}
    for name in _DTYPE_SETTINGS:
        if isinstance(settings.get(name), str):
            settings[name] = getattr(torch, settings[name].removeprefix("torch."))
    try:
        return BitsAndBytesConfig(**settings)
    except (TypeError, ValueError) as error:
        raise UsageError(
            f"algorithm.quantization: not bitsandbytes settings ({error_detail(error)})",
            "use a preset (int8, nf4) or BitsAndBytesConfig's own keyword arguments",
        ) from None


def require_bitsandbytes(device: Any) -> None:
    """Refuse a quantised base where bitsandbytes cannot load one: off a CUDA device, or
    without the package."""
    where = getattr(device, "type", str(device))
    if where != "cuda":
        raise TrainingError(
            f"algorithm.quantization: bitsandbytes loads a quantised base on a CUDA GPU, and "
            f"this run is on {where}",
            "train with --device cuda, or without quantisation: --set algorithm.quantization=null",
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise TrainingError(
            "algorithm.quantization: the bitsandbytes package is not installed",
            "pip install bitsandbytes, or train with --set algorithm.quantization=null",
        )


#: Files that hold a model's weights.
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
#: Weight files that are pickles, which can run any code they hold when unpickled.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt")


def model_folder(path: str) -> Path | None:
    """The folder of the model's files: a local folder, or its snapshot in the local Hugging
    Face cache; None when there is none (loading then says why)."""
    folder = Path(path)
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=True))
    except Exception:  # not cached, or not a hub id: loading reports it
        return None


def weight_bytes(path: str) -> int | None:
    """The size of the model's weight files; None when they cannot be found."""
    folder = model_folder(path)
    if folder is None:
        return None
    files = {file for pattern in WEIGHT_FILES for file in folder.glob(pattern)}
    return sum(file.stat().st_size for file in files) or None


def refuse_pickles(path: str) -> None:
    """Refuse a model whose weights are only pickles (``pytorch_model.bin``): agile loads
    safetensors alone, which hold data and nothing that runs."""
    folder = model_folder(path)
    if folder is None or any(folder.glob("*.safetensors")):
        return
    pickles = sorted({file.name for pattern in PICKLED_WEIGHTS for file in folder.glob(pattern)})
    if pickles:
        names = printable(", ".join(pickles[:3])) + (", ..." if len(pickles) > 3 else "")
        what = "a pickle" if len(pickles) == 1 else "pickles"
        raise UsageError(
            f"{path} holds only {names}, {what} agile does not load (unpickling a file can run "
            "any code it holds)",
            "convert it to safetensors where you trust it, e.g. "
            "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(DIR), or use a release "
            "of the model with model.safetensors",
        )


def check_fits(path: str, device: Any, config: dict[str, Any] | None = None) -> None:
    """Refuse a model whose weights alone exceed the memory free where they would live (a
    lower bound: activations, adapters and optimizer state come on top): the weight files'
    size, or the model ``config`` (its config.json) describes where that is larger (before
    transformers builds it).
    """
    from agile_llm.folder import estimate

    needed = weight_bytes(path)
    described = estimate(config) if config is not None else None
    on_cuda = getattr(device, "type", "cpu") == "cuda"
    free = _free_on_device(device) if on_cuda else available_memory()
    where = str(device) if on_cuda else "this machine"
    if free is not None and described is not None and described.nbytes > max(needed or 0, free):
        raise UsageError(
            f"the config.json of {path} gives {described.field}: a model of "
            f"{described.detail}, {format_bytes(described.nbytes)}, more than the "
            f"{format_bytes(free)} {where} has free (its weight files take "
            f"{format_bytes(needed or 0)})",
            "check the sizes in its config.json against the model's; fine-tune a smaller "
            "model, or train where there is more memory",
        )
    if needed is None or free is None or needed <= free:
        return
    raise UsageError(
        f"the weights of {path} take {format_bytes(needed)}, more than the "
        f"{format_bytes(free)} {where} has free",
        "fine-tune a smaller model, or train where there is more memory",
    )


def _free_on_device(device: Any) -> int:
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def _not_here(path: str, exc: Exception) -> TrainingError:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return TrainingError(
            f"loading {path} ran out of memory ({type(exc).__name__}: {error_detail(exc)})",
            "fine-tune a smaller model, or train where there is more memory",
        )
    if Path(path).exists():
        return TrainingError(
            f"{path} is not a model folder transformers can load: {type(exc).__name__}: "
            f"{error_detail(exc)}",
            "point network.pretrained_model_name_or_path at a folder written by "
            "save_pretrained (config.json, weights and tokenizer files)",
        )
    return TrainingError(
        f"model '{path}' is neither a local folder nor in the Hugging Face cache, and agile "
        "never downloads during a run",
        f"fetch it where there is network (hf download {path}) into this machine's cache, "
        "point pretrained_model_name_or_path at a local folder, or make a tiny local model "
        "with: agile llm tiny-model DIR",
    )
