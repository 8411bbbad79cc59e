"""Validate the reference implementation's training manifests with agile.

Finds every YAML file under ROOT (a checkout of the reference repository) whose top level has
``algorithm`` and ``environment`` sections, validates each against agile's installed plugins,
and prints one line per file (OK, or REFUSED with the first errors) and a summary. With
``--git DIR`` the files are read from a (bare) git directory at HEAD instead of a checkout::

    python benchmarks/reference_manifests.py --git /path/to/AgileRL.git --only llm
    python benchmarks/reference_manifests.py ~/src/AgileRL

It reports, it does not judge: the exit status is 0 whatever the manifests' fate.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from agile_cli import ManifestError, TrainingManifest, installed_registry

#: Lines of a refusal shown per file.
SHOWN_ERRORS = 3


def _git_files(git_dir: Path) -> Iterator[tuple[str, str]]:
    names = subprocess.run(
        ["git", "-C", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in sorted(names):
        if name.endswith((".yaml", ".yml")):
            text = subprocess.run(
                ["git", "-C", str(git_dir), "show", f"HEAD:{name}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            yield name, text


def _tree_files(root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
        if ".git" in path.parts or not path.is_file():
            continue
        yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8", errors="replace")


def _manifest(text: str) -> dict[str, Any] | None:
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
    args = parser.parse_args(argv)
    if (args.root is None) == (args.git is None):
        parser.error("give ROOT or --git DIR (one of them)")

    registry = installed_registry()
    llm_names = {name for name, entry in registry.algorithms.items() if entry.family == "llm"}
    files = _git_files(args.git) if args.git is not None else _tree_files(args.root)
    counts = {"OK": 0, "REFUSED": 0}
    for name, text in files:
        data = _manifest(text)
        if data is None:
            continue
        llm = _is_llm(data, llm_names)
        if (args.only == "llm" and not llm) or (args.only == "rl" and llm):
            continue
        try:
            manifest = TrainingManifest.get_validated(data, registry=registry)
        except ManifestError as exc:
            counts["REFUSED"] += 1
            lines = [f"{e.path}: {e.message}" for e in exc.errors]
            more = f" (+{len(lines) - SHOWN_ERRORS} more)" if len(lines) > SHOWN_ERRORS else ""
            print(f"REFUSED  {name}")
            for line in lines[:SHOWN_ERRORS]:
                print(f"           {line}")
            if more:
                print(f"          {more}")
            continue
        except Exception as exc:  # a crash in validation is worth a line too
            counts["REFUSED"] += 1
            print(f"REFUSED  {name}\n           crashed: {type(exc).__name__}: {exc}")
            continue
        counts["OK"] += 1
        warnings = len(getattr(manifest, "warnings", ()) or ())
        suffix = f" ({warnings} warnings)" if warnings else ""
        print(f"OK       {name}{suffix}")
    total = sum(counts.values())
    print(f"\n{total} manifests: {counts['OK']} OK, {counts['REFUSED']} refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
