"""Check that agilerl 2.58 itself accepts every manifest of ``tests/reference_258/``.

The corpus there is written in the manifest format of agilerl 2.58.0 (agilerl-arena 1.29.0's
models): the reinforcement-learning manifests in ``tests/reference_258/`` and the LLM
fine-tuning ones in ``tests/reference_258/llm/``; in each, the ``payload_*.yaml`` files are the
fuller form 2.58 writes back out. This script validates each ``*.yaml`` file of both folders
(or of DIR alone) with 2.58's own
``agilerl.arena.models.manifest.TrainingManifest.get_validated``, run from the repository root
as the manifests' data paths expect, so that the corpus stays a faithful sample of what 2.58
users write whatever agile makes of it. It prints one line per file (named from the corpus
folder, or from DIR), ``ok`` or ``FAIL`` with 2.58's errors, then a total; the exit status is 0
when every file validates, 1 when any does not, and 2 when the interpreter has no agilerl or
cannot be run.

agile's own venv does not have agilerl, so the validation runs in a subprocess of an
interpreter that does. Install the reference in a venv of its own::

    python -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install agilerl==2.58.0
    .venv/bin/python benchmarks/check_reference_258.py --python /tmp/refvenv/bin/python

Without ``--python`` the interpreter running this script is used, if it has agilerl.

With ``--agile-form``, each file is first read by agile (``agile validate --reference``, in
the interpreter running this script) and what agile writes back in 2.58's form is validated
instead: the way back from agile to the reference. agile reads each folder in a run of its
own; files agile does not read are skipped, and a run of agile that fails outright is reported.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "reference_258"
#: The folders checked when none is named: the RL manifests, then the LLM ones.
CORPUS_FOLDERS = (CORPUS, CORPUS / "llm")
INSTALL_HINT = (
    "install the reference in a separate venv (python -m venv /tmp/refvenv && "
    "/tmp/refvenv/bin/pip install agilerl==2.58.0) and pass --python /tmp/refvenv/bin/python"
)
#: The version the corpus is written for; another one is reported, not refused.
EXPECTED_VERSION = "2.58.0"

#: Runs in the reference interpreter: validates each path given on the command line and
#: prints one JSON object a line, first the agilerl version, then one per file.
WORKER = """
import json, sys
from importlib.metadata import version
from agilerl.arena.models.manifest import TrainingManifest
from pydantic import ValidationError

print(json.dumps({"version": version("agilerl")}), flush=True)
for path in sys.argv[1:]:
    try:
        TrainingManifest.get_validated(path)
    except ValidationError as exc:
        errors = [
            (".".join(str(part) for part in error["loc"]) or "(top level)") + ": " + error["msg"]
            for error in exc.errors()
        ]
    except Exception as exc:
        errors = [type(exc).__name__ + ": " + str(exc)]
    else:
        errors = []
    print(json.dumps({"file": path, "errors": errors}), flush=True)
