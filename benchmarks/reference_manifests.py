"""Validate the reference implementation's training manifests with agile.

Finds every YAML file under ROOT (a checkout of the reference repository) whose top level has
``algorithm`` and ``environment`` sections, and every such YAML block in its documentation
(``.. code-block:: yaml`` in ``.rst`` files, ```` ```yaml ```` fences in ``.md`` files, shown as
``path#block-N``, N counting the file's YAML blocks from 1), validates each against agile's
installed plugins, and prints one line per manifest (OK, or REFUSED with the first errors) and
a summary. With ``--git DIR`` the files are read from a (bare) git directory at HEAD instead of
a checkout::

    python benchmarks/reference_manifests.py --git /path/to/AgileRL.git --only llm
    python benchmarks/reference_manifests.py ~/src/AgileRL

It reports, it does not judge: the exit status is 0 whatever the manifests' fate.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from agile_cli import ManifestError, TrainingManifest
from agile_cli.helpers import installed_registry

#: Lines of a refusal shown per file.
SHOWN_ERRORS = 3
#: Files read as manifests, and files whose YAML blocks are.
YAML_ENDINGS = (".yaml", ".yml")
DOC_ENDINGS = (".rst", ".md")

#: The line opening a YAML block: an reStructuredText directive, or a Markdown fence.
_RST_OPENING = re.compile(r"^(?P<indent>[ \t]*)\.\. +(?:code-block|code|sourcecode):: *ya?ml\s*$")
_MD_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}) *ya?ml\b.*$")


def _git_files(git_dir: Path) -> Iterator[tuple[str, str]]:
    """The YAML and documentation files at HEAD, read through one ``git cat-file``."""
    names = subprocess.run(
        ["git", "-C", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    wanted = sorted(name for name in names if name.endswith(YAML_ENDINGS + DOC_ENDINGS))
    request = "".join(f"HEAD:{name}\n" for name in wanted).encode()
    out = subprocess.run(
        ["git", "-C", str(git_dir), "cat-file", "--batch"],
        input=request,
        capture_output=True,
        check=True,
    ).stdout
    position = 0
    for name in wanted:
        end = out.index(b"\n", position)
        header = out[position:end].split()
        position = end + 1
        if len(header) != 3:  # "<name> missing" (e.g. a Git LFS object never fetched)
            continue
        size = int(header[2])
        yield name, out[position : position + size].decode("utf-8", errors="replace")
        position += size + 1


def tree_files(root: Path) -> Iterator[tuple[str, str]]:
    paths = [p for ending in YAML_ENDINGS + DOC_ENDINGS for p in root.rglob(f"*{ending}")]
    for path in sorted(paths):
        if ".git" in path.parts or not path.is_file():
            continue
        yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8", errors="replace")


def yaml_blocks(text: str) -> list[str]:
    """The YAML code blocks of a documentation page, in order, each dedented."""
    lines = text.splitlines()
    blocks: list[str] = []
    index = 0
    while index < len(lines):
        rst, md = _RST_OPENING.match(lines[index]), _MD_OPENING.match(lines[index])
        if rst:
            body, index = _rst_body(lines, index + 1, len(rst["indent"].expandtabs()))
        elif md:
            body, index = _fenced_body(lines, index + 1, md["fence"])
        else:
            index += 1
            continue
        blocks.append(textwrap.dedent("\n".join(body)))
    return blocks


def _rst_body(lines: list[str], index: int, indent: int) -> tuple[list[str], int]:
    """A directive's content: its option lines skipped, then every line indented deeper than
    the directive (blank lines included) up to the first that is not."""
    while index < len(lines) and lines[index].strip().startswith(":"):
        index += 1  # :caption:, :linenos:, ...
    body: list[str] = []
    while index < len(lines):
        line = lines[index]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
        index += 1
    return body, index


def _fenced_body(lines: list[str], index: int, fence: str) -> tuple[list[str], int]:
    body: list[str] = []
    while index < len(lines) and not lines[index].strip().startswith(fence):
        body.append(lines[index])
        index += 1
    return body, index + 1


def candidates(files: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """``(label, text)`` of each YAML file and each YAML block of a documentation file."""
    for name, text in files:
        if name.endswith(YAML_ENDINGS):
            yield name, text
        elif name.endswith(DOC_ENDINGS):
            for number, block in enumerate(yaml_blocks(text), start=1):
                yield f"{name}#block-{number}", block


def parsed_manifest(text: str) -> dict[str, Any] | None:
    """The parsed manifest, or None when the file is not one (or not YAML)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(data, dict) and "algorithm" in data and "environment" in data:
        return data
    return None


def _is_llm(data: dict[str, Any], llm_names: set[str]) -> bool:
    algorithm = data.get("algorithm")
    name = algorithm.get("name") if isinstance(algorithm, dict) else algorithm
    return str(name) in llm_names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, help="a checkout of the reference")
    parser.add_argument("--git", type=Path, help="a (bare) git directory, read at HEAD")
    parser.add_argument("--only", choices=("llm", "rl", "all"), default="all")
    parser.add_argument("--no-docs", action="store_true", help="skip the YAML blocks of docs")
    args = parser.parse_args(argv)
    if (args.root is None) == (args.git is None):
        parser.error("give ROOT or --git DIR (one of them)")

    registry = installed_registry()
    llm_names = {name for name, entry in registry.algorithms.items() if entry.family == "llm"}
    files = _git_files(args.git) if args.git is not None else tree_files(args.root)
    counts = {"OK": 0, "REFUSED": 0}
    blocks = 0
    for name, text in candidates(files):
        data = parsed_manifest(text)
        if data is None or (args.no_docs and "#block-" in name):
            continue
        llm = _is_llm(data, llm_names)
        if (args.only == "llm" and not llm) or (args.only == "rl" and llm):
            continue
        counts["OK" if _report(name, data, registry) else "REFUSED"] += 1
        blocks += "#block-" in name
    total = sum(counts.values())
    print(
        f"\n{total} manifests ({total - blocks} files, {blocks} blocks in docs): "
        f"{counts['OK']} OK, {counts['REFUSED']} refused"
    )
    return 0


def _report(name: str, data: dict[str, Any], registry: Any) -> bool:
    """Validate one manifest and print its line(s); whether it was accepted."""
    try:
        manifest = TrainingManifest.get_validated(data, registry=registry)
    except ManifestError as exc:
        lines = [f"{e.path}: {e.message}" for e in exc.errors]
        print(f"REFUSED  {name}")
        for line in lines[:SHOWN_ERRORS]:
            print(f"           {line}")
        if len(lines) > SHOWN_ERRORS:
            print(f"           (+{len(lines) - SHOWN_ERRORS} more)")
        return False
    except Exception as exc:  # a crash in validation is worth a line too
        print(f"REFUSED  {name}\n           crashed: {type(exc).__name__}: {exc}")
        return False
    warnings = len(getattr(manifest, "warnings", ()) or ())
    suffix = f" ({warnings} warnings)" if warnings else ""
    print(f"OK       {name}{suffix}")
    return True


if __name__ == "__main__":
    sys.exit(main())
