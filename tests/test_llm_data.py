"""The ``llm`` environment's data: reading datasets, the reward file, the training stream and
the prompt template. Small files in tmp_path; no network, no model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agile_cli import TrainingError, UsageError
from agile_llm import data
from agile_llm.environment import LLMBuilder, PromptData, prepare
from agile_llm.rewards import as_number, load_reward_function

ROWS = [{"question": f"{i}+1", "answer": str(i + 1)} for i in range(10)]
REWARD = """
def exact(completion, answer, question):
    return float(completion.strip() == str(answer))
"""


def env_spec(**fields: Any) -> SimpleNamespace:
    """An ``environment`` section with the LLMEnvSpec attributes the builder reads."""
    defaults: dict[str, Any] = {
        "name": "prompts",
        "regime": None,
        "dataset": None,
        "columns": None,
        "prompt_template": None,
        "max_reward": None,
        "train_test_split": 0.8,
        "rubric_file_path": None,
        "rubric_name": None,
        "response_column": "response",
        "apply_chat_template": None,
        "reward_timeout": 30.0,
    }
    merged = {**defaults, **fields}
    return SimpleNamespace(**merged, named_dataset=merged["dataset"])


def manifest(spec: SimpleNamespace, env_type: str = "reasoning") -> SimpleNamespace:
    return SimpleNamespace(environment=spec, algorithm=SimpleNamespace(env_type=env_type, seed=0))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_reward(tmp_path: Path, source: str = REWARD, name: str = "reward.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


# Reading files


def test_each_file_format_reads_the_same_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_jsonl(tmp_path / "d.jsonl", ROWS)
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    lines = ["question,answer", *(f"{row['question']},{row['answer']}" for row in ROWS)]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.json", "d.csv", "d.parquet"):
        assert data.load_rows(str(tmp_path / name)) == ROWS, name


def test_a_relative_path_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jsonl(tmp_path / "d.jsonl", ROWS)
    monkeypatch.chdir(tmp_path)
    assert data.load_rows("d.jsonl") == ROWS


def test_a_missing_file_names_the_absolute_path_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no file") as caught:
        data.load_rows("missing.jsonl")
    assert str(tmp_path / "missing.jsonl") in caught.value.message


def test_a_bad_jsonl_line_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": oops}\n')
    with pytest.raises(UsageError, match="line 3 is not JSON"):
        data.load_rows(str(path))
    path.write_text('{"prompt": "a"}\n[1, 2]\n')
    with pytest.raises(UsageError, match="line 2 is a list, not an object"):
        data.load_rows(str(path))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("d.jsonl", "", "has no rows"),
        ("d.json", "", "has no rows"),
        ("d.csv", "", "has no rows"),
        ("d.json", '{"prompt": "a"}', "not a list of objects"),
        ("d.json", '[{"prompt": "a"}, 3]', "item 1 is an int"),
        ("d.csv", "prompt,answer\na,1\nb\n", "line 3 has a different number of fields"),
        ("d.jsonl", '{"prompt": "a"}\n{"question": "b"}\n', "row 1 has columns"),
        ("d.parquet", "not parquet", "not a readable Parquet file"),
        ("d.txt", "hello", "cannot read"),
        ("d.csv", "prompt\n" + "x" * 200_000 + "\n", "line 2 is not CSV"),
    ],
)
def test_malformed_files_are_refused_with_what_is_wrong(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(UsageError, match=message):
        data.load_rows(str(tmp_path / name))


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        data.load_rows(str(tmp_path / "d.jsonl"))


def test_a_file_larger_than_the_memory_available_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    monkeypatch.setattr(data, "available_memory", lambda: 100)
    with pytest.raises(UsageError, match="more than the"):
        data.load_rows(str(path))


# Hub ids (offline, in a fresh interpreter so HF_HOME is read at import)


def run_offline(code: str, home: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "HF_HOME": str(home), "HF_DATASETS_CACHE": str(home / "datasets")}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_DATASETS_OFFLINE", None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, time.monotonic() - start


def test_an_uncached_hub_id_fails_fast_naming_what_to_fetch(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    done, seconds = run_offline(
        """
        from agile_cli import UsageError
        from agile_llm.data import load_rows
        try:
            load_rows("nobody-here/no-such-dataset")
        except UsageError as error:
            print(error.message, "|", error.hint)
        """,
        tmp_path / "hf",
    )
    assert done.returncode == 0, done.stderr
    assert seconds < 10
    assert "not a file" not in done.stdout
    assert "local cache" in done.stdout
    assert "datasets.load_dataset('nobody-here/no-such-dataset')" in done.stdout


def test_a_hub_dataset_in_the_local_cache_loads_offline(tmp_path: Path) -> None:
    """The cache a hub download leaves (``HF_DATASETS_CACHE/owner___name/config/version/hash``),
    made offline with the Parquet builder and moved where ``datasets`` looks for it."""
    pytest.importorskip("datasets")
    source = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    done, _ = run_offline(
        f"""
        import os, shutil
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        from datasets.packaged_modules.json.json import Json
        builder = Json(dataset_name="toy", data_files={{"train": {str(source)!r}}})
        builder.download_and_prepare()
        cached = os.path.join(os.environ["HF_DATASETS_CACHE"], "owner___toy", "default", "0.0.0")
        os.makedirs(cached)
        shutil.move(builder.cache_dir, os.path.join(cached, "abc"))
        from agile_llm.data import load_rows
        import json
        print(json.dumps(load_rows("owner/toy")))
        """,
        tmp_path / "hf",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ROWS


# Renaming and splitting


def test_rename_maps_source_columns_and_names_a_missing_one() -> None:
    renamed = data.rename([{"input": "q", "output": "a"}], {"input": "question"})
    assert renamed == [{"question": "q", "output": "a"}]
    with pytest.raises(UsageError, match=r"no column 'inp'; it has \['input', 'output'\]"):
        data.rename([{"input": "q", "output": "a"}], {"inp": "question"})


def test_split_is_seeded_and_leaves_both_parts_some_rows() -> None:
    train, test = data.split(ROWS, 0.8, seed=1)
    assert (len(train), len(test)) == (8, 2)
    assert sorted(map(str, train + test)) == sorted(map(str, ROWS))
    assert data.split(ROWS, 0.8, seed=1) == (train, test)
    assert data.split(ROWS, 0.8, seed=2) != (train, test)
    with pytest.raises(UsageError, match="of 1 rows leaves 0 for training and 1 for testing"):
        data.split(ROWS[:1], 0.9, seed=0)
    with pytest.raises(UsageError, match="0 for testing"):
        data.split(ROWS, 1.0, seed=0)


# The environment


def built(tmp_path: Path, rows: list[dict[str, Any]] = ROWS, **fields: Any) -> PromptData:
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    return LLMBuilder().build(env_spec(dataset=str(path), **fields), seed=3)  # type: ignore[arg-type]


def test_the_builder_splits_with_the_seed_and_fixed_text_spaces(tmp_path: Path) -> None:
    env = built(tmp_path)
    assert (len(env.train), len(env.test), env.num_envs, env.env_type) == (8, 2, 1, None)
    again = built(tmp_path)
    assert (again.train, again.test) == (env.train, env.test)
    assert repr(env.single_observation_space) == repr(again.single_action_space)
    assert repr(env.single_observation_space).startswith("Text(0, 1048576")


def test_the_stream_visits_every_row_once_per_epoch_in_a_new_order(tmp_path: Path) -> None:
    env = built(tmp_path)
    size = len(env.train)
    first, second = env.rows_at(0, size), env.rows_at(size, size)
    assert sorted(map(str, first)) == sorted(map(str, env.train)) == sorted(map(str, second))
    assert first != second
    assert env.rows_at(5, 6) == (first + second)[5:11]
    fresh = built(tmp_path)  # another member, or a resumed run
    assert fresh.rows_at(size + 3, 4) == env.rows_at(size + 3, 4)
    assert env.epochs_done(size + size // 2) == 1.5


def test_the_template_becomes_chat_turns_filled_from_the_row(tmp_path: Path) -> None:
    template = {
        "system_0": "Answer in \\boxed{} or JSON {{literal}}.",
        "user_1": "What is {question}?",
        "assistant_2": "<think>",
    }
    env = built(tmp_path, prompt_template=template)
    assert env.messages({"question": "2+2", "answer": "4"}) == [
        {"role": "system", "content": "Answer in \\boxed{} or JSON {literal}."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>"},
    ]
    assert built(tmp_path).messages({"prompt": "hi"}) == [{"role": "user", "content": "hi"}]


def test_an_unknown_placeholder_names_the_turn_and_the_columns(tmp_path: Path) -> None:
    env = built(tmp_path, prompt_template={"user_0": "{problem}"})
    with pytest.raises(UsageError, match=r"prompt_template.user_0: no column 'problem'"):
        env.messages(ROWS[0])
    with pytest.raises(UsageError, match=re.escape("needs the column(s) ['problem']")) as caught:
        prepare(env, manifest(env_spec(), "reasoning"))
    assert "environment.columns" in str(caught.value.hint)


@pytest.mark.parametrize(
    ("env_type", "rows", "missing"),
    [
        ("sft", [{"prompt": "p", "target": "t"}] * 2, "['response']"),
        ("preference", [{"prompt": "p", "chosen": "c"}] * 2, "['rejected']"),
        ("reasoning", [{"prompt": "p"}] * 2, "['answer']"),
    ],
)
def test_prepare_checks_the_columns_the_type_needs(
    tmp_path: Path, env_type: str, rows: list[dict[str, Any]], missing: str
) -> None:
    env = built(tmp_path, rows, train_test_split=0.5)
    expected = re.escape(f"{env_type} data needs the column(s) {missing}")
    with pytest.raises(UsageError, match=expected):
        prepare(env, manifest(env_spec(), env_type))


def test_sft_and_preference_rows_read_their_targets(tmp_path: Path) -> None:
    rows = [{"prompt": "p", "target": "t", "chosen": "c", "rejected": "r"}] * 2
    env = built(tmp_path, rows, train_test_split=0.5, response_column="target")
    env = prepare(env, manifest(env_spec(), "sft"))
    assert (env.env_type, env.response(rows[0])) == ("sft", "t")
    assert (env.chosen(rows[0]), env.rejected(rows[0])) == ("c", "r")
    assert env.accuracy(np.ones(2)) is None  # no max_reward


def reasoning_env(tmp_path: Path, rows: list[dict[str, Any]], source: str) -> PromptData:
    write_reward(tmp_path, source)
    fields: dict[str, Any] = {"rubric_file_path": "reward.py", "rubric_name": "exact"}
    env = built(
        tmp_path, rows, prompt_template={"user_0": "Q: {question}"}, max_reward=1.0, **fields
    )
    return prepare(env, manifest(env_spec()))


def test_a_reasoning_environment_scores_with_the_reward_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the reward file's path is relative to it
    env = reasoning_env(tmp_path, ROWS, REWARD)
    assert env.env_type == "reasoning"
    rewards = env.reward(["2", "5", "3"], ROWS[1:4], ["p1", "p2", "p3"])
    np.testing.assert_array_equal(rewards, [1.0, 0.0, 0.0])
    assert env.accuracy(rewards) == pytest.approx(1 / 3)


def test_the_reward_gets_the_question_column_else_the_rendered_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = "def exact(completion, answer, question):\n    return float(question == completion)\n"
    env = reasoning_env(tmp_path, ROWS, source)
    assert env.reward(["0+1", "rendered"], ROWS[:2], ["rendered"] * 2).tolist() == [1.0, 0.0]
    rows = [{"problem": "x", "answer": "1"}] * 2
    env = built(tmp_path, rows, prompt_template={"user_0": "{problem}"}, train_test_split=0.5,
                rubric_file_path="reward.py", rubric_name="exact")  # fmt: skip
    env = prepare(env, manifest(env_spec()))
    assert env.reward(["x", "rendered"], rows, ["rendered"] * 2).tolist() == [0.0, 1.0]


def test_the_reward_function_gets_completion_answer_question_in_that_order(
    tmp_path: Path,
) -> None:
    seen: list[tuple[Any, ...]] = []
    source = "def spy(completion, answer, question):\n    SEEN.append((completion, answer, question))\n    return 1\n"  # noqa: E501
    score = load_reward_function(str(write_reward(tmp_path, source)), "spy")
    score.function.__globals__["SEEN"] = seen
    assert score(["c"], [42], ["q"]).tolist() == [1.0]
    assert seen == [("c", 42, "q")]


# Reward file errors


def test_a_missing_reward_file_names_the_absolute_path(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"no file {tmp_path / 'nope.py'}"):
        load_reward_function(str(tmp_path / "nope.py"), "exact")
    (tmp_path / "reward.txt").write_text(REWARD)
    with pytest.raises(UsageError, match=r"is not a \.py file"):
        load_reward_function(str(tmp_path / "reward.txt"), "exact")


def test_a_reward_file_that_raises_on_import_shows_the_error_and_line(tmp_path: Path) -> None:
    path = write_reward(tmp_path, "import math\nVALUE = 1 / 0\n")
    with pytest.raises(UsageError, match="ZeroDivisionError: division by zero") as caught:
        load_reward_function(str(path), "exact")
    assert "line 2: VALUE = 1 / 0" in caught.value.message
    broken = write_reward(tmp_path, "def exact(:\n    pass\n", "broken.py")
    with pytest.raises(UsageError, match=r"SyntaxError.* at line 1"):
        load_reward_function(str(broken), "exact")


def test_a_missing_function_lists_the_ones_the_file_defines(tmp_path: Path) -> None:
    path = write_reward(tmp_path, "import os\nfrom math import sqrt\nLIMIT = 3\n" + REWARD)
    with pytest.raises(UsageError, match=r"defines no 'score'; it defines exact$"):
        load_reward_function(str(path), "score")
    with pytest.raises(UsageError, match=r"'LIMIT' in reward\.py holds an int, not a function"):
        load_reward_function(str(path), "LIMIT")


@pytest.mark.parametrize(
    ("source", "ok"),
    [
        ("def f(completion, answer):\n    return 0\n", False),
        ("def f(completion, answer, question, extra):\n    return 0\n", False),
        ("def f(completion, answer, question, extra=1):\n    return 0\n", True),
        ("def f(*args, **kwargs):\n    return 0\n", True),
        ("def f(completion, *rest):\n    return 0\n", True),
    ],
)
def test_the_reward_function_must_take_three_arguments(
    tmp_path: Path, source: str, ok: bool
) -> None:
    path = write_reward(tmp_path, source)
    if ok:
        assert load_reward_function(str(path), "f")(["c"], ["a"], ["q"]).tolist() == [0.0]
    else:
        with pytest.raises(UsageError, match="cannot be called with three arguments"):
            load_reward_function(str(path), "f")


def test_a_reward_that_is_not_a_number_or_raises_names_the_function_and_row(
    tmp_path: Path,
) -> None:
    path = write_reward(tmp_path, "def f(c, a, q):\n    return {'yes': 1.0, 'no': 'x'}[c]\n")
    score = load_reward_function(str(path), "f")
    returned = r"reward.py:f returned 'x' for completion 1 of the batch \(question 'q'\)"
    with pytest.raises(TrainingError, match=returned):
        score(["yes", "no"], [0, 0], ["q", "q"])
    raised = r"reward.py:f raised on completion 0 of the batch \(question 'q'\): KeyError"
    with pytest.raises(TrainingError, match=raised):
        score(["maybe"], [0], ["q"])


def test_numbers_are_reals_and_zero_d_arrays_but_not_strings_or_nan() -> None:
    assert [as_number(v) for v in (1, True, 2.5, np.float32(0.5), np.array(3.0))] == [
        1.0, 1.0, 2.5, 0.5, 3.0,
    ]  # fmt: skip
    assert [as_number(v) for v in ("1", None, float("nan"), np.array([1.0, 2.0]))] == [None] * 4
