"""``agile llm``: tools for LLM fine-tuning."""

from __future__ import annotations

from pathlib import Path

import click

from agile_cli import UsageError


@click.group(name="llm")
def llm() -> None:
    """Tools for LLM fine-tuning (the llm extra: pip install -e ".[llm]" in agile's folder)."""


@llm.command(name="tiny-model")
@click.argument("out", type=click.Path(path_type=Path, file_okay=False))
@click.option("--steps", type=click.IntRange(min=1), default=300, show_default=True,
              help="Full-training steps that teach the base to copy its input.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Seed of the weights and the data.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it holds files.")
def tiny_model(out: Path, steps: int, seed: int, overwrite: bool) -> None:
    """Make a tiny local causal LM and character tokenizer in OUT, offline (about 80k
    parameters, about 6 s on two CPU cores), for trying LLM fine-tuning on any machine."""
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"{out} is not empty", "choose another folder or pass --overwrite")
    from agile_llm.tiny import make_tiny_model

    try:
        import tokenizers  # noqa: F401 (checked before anything is built)
        import transformers  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"the LLM stack is not installed ({exc.name} is missing)",
            "install it with `pip install transformers peft tokenizers datasets` or, in agile's "
            'folder, `pip install -e ".[llm]"`',
        ) from None
    report = make_tiny_model(out, steps=steps, seed=seed)
    click.echo(
        f"tiny model in {report.path}: {report.parameters:,} parameters, "
        f"{report.vocabulary} tokens; copy loss {report.first_loss:.2f} -> "
        f"{report.copy_loss:.2f} after {steps} steps ({report.seconds:.1f} s)"
    )


@llm.command(name="merge")
@click.argument("source", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write the model folder here (default: merged/ beside the adapter).",
)
@click.option(
    "--base",
    default=None,
    help="The base model's folder (default: the one the "
    "adapter's adapter_config.json names, as training read it).",
)
@click.option("--force", is_flag=True, help="Replace the folder if it exists.")
def merge(source: Path, out: Path | None, base: str | None, force: bool) -> None:
    """Write a run's elite merged into its base model as a Hugging Face model folder, which
    transformers or vLLM load without PEFT. SOURCE is a run folder (its elite/) or an adapter
    folder (what training.checkpoint_export: {format: merged} writes during a run)."""
    adapter = source / "elite" if (source / "elite").is_dir() else source
    if not (adapter / "adapter_config.json").is_file():
        raise UsageError(
            f"{source} is neither a run folder with an elite/ adapter nor an adapter folder",
            "give the folder agile train wrote (runs/NAME) or its elite/",
        )
    target = out or adapter.parent / "merged"
    if target.exists() and any(target.iterdir()) and not force:
        raise UsageError(f"{target} is not empty", "choose another --out or pass --force")
    from agile_llm.export import write_merged

    written = write_merged(base or _adapter_base(adapter), adapter, target)
    click.echo(f"merged model in {written}")


def _adapter_base(adapter: Path) -> str:
    """The base model an adapter folder's ``adapter_config.json`` names."""
    import json

    try:
        named = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UsageError(f"{adapter}/adapter_config.json cannot be read ({error})",
                         "give the base model with --base") from None  # fmt: skip
    base = named.get("base_model_name_or_path") if isinstance(named, dict) else None
    if not isinstance(base, str) or not base:
        raise UsageError(f"{adapter}/adapter_config.json names no base_model_name_or_path",
                         "give the base model with --base")  # fmt: skip
    return base
