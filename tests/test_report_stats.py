"""`agile report`: the seeds' interquartile mean on the page and over training, the clonings and
mutations of each member, and a replay set beside the lineage it retrains."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from agile_cli.cli import cli
from agile_report import figures
from agile_report.curves import bootstrap_interval, iqm, iqm_curve
from agile_report.events import member_curves
from agile_report.page import terminal_view
from agile_report.runs import Group, Run, group_runs, load_run

STEPS = 10_240  # env steps of one generation, every member together


def _invoke(*args: str) -> Result:
    """The CLI as a user meets it: errors rendered, not raised."""
    return CliRunner().invoke(cli, list(args))


def _folder(folder: Path, generations: list[list[dict[str, Any]]], seed: int,
            **manifest: Any) -> Path:  # fmt: skip
    """A run folder of ``generations`` (each a list of member rows), DQN on CartPole with
    ``manifest``'s sections added; generation ``g`` ends at ``g`` times :data:`STEPS`."""
    folder.mkdir(parents=True)
    document = {"algorithm": {"name": "DQN", "gamma": 0.99}, "environment": {"name": "CartPole-v1"},
                "mutation": {"rand_seed": seed}, **manifest}  # fmt: skip
    (folder / "manifest.yaml").write_text(json.dumps(document), encoding="utf-8")
    (folder / "summary.json").write_text(json.dumps({"seed": seed}), encoding="utf-8")
    records = [
        {"generation": g, "global_steps": STEPS * g, "steps_per_member": 2_000 * g,
         "wall_seconds": 5.0 * g, "members": rows}
        for g, rows in enumerate(generations, start=1)
    ]  # fmt: skip
    text = "".join(json.dumps(record) + "\n" for record in records)
    (folder / "metrics.jsonl").write_text(text, encoding="utf-8")
    return folder


def _seed(folder: Path, bests: list[float], seed: int, **manifest: Any) -> Path:
    """A run whose two members are kept every generation, the best scoring ``bests``."""
    generations = [[{"index": k, "fitness": best - 20 * k, "parent": k, "mutation": "none"}
                    for k in range(2)] for best in bests]  # fmt: skip
    return _folder(folder, generations, seed, **manifest)


def _groups(*paths: Path) -> list[Group]:
    return group_runs([load_run(path) for path in paths])


def _table(page: str, heading: str) -> list[list[str]]:
    """The cells of each row of the first table after ``heading``, the header row left out."""
    table = page.split(heading, 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)
    return [re.findall(r"<td>(.*?)</td>", row) for row in rows if "<td>" in row]


# -- the seeds' interquartile mean -----------------------------------------------------------

#: Final best of five seeds of one setup (gamma 0.99); one seed of another (gamma 0.9) ends at 420.
FINALS = [480.0, 500.0, 350.0, 495.0, 470.0]


@pytest.fixture
def setups(tmp_path: Path) -> list[Path]:
    """Five seeds of one setup (the last stopped a generation early) and one of another."""
    seeds = [_seed(tmp_path / f"s{n}", [50, 200 + 10 * n, final], n)
             for n, final in enumerate(FINALS[:4], start=1)]  # fmt: skip
    seeds.append(_seed(tmp_path / "s5", [70, FINALS[4]], 5))
    gamma = {"algorithm": {"name": "DQN", "gamma": 0.9}}
    return [*seeds, _seed(tmp_path / "g1", [40, 300, 420], 1, **gamma)]


