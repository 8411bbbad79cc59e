"""`agile report` and `agile diff` on a run folder someone else wrote: every file is read bounded
and typed, and what agile never writes there becomes one sentence naming the file and the line
(or field), never a traceback, a hang or a memory bomb; names are drawn as written, never as
mathtext."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from agile_cli import run_files
from agile_report import figures
from agile_report.runs import group_runs, load_run

Run = Callable[..., Result]

MANIFEST = {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1"},
            "training": {"target_score": 475}, "mutation": {"rand_seed": 1}}  # fmt: skip
#: Under 1 KB: nine lists of nine aliases of the one before, 9**9 values expanded.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{new}: &{new} [{', '.join([f'*{old}'] * 9)}]\n"
    for old, new in zip("abcdefgh", "bcdefghi", strict=True)
)
#: 50 KB of text, aliased 9**5 times: 3 GB of text expanded.
TEXT_BOMB = f"s: &s {'x' * 50_000}\na: &a [{', '.join(['*s'] * 9)}]\n" + "".join(
    f"{new}: &{new} [{', '.join([f'*{old}'] * 9)}]\n"
    for old, new in zip("abcd", "bcde", strict=True)
)


def _generation(number: int, **fields: Any) -> str:
    """A metrics line as agile writes it: two members, the best scoring ``10 * number + 1``."""
    members = [{"index": k, "fitness": 10.0 * number + k, "parent": k, "mutation": "none",
                "hyperparameters": {"lr": 0.001}, "parameters": 900} for k in range(2)]  # fmt: skip
    record = {"generation": number, "global_steps": 100 * number, "wall_seconds": 1.5 * number,
              "members": members, **fields}  # fmt: skip
    return json.dumps(record) + "\n"


def _folder(path: Path, lines: Sequence[str | bytes] | None = None, manifest: str | None = None,
            summary: str | None = None) -> Path:  # fmt: skip
    """A run folder: ``lines`` of metrics (default: two generations as agile writes them), the
    manifest's and the summary's text (default: as agile writes them)."""
    path.mkdir(parents=True)
    (path / "manifest.yaml").write_text(manifest or json.dumps(MANIFEST), encoding="utf-8")
    (path / "summary.json").write_text(summary or json.dumps({"seed": 1}), encoding="utf-8")
    chunks = lines if lines is not None else [_generation(1), _generation(2)]
    data = b"".join(c if isinstance(c, bytes) else c.encode("utf-8") for c in chunks)
    (path / "metrics.jsonl").write_bytes(data)
    return path


def _notes(result: Result) -> list[str]:
    """The lines a report adds under a run, in parentheses."""
    return [line[3:-1] for line in result.output.splitlines() if line.startswith("  (")]


# -- the alias bomb, under a memory ceiling ------------------------------------------------------


def _address_space() -> int:
    """How much address space a fresh Python takes with what report and diff import."""
    probe = ("import agile_cli.cli, agile_report.command, agile_report.diff, "
             "agile_report.page, agile_cli.run_files, yaml; "
             "print(next(l.split()[1] for l in open('/proc/self/status') "
             "if l.startswith('VmPeak')))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    return int(done.stdout) * 1024


def _agile_within(ceiling: int, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``agile ARGS`` in a process that may take ``ceiling`` bytes of address space and 30 s;
    what it did, and how long it took."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))

    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agile_cli", *args], capture_output=True,
                          text=True, timeout=30, preexec_fn=limit)  # fmt: skip
    return done, time.monotonic() - start


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize(
    ("text", "expanded"),
    [(ALIAS_BOMB, "100,000 values"), (TEXT_BOMB, "1,048,576 characters of text")],
    ids=["values", "text"],
)
def test_an_alias_bomb_in_manifest_yaml_is_one_sentence_at_once(
    tmp_path: Path, text: str, expanded: str
) -> None:
    ceiling = _address_space() + 2 * 1024**3
    plain = _folder(tmp_path / "plain")
    bomb = _folder(tmp_path / "bomb", manifest=text)
    assert len(ALIAS_BOMB.encode()) < 1024
    for args in (("report", str(plain)), ("diff", str(plain), str(plain))):  # the ceiling fits
        done, _ = _agile_within(ceiling, *args)
        assert done.returncode == 0, done.stderr
    sentence = f"{bomb}/manifest.yaml line 1, column 1: anchors and aliases expand to more " \
               f"than {expanded}"  # fmt: skip
    shown, seconds = _agile_within(ceiling, "report", str(bomb))
    assert shown.returncode == 0, shown.stderr
    assert f"  ({sentence}; the run is shown without its settings)" in shown.stdout.splitlines()
    assert "? on ?" in shown.stdout and seconds < 20
    refused, seconds = _agile_within(ceiling, "diff", str(plain), str(bomb))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"error: {sentence} (") and seconds < 20
    assert len(refused.stderr.splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_a_fifo_for_a_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    plain = _folder(tmp_path / "plain")
    fifo = _folder(tmp_path / "fifo")
    (fifo / "manifest.yaml").unlink()
    os.mkfifo(fifo / "manifest.yaml")
    sentence = f"{fifo}/manifest.yaml: is not a regular file (a folder, a FIFO or a device)"
    shown = subprocess.run([sys.executable, "-m", "agile_cli", "report", str(fifo)],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert shown.returncode == 0 and f"  ({sentence}; the run" in shown.stdout
    refused = subprocess.run([sys.executable, "-m", "agile_cli", "diff", str(plain), str(fifo)],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.startswith(f"error: {sentence} (")


# -- metrics.jsonl ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "sentence"),
    [
        ('{"generation": 2, "global_steps": Infinity, "wall_seconds": 3, "members": []}\n',
         "holds Infinity, which strict JSON does not allow (agile writes null)"),
        (_generation(2).replace('"fitness": 20.0', '"fitness": NaN'),
         "holds NaN, which strict JSON does not allow (agile writes null)"),
        (_generation(2).replace('"fitness": 20.0', f'"fitness": {10**400}'),
         "members[0].fitness is an integer beyond 1e+100 in size"),
        (_generation(2).replace('"fitness": 20.0', '"fitness": 1e400'),
         "holds 1e400, a number beyond what a float holds"),
        (_generation(2, members=5), "members is a number, not a list"),
        (_generation(2, members=[1, 2]), "members[0] is a number, not a mapping"),
        (_generation(2).replace('{"lr": 0.001}', "[1, 2]", 1),
         "members[0].hyperparameters is a list, not a mapping"),
        (_generation(2).replace('{"lr": 0.001}', '{"lr": "high"}', 1),
         "members[0].hyperparameters.lr is a string, not a number"),
        (_generation(2, generation="two"), "generation is a string, not a whole number"),
        (_generation(2, global_steps=-5), "global_steps is -5, not a count (0 or more)"),
        (_generation(2, global_steps=2**70),
         "global_steps is a whole number beyond 9,223,372,036,854,775,807 in size"),
        (_generation(2, algorithm=[1, 2], members=[{"index": 0, "fitness": None}]),
         "members holds no member with a fitness"),
        ('[1, 2]\n', "is a list, not a JSON object"),
        ('{"generation": 2,\n', "is not JSON (Expecting property name enclosed in double quotes "
                                "at column 18)"),
        ('{"generation": 2, "glob', "is cut short (the run stopped while writing it, or the "
                                   "file was cut)"),
        (b'{"generation": "\xff"}\n', "is not UTF-8 text"),
    ],
)  # fmt: skip
def test_a_metrics_line_agile_never_writes_is_skipped_with_its_line_and_why(
    tmp_path: Path, run: Run, line: str | bytes, sentence: str
) -> None:
    folder = _folder(tmp_path / "run", [_generation(1), line])
    shown = run("report", str(folder))
    assert shown.exit_code == 0, shown.output
    assert _notes(shown) == [f"skipped {folder}/metrics.jsonl line 2: {sentence}"]
    assert "  1 generations, 100 steps in all, 1.5 s; best 11 (generation 1)" in shown.output


def test_the_page_lists_the_skipped_lines_and_the_figures_draw_the_rest(
    tmp_path: Path, run: Run
) -> None:
    lines = [_generation(1), _generation(2, members=5), _generation(3), "[]\n", "7\n", "null\n"]
    folder = _folder(tmp_path / "run", lines)
    shown = run("report", str(folder))
    assert _notes(shown) == [
        f"skipped {folder}/metrics.jsonl line 2: members is a number, not a list",
        f"skipped {folder}/metrics.jsonl line 4: is a list, not a JSON object",
        f"skipped {folder}/metrics.jsonl line 5: is a number, not a JSON object",
        "1 more unreadable lines of metrics.jsonl skipped",
    ]
    page = tmp_path / "out" / "report.html"
    written = run("report", str(folder), "--out", str(page))
    assert written.exit_code == 0, written.output
    assert (f"<li>run: skipped {folder}/metrics.jsonl line 2: members is a number, not a list"
            "</li>") in page.read_text()  # fmt: skip
    assert load_run(folder).generations[-1].number == 3


def test_a_run_without_one_readable_generation_is_refused_naming_the_first_line(
    tmp_path: Path, run: Run
) -> None:
    folder = _folder(tmp_path / "run", [_generation(1, members=5), "[]\n", "{\n"])
    for args in (("report", str(folder)), ("report", str(folder), "--out", "r.html")):
        refused = run(*args)
        assert refused.exit_code == 2
        assert refused.output.startswith(
            f"error: {folder}/metrics.jsonl line 1: members is a number, not a list; no line "
            "holds a generation to report (2 more unreadable lines) (the file is not as agile "
            "train writes it"
        )


def test_an_over_long_line_and_lines_past_the_bound_are_named_not_read(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_files, "MAX_LINE", 1000)
    monkeypatch.setattr(run_files, "MAX_LINES", 4)
    long = _generation(2, padding="x" * 3000)
    third = _generation(3, padding="")
    third = third.replace('"padding": ""', f'"padding": "{"x" * (1001 - len(third))}"')
    assert len(third) == 1001  # 1,000 bytes and its newline: read
    folder = _folder(tmp_path / "run", [_generation(1), long, third, _generation(4),
                                        _generation(5), _generation(6)])  # fmt: skip
    read = list(run_files.metrics_lines(folder / "metrics.jsonl"))
    assert [line.number for line in read] == [1, 2, 3, 4, 5]  # then it stops
    assert [line.record is not None for line in read] == [True, False, True, True, False]
    assert read[1].problem == f"{folder}/metrics.jsonl line 2: is longer than 1,000 bytes"
    assert read[3].text == _generation(4).rstrip("\n")  # as written, for a rewrite
    shown = run("report", str(folder))
    assert _notes(shown) == [
        f"skipped {folder}/metrics.jsonl line 2: is longer than 1,000 bytes",
        f"skipped {folder}/metrics.jsonl line 5: the file holds more than 4 lines; the rest is "
        "not read",
    ]
    assert "  3 generations," in shown.output


# -- manifest.yaml and summary.json --------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "sentence"),
    [
        ("algorithm: {name: PPO}\nenvironment: [\n", " line 3, column 1: invalid YAML: "),
        ("algorithm: {name: PPO}\nalgorithm: {name: DQN}\n",
         " line 2, column 1: duplicate key 'algorithm' (first at line 1)"),
        ("- algorithm\n- environment\n", ": is a list, not a mapping of sections"),
        ("training: {started: 2020-13-45}\n",
         ": invalid YAML value: month must be in 1..12"),
        ("? [a, b]\n: 1\n", ": invalid YAML value: unhashable type: 'list'"),
        (f"training: {{target_score: 0x{'f' * 4000}}}\n",
         ": training.target_score is an integer of more than 100 digits"),
        ("a: " + "[" * 70 + "]" * 70 + "\n",
         ": a" + "[0]" * 64 + " nests deeper than 64 levels"),
        ("algorithm: {name: PPO, note: '" + "x" * (1024 * 1024) + "'}\n",
         ": is over 1,048,576 bytes, more than agile ever writes there"),
    ],
)  # fmt: skip
def test_a_manifest_that_cannot_be_read_is_a_note_in_report_and_refused_by_diff(
    tmp_path: Path, run: Run, manifest: str, sentence: str
) -> None:
    plain = _folder(tmp_path / "plain")
    folder = _folder(tmp_path / "run", manifest=manifest)
    said = f"{folder}/manifest.yaml{sentence}"
    shown = run("report", str(folder), str(plain))
    assert shown.exit_code == 0, shown.output
    (note,) = _notes(shown)
    assert note.startswith(said) and note.endswith("; the run is shown without its settings")
    assert "? on ?" in shown.output  # a setup of its own, not grouped with the plain run
    refused = run("diff", str(plain), str(folder))
    assert refused.exit_code == 2
    assert refused.output.startswith(f"error: {said}")


def test_manifest_fields_of_the_wrong_type_are_notes(tmp_path: Path, run: Run) -> None:
    manifest = {"algorithm": [1, 2], "environment": {"name": {"id": "x"}},
                "training": {"target_score": "high"}}  # fmt: skip
    folder = _folder(tmp_path / "run", manifest=json.dumps(manifest),
                     summary=json.dumps({"seed": 1, "algorithm": "DQN"}))  # fmt: skip
    shown = run("report", str(folder))
    assert shown.exit_code == 0, shown.output
    where = f"{folder}/manifest.yaml"
    assert _notes(shown) == [
        f"{where}: algorithm is a list, not a mapping",
        f"{where}: environment.name is a mapping, not a string",
        f"{where}: training.target_score is a string, not a number",
    ]
    assert "DQN on ?" in shown.output.splitlines()  # the summary's algorithm stands in
    compared = run("diff", str(folder), str(_folder(tmp_path / "plain")))
    assert compared.exit_code == 0, compared.output
    row = next(line for line in compared.output.splitlines() if line.startswith("  algorithm "))
    assert row.split() == ["algorithm", "[1,", "2]", "-"]


def test_a_summary_agile_never_writes_is_left_out_with_a_note(tmp_path: Path, run: Run) -> None:
    plain = _folder(tmp_path / "plain")
    nan = _folder(tmp_path / "nan", summary='{"seed": 1,\n "best_fitness": NaN}')
    elite = {"member": 1, "score": 10**400, "episodes": 30, "training_rank": 1,
             "training_fitness": 3.0}  # fmt: skip
    huge = _folder(tmp_path / "huge", summary=json.dumps({"seed": 2, "elite": elite}))
    (huge / "provenance.json").write_text("[1, 2]", encoding="utf-8")
    shown = run("report", str(nan), str(huge))
    assert shown.exit_code == 0, shown.output
    assert _notes(shown) == [
        f"{nan}/summary.json line 2, column 18: holds NaN, which strict JSON does not allow "
        "(agile writes null); its seed, step unit and elite are left out",
        f"{huge}/summary.json: elite.score is an integer of more than 100 digits; its seed, "
        "step unit and elite are left out",
    ]
    compared = run("diff", str(plain), str(huge))
    assert compared.exit_code == 0, compared.output
    assert compared.output.splitlines()[2:4] == [
        f"note: {huge}/provenance.json: is a list, not a JSON object; its provenance is left out",
        f"note: {huge}/summary.json: elite.score is an integer of more than 100 digits; its "
        "results are left out",
    ]
    far = _folder(tmp_path / "far", summary=json.dumps({"elite": {**elite, "score": 1e300}}))
    assert _notes(run("report", str(far))) == [
        f"{far}/summary.json: elite.score is 1e+300, beyond 1e+100 in size"
    ]
    compared = run("diff", str(plain), str(far))
    assert f"note: {far}/summary.json: elite.score is 1e+300, beyond 1e+100 in size; its " \
           "elite is left out" in compared.output.splitlines()  # fmt: skip
    report = json.loads(run("diff", str(nan), str(huge), "--json").output)
    assert report["results"]["elite"] == [None, None] and len(report["notes"]) == 3
    assert report["notes"][0].endswith("(agile writes null); its results are left out")


# -- names drawn as written ------------------------------------------------------------------------

FRACTION = r"$\frac{1}{$"  # mathtext that does not parse
SQUARE = "$x^2$"  # mathtext that does


def _mathy(tmp_path: Path) -> list[Path]:
    """Two seeds and a replay whose folder, algorithm, environment, hyperparameter and recipe
    names are mathtext; the learning rate spans two decades (a log axis)."""
    recipe = {"source": f"runs/{FRACTION}",
              "schedule": [{"generation": 1, "steps_per_member": 50, "fitness": 5}]}  # fmt: skip
    made = []
    for name, seed, extra in ((f"s1{FRACTION}", 1, {}), (f"s2{SQUARE}", 2, {}),
                              ("replay", 1, {"recipe": recipe})):  # fmt: skip
        lines = [_generation(g).replace('{"lr": 0.001}', json.dumps(
                     {"lr": 10.0 ** -(g + 1), FRACTION: 0.5, SQUARE: g}))
                 for g in (1, 2, 3)]  # fmt: skip
        manifest = {"algorithm": {"name": SQUARE}, "environment": {"name": FRACTION},
                    "mutation": {"rand_seed": seed}, **extra}  # fmt: skip
        made.append(_folder(tmp_path / name, lines, manifest=json.dumps(manifest)))
    return made


def test_names_from_run_folders_are_drawn_literally_in_every_figure(
    tmp_path: Path, run: Run
) -> None:
    folders = _mathy(tmp_path)
    page = tmp_path / "out" / "report.html"
    written = run("report", *map(str, folders), "--out", str(page))
    assert written.exit_code == 0, written.output
    for name in ("curves", "iqm", "lineage", "hyperparameters", "replay"):
        assert (tmp_path / "out" / f"report-{name}.png").read_bytes()[:4] == b"\x89PNG"
    groups = group_runs([load_run(folder) for folder in folders])
    runs = [r for group in groups for r in group.runs]
    drawn = [figures.curves_figure(groups), figures.iqm_figure(groups),
             figures.lineage_figure(runs), figures.hyperparameter_figure(groups),
             figures.replay_figure(runs)]  # fmt: skip
    built = [figure for figure in drawn if figure is not None]
    assert len(built) == len(drawn)
    from matplotlib.text import Text

    for figure in built:
        figures.png(figure)  # as the report saves it: every tick label made
        texts = [t for t in figure.findobj(Text) if t.get_text()]
        assert all(not t.get_parse_math() for t in texts if "$" in t.get_text())
        assert not any("\\$" in t.get_text() or "mathdefault" in t.get_text() for t in texts)
    panels = {axes.get_title(): axes for axes in built[3].axes if axes.get_visible()}
    assert {FRACTION, SQUARE, "lr"} <= set(panels)
    log_labels = [t.get_text() for t in panels["lr"].get_yticklabels() if t.get_text()]
    assert log_labels and all("$" not in label for label in log_labels)
    assert built[0].get_suptitle() == f"{SQUARE} on {FRACTION}"
    legend = built[4].axes[0].get_legend()
    assert legend is not None
    assert legend.get_texts()[0].get_text() == f"original lineage: a member of runs/{FRACTION}"


def test_many_hyperparameters_are_drawn_up_to_the_bound_and_counted(tmp_path: Path) -> None:
    values = {f"h{k}": float(k + 1) for k in range(40)}
    lines = [_generation(g).replace('{"lr": 0.001}', json.dumps(values)) for g in (1, 2)]
    folder = _folder(tmp_path / "run", lines)
    figure = figures.hyperparameter_figure(group_runs([load_run(folder)]))
    assert figure is not None
    titles = [axes.get_title() for axes in figure.axes if axes.get_visible()]
    assert titles == [*(f"h{k}" for k in range(figures.MAX_HYPERPARAMETERS)),
                      "network size (weights)"]  # fmt: skip
    (legend,) = figure.legends
    left_out = f"; {40 - figures.MAX_HYPERPARAMETERS} more hyperparameters not drawn"
    assert legend.get_title().get_text().endswith(left_out)