"""


def _interpreter(requested: str | None) -> str:
    """The interpreter to validate with: the one asked for, else this one if it has agilerl.

    :raises SystemExit: with status 2 when no interpreter with agilerl is to be had.
    """
    if requested is not None:
        return requested
    if importlib.util.find_spec("agilerl") is None:
        print(f"error: this interpreter has no agilerl; {INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(2)
    return sys.executable


def _validate(python: str, files: list[Path]) -> tuple[str, dict[str, list[str]]]:
    """Validate ``files`` with agilerl in ``python``; its version and each file's errors.

    :raises SystemExit: with status 2 when the interpreter cannot run or import agilerl.
    """
    try:
        done = subprocess.run(
            [python, "-I", "-c", WORKER, *map(str, files)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        print(f"error: cannot run {python}: {exc.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        print(f"error: {python} could not validate with agilerl:\n{tail}", file=sys.stderr)
        print(INSTALL_HINT, file=sys.stderr)
        raise SystemExit(2)
    return lines[0]["version"], {line["file"]: line["errors"] for line in lines[1:]}


def _agile_forms(files: list[Path], folder: Path) -> dict[Path, Path]:
    """What ``agile validate --reference`` writes for each of ``files`` it reads (one run of
    agile for them all), as a file in ``folder``, by the file it came from."""
    done = subprocess.run(
        [sys.executable, "-m", "agile_cli", "validate", "--reference", *map(str, files)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode not in (0, 2):  # 2: some file is invalid; anything else is a failure
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        print(f"agile failed (exit {done.returncode}) on {files[0].parent}: {last}")
    if not done.stdout.strip():
        return {}
    written = json.loads(done.stdout)
    by_file = {str(files[0]): written} if len(files) == 1 else written
    forms = {}
    for path in files:
        if str(path) in by_file:
            forms[path] = folder / f"{path.stem}.json"
            forms[path].write_text(json.dumps(by_file[str(path)]))
    return forms


def _manifests(directory: Path | None) -> list[list[Path]]:
    """The ``*.yaml`` files of ``directory``, or of each corpus folder, one list a folder."""
    folders = CORPUS_FOLDERS if directory is None else (directory,)
    return [sorted(folder.resolve().glob("*.yaml")) for folder in folders]


def _label(path: Path, base: Path) -> str:
    """``path`` as the report names it: relative to ``base`` when inside it (``llm/x.yaml``)."""
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus = ", ".join(f"{folder.relative_to(ROOT)}/" for folder in CORPUS_FOLDERS)
    parser.add_argument(
        "directory", nargs="?", type=Path,
        help=f"folder of manifests (default: the corpus, {corpus})",
    )  # fmt: skip
    parser.add_argument(
        "--python", metavar="PATH",
        help="interpreter with agilerl 2.58 installed (default: this one, if it has agilerl)",
    )  # fmt: skip
    parser.add_argument(
        "--agile-form", action="store_true",
        help="validate what agile writes back for each file (agile validate --reference)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    groups = [files for files in _manifests(args.directory) if files]
    if not groups:
        parser.error(f"no *.yaml files in {args.directory or corpus}")
    base = CORPUS if args.directory is None else args.directory.resolve()
    python = _interpreter(args.python)
    if not args.agile_form:
        files = [path for group in groups for path in group]
        return _report(files, base, *_validate(python, files))
    return _check_agile_forms(groups, base, python)


def _check_agile_forms(groups: list[list[Path]], base: Path, python: str) -> int:
    """Validate what agile writes back for each file of ``groups`` (one run of agile a
    folder), skipping the files agile does not read; the exit status."""
    with tempfile.TemporaryDirectory() as folder:
        forms: dict[Path, Path] = {}
        for files in groups:
            forms |= _agile_forms(files, Path(tempfile.mkdtemp(dir=folder)))
        skipped = [_label(path, base) for files in groups for path in files if path not in forms]
        if skipped:
            print("skipped (agile does not read them): " + ", ".join(skipped))
        version, results = _validate(python, list(forms.values()))
        by_source = {str(path): results.get(str(form), []) for path, form in forms.items()}
        return _report(list(forms), base, version, by_source)


def _report(files: list[Path], base: Path, version: str, results: dict[str, list[str]]) -> int:
    """One line per file (named from ``base``), then the total; the exit status."""
    note = "" if version == EXPECTED_VERSION else f" (the corpus is written for {EXPECTED_VERSION})"
    print(f"agilerl {version}{note}")
    failed = 0
    for path in files:
        errors = results.get(str(path), ["no result from the validating interpreter"])
        failed += bool(errors)
        name = _label(path, base)
        print(f"FAIL {name}: " + "; ".join(errors) if errors else f"ok   {name}")
    plural = "" if len(files) == 1 else "s"
    print(f"\n{len(files)} file{plural}: {len(files) - failed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