def test_the_page_gives_each_setups_interquartile_mean_and_its_interval(
    setups: list[Path], tmp_path: Path
) -> None:
    page = tmp_path / "out" / "report.html"
    result = _invoke("report", *map(str, setups), "--out", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    several, single = _table(text, "Final best fitness by setup")
    # the middle three of five: 470, 480, 495; the mean (459) would be pulled down by 350
    assert several == ["DQN on CartPole-v1 (gamma=0.99)", "5", "481.7", "390 to 496.7"]
    low, high = bootstrap_interval(np.array(FINALS))
    assert several[2:] == [f"{iqm(np.array(FINALS)):.4g}", f"{low:.4g} to {high:.4g}"]
    assert single == ["DQN on CartPole-v1 (gamma=0.9)", "1", "420", "none: one seed"]
    assert (tmp_path / "out" / "report-iqm.png").read_bytes()[:4] == b"\x89PNG"
    caption = text.split("<h2>Interquartile mean over seeds</h2>", 1)[1].split("<h2>", 1)[0]
    assert "95% percentile-bootstrap confidence interval" in caption


def test_the_iqm_figure_draws_each_setups_iqm_and_bootstrap_band(
    setups: list[Path], tmp_path: Path
) -> None:
    # nine seeds, the last far above the others and stopped a generation early
    bests = [[10.0 * n, 100.0 + 5 * n, 120.0] for n in range(1, 9)] + [[95.0, 900.0]]
    seeds = [_seed(tmp_path / f"n{n}", values, n) for n, values in enumerate(bests)]
    groups = _groups(*seeds, setups[-1])
    curve = iqm_curve(groups[0], "steps")
    assert list(curve.x) == [STEPS, 2 * STEPS]  # where every seed has data
    first = np.array([values[:2] for values in bests])
    assert np.allclose(curve.centre, [iqm(column) for column in first.T])
    assert curve.low is not None and curve.high is not None
    bounds = np.array([bootstrap_interval(column) for column in first.T])
    assert np.allclose(curve.low, bounds[:, 0]) and np.allclose(curve.high, bounds[:, 1])
    assert np.all(curve.high < first.max(axis=0))  # the outlier is no bound
    figure = figures.iqm_figure(groups)
    assert figure is not None
    axes = figure.axes[0]
    drawn = [line for line in axes.lines if line.get_color() == figures.COLOURS[0]]
    assert [list(line.get_ydata()) for line in drawn] == [list(curve.centre)]
    (band,) = axes.collections
    edge = band.get_paths()[0].vertices
    for x, low, high in zip(curve.x, curve.low, curve.high, strict=True):
        assert set(np.round(edge[edge[:, 0] == x, 1], 6)) == {round(low, 6), round(high, 6)}
    names = [text.get_text() for text in figure.legends[0].get_texts()]
    single = "gamma=0.9, one seed: its best fitness, no interval"
    assert names == ["gamma=0.99, 9 seeds", single, figures.IQM_BAND]


def test_one_seed_everywhere_draws_no_iqm_figure(setups: list[Path]) -> None:
    assert figures.iqm_figure(_groups(setups[0], setups[-1])) is None


# -- clonings and mutations --------------------------------------------------------------------


def _row(index: int, fitness: float, parent: int | None, mutation: str) -> dict[str, Any]:
    return {"index": index, "fitness": fitness, "parent": parent, "mutation": mutation}


#: Three generations of three members: member 3 is cloned from 0 and mutated, member 4 cloned
#: from 2 with a mutation that did not apply, member 5 cloned from 3 and mutated; member 1 was
#: mutated before training. The final best (5) descends from 3, which descends from 0.
EVOLVED = [
    [_row(0, 10, None, "none"), _row(1, 8, None, "lr=0.002"), _row(2, 6, None, "none")],
    [_row(0, 20, 0, "none"), _row(3, 25, 0, "lr=0.0005"),
     _row(4, 5, 2, "none (architecture mutation does not apply)")],
    [_row(3, 30, 3, "none"), _row(5, 40, 3, "batch_size=32"), _row(0, 22, 0, "none")],
]  # fmt: skip


@pytest.fixture
def evolved(tmp_path: Path) -> Path:
    return _folder(tmp_path / "evolved", EVOLVED, 1)


def test_each_members_curve_is_marked_where_it_was_cloned_and_mutated(evolved: Path) -> None:
    run = load_run(evolved)
    figure = figures.lineage_figure([run])
    curves = figure.axes[1]
    marked = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata(), strict=True))
              for line in curves.lines if line.get_linestyle() == "None"}  # fmt: skip
    cloned, mutated = (figures.EVENT_MARKERS[kind][0] for kind in ("cloned", "mutated"))
    assert marked == {cloned: [(2, 25), (2, 5), (3, 40)], mutated: [(1, 8), (2, 25), (3, 40)]}
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend == ["the final best member's ancestry", cloned, mutated]
    # one curve per member, a clone's leaving its parent's fitness in the generation before
    assert member_curves(run) == [([1, 2, 3], [10, 20, 22]), ([1], [8]), ([1], [6]),
                                  ([1, 2, 3], [10, 25, 30]), ([1, 2], [6, 5]),
                                  ([2, 3], [25, 40])]  # fmt: skip


