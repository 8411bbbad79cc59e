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