def test_the_page_lists_the_events_along_the_final_best_members_ancestry(
    evolved: Path, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    assert _invoke("report", str(evolved), "--out", str(page)).exit_code == 0
    events = _table(page.read_text(), "Cloned and mutated along")
    assert events == [["2", "3", "cloned from 0"], ["2", "3", "lr=0.0005"],
                      ["3", "5", "cloned from 3"], ["3", "5", "batch_size=32"]]  # fmt: skip


# -- replays -----------------------------------------------------------------------------------

SCHEDULE = [{"generation": g, "steps_per_member": 2_000 * g, "fitness": fitness,
             "hyperparameters": {"lr": 0.001}}
            for g, fitness in enumerate([10, 20, 30, 40], start=1)]  # fmt: skip
REPLAY = {"source": "runs/dqn_cartpole_3", "member": 5, "schedule": SCHEDULE}
COMPARED = ("replay of member 5 of runs/dqn_cartpole_3: final fitness 33 (original lineage "
            "40); mean absolute gap 2.667 over the 3 generations both have")  # fmt: skip


def _replay(folder: Path, section: Any, name: str = "recipe") -> Path:
    """A replay of three generations of one member, scoring 12, 17 and 33, with ``section``
    as its manifest's ``name`` section."""
    generations = [[_row(0, fitness, 0, "none")] for fitness in (12, 17, 33)]
    return _folder(folder, generations, 1, **{name: section})


def test_a_replay_is_compared_with_its_original_lineage(tmp_path: Path) -> None:
    replay = _replay(tmp_path / "replay", REPLAY)
    shown = _invoke("report", str(replay), str(_seed(tmp_path / "plain", [5, 9, 14], 1)))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert f"  {COMPARED}" in lines  # |12 - 10|, |17 - 20|, |33 - 30|
    assert "DQN on CartPole-v1 (replay of member 5 of runs/dqn_cartpole_3)" in lines
    assert "DQN on CartPole-v1 (no replay)" in lines
    page = tmp_path / "out" / "report.html"
    assert _invoke("report", str(replay), "--out", str(page)).exit_code == 0
    assert f"<li>replay: {COMPARED}</li>" in page.read_text()
    assert (tmp_path / "out" / "report-replay.png").read_bytes()[:4] == b"\x89PNG"


def test_the_recipe_section_agile_recipe_writes_is_read_alike(tmp_path: Path) -> None:
    schedule = [{**step, "mutation": "none"} for step in SCHEDULE]
    schedule[2]["fitness"] = None  # a generation the recipe gives no fitness for: not compared
    recipe = _replay(tmp_path / "recipe", {**REPLAY, "schedule": schedule}, name="recipe")
    shown = _invoke("report", str(recipe))
    assert shown.exit_code == 0, shown.output
    assert [line for line in shown.output.splitlines() if line.startswith("  (")] == []
    compared = COMPARED.replace("2.667 over the 3", "2.5 over the 2")  # generations 1 and 2
    assert f"  {compared}" in shown.output.splitlines()


def test_the_replay_figure_sets_the_original_lineage_beside_the_replay(tmp_path: Path) -> None:
    figure = figures.replay_figure([load_run(_replay(tmp_path / "replay", REPLAY))])
    assert figure is not None
    original, replayed = figure.axes[0].lines
    assert list(original.get_xdata()) == [2_000, 4_000, 6_000, 8_000]
    assert list(original.get_ydata()) == [10, 20, 30, 40]
    assert list(replayed.get_xdata()) == [2_000, 4_000, 6_000]  # its own steps per member
    assert list(replayed.get_ydata()) == [12, 17, 33]
    assert figure.axes[0].get_title() == COMPARED


def test_a_replay_adds_a_line_and_changes_none(tmp_path: Path) -> None:
    replay = load_run(_replay(tmp_path / "replay", REPLAY))
    plain = Run(**{**replay.__dict__, "replay": None})
    with_replay = terminal_view([Group("x", [replay])])
    without = terminal_view([Group("x", [plain])])
    assert with_replay == [*without[:-1], f"  {COMPARED}", ""]


@pytest.mark.parametrize(
    ("section", "note"),
    [
        ("runs/dqn_cartpole_3", "the manifest's recipe section is not a mapping"),
        ({"source": "runs/x", "schedule": {"generation": 1}}, "recipe.schedule is not a list"),
        ({"schedule": [{"generation": 1, "fitness": "high"}, 7]},
         "no entry of recipe.schedule has a generation, steps_per_member and fitness"),
        ({"member": "five", "schedule": [{**SCHEDULE[0], "generation": True}, SCHEDULE[1],
                                         {**SCHEDULE[2], "fitness": float("nan")}, SCHEDULE[3]]},
         "2 unreadable entries of recipe.schedule left out"),
    ],
)  # fmt: skip
def test_a_malformed_replay_section_is_a_note(tmp_path: Path, section: Any, note: str) -> None:
    replay = _replay(tmp_path / "replay", section)
    (replay / "manifest.yaml").write_text(  # JSON's NaN is YAML's .nan
        (replay / "manifest.yaml").read_text().replace("NaN", ".nan"), encoding="utf-8"
    )
    result = _invoke("report", str(replay))
    assert result.exit_code == 0, result.output
    assert result.exception is None
    (shown,) = [line for line in result.output.splitlines() if line.startswith("  (")]
    assert shown.startswith(f"  ({note}")
    compared = [line for line in result.output.splitlines() if "replay of" in line]
    if "left out" in note:  # what could be read (generations 2 and 4) is compared
        assert compared == ["  replay of a member of an unnamed run: final fitness 33 "
                            "(original lineage 40); mean absolute gap 3 over the one "
                            "generation both have"]  # fmt: skip
    else:
        assert compared == []


# -- the elite scored again at a run's end ---------------------------------------------------------


def _with_elite(folder: Path, seed: int, elite: Any) -> Path:
    run = _seed(folder, [10, 20, 30], seed)
    summary = (
        json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    )
    (run / "summary.json").write_text(json.dumps({**summary, "seed": seed, "elite": elite}))
    return run


ELITE = {"member": 1, "score": 25.5, "low": 21.0, "high": 29.25, "episodes": 30,
         "training_rank": 2, "training_fitness": 10.0}  # fmt: skip


def test_the_elite_scored_again_is_shown_per_run_and_over_the_seeds(tmp_path: Path) -> None:
    runs = [_with_elite(tmp_path / f"s{n}", n, {**ELITE, "score": score})
            for n, score in enumerate([25.5, 12.0, 30.0], start=1)]  # fmt: skip
    lines = _invoke("report", *map(str, runs)).output.splitlines()
    assert ("  elite, scored again: member 1, 25.5 (95% interval 21 to 29.25) on 30 fresh "
            "episodes; 2nd by training fitness (10)") in lines  # fmt: skip
    over = [
        line for line in lines if line.startswith("  the elites scored again:")
    ]  # 3 seeds: none cut
    assert over and over[0].startswith("  the elites scored again: interquartile mean 22.5,")


@pytest.mark.parametrize(
    "elite", ["member 3", {**ELITE, "score": "high"}, {**ELITE, "member": True}]
)
def test_an_elite_not_as_agile_writes_it_is_left_out(tmp_path: Path, elite: Any) -> None:
    shown = _invoke("report", str(_with_elite(tmp_path / "s1", 1, elite)))
    assert shown.exit_code == 0, shown.output
    assert "scored again" not in shown.output


def test_the_iqm_figure_marks_the_elites_scored_again_at_the_end(tmp_path: Path) -> None:
    runs = [_with_elite(tmp_path / f"s{n}", n, {**ELITE, "score": score})
            for n, score in enumerate([25.5, 12.0, 30.0, 28.0], start=1)]  # fmt: skip
    figure = figures.iqm_figure(_groups(*runs))
    assert figure is not None
    (marks,) = figure.axes[0].containers  # one errorbar: the elites' IQM and interval
    x, y = marks.lines[0].get_data()
    assert list(x) == [3 * STEPS] and list(y) == [iqm(np.array([25.5, 12.0, 30.0, 28.0]))]
    without = figures.iqm_figure(_groups(*(_seed(tmp_path / f"p{n}", [1, 2], n) for n in (1, 2))))
    assert without is not None and not without.axes[0].containers
