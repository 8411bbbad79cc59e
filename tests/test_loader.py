"""Reading manifest files: strict YAML/JSON with located errors and resource limits."""

from __future__ import annotations

import pytest

from agile_cli.errors import ManifestError
from agile_cli.loader import MAX_BYTES, MAX_TEXT, load_file, load_text


def _only_error(excinfo: pytest.ExceptionInfo[ManifestError]) -> str:
    assert len(excinfo.value.errors) == 1
    return excinfo.value.errors[0].render()


def test_yaml_duplicate_key_is_an_error_with_both_lines() -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_text("training:\n  pop_size: 2\n  pop_size: 4\n")
    assert "line 3" in _only_error(excinfo)
    assert "duplicate key 'pop_size' (first at line 2)" in _only_error(excinfo)


def test_json_duplicate_key_is_an_error() -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_text('{"a": 1, "a": 2}', as_json=True)
    assert "duplicate key 'a'" in _only_error(excinfo)


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_text("algorithm:\n  name: [DQN\n")
    assert _only_error(excinfo).startswith("line 3, column 1: invalid YAML")


def test_json_syntax_error_names_line_and_column(tmp_path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{\n  "algorithm": {,}\n}')
    with pytest.raises(ManifestError) as excinfo:
        load_file(path)
    assert _only_error(excinfo).startswith("line 2, column 17: invalid JSON")


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "file is empty"), ("# only a comment\n", "file is empty"),
     ("- a\n- b\n", "top level is a list"), ("just text\n", "top level is a string")],
)  # fmt: skip
def test_empty_or_non_mapping_documents_are_refused(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_text(text)
    assert message in _only_error(excinfo)


def test_alias_bomb_fails_fast() -> None:
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]")
    with pytest.raises(ManifestError) as excinfo:
        load_text("\n".join(lines))
    assert "anchors and aliases expand to more than" in _only_error(excinfo)


def test_modest_aliases_are_fine() -> None:
    data = load_text("base: &lr {min: 0.001, max: 0.1}\ncopy: *lr\n")
    assert data["copy"] == {"min": 0.001, "max": 0.1}


def test_one_long_string_aliased_many_times_is_refused_by_its_characters() -> None:
    """300 aliases of a 400 KB note: a handful of values, but 120 MB of text once expanded
    (a run folder's manifest.yaml writes it all out)."""
    note = "x" * 400_000
    steps = "".join(f"  - {{generation: {g}, mutation: *note}}\n" for g in range(2, 301))
    text = f"notes:\n  - {{generation: 1, mutation: &note {note}}}\n{steps}"
    assert len(text.encode("utf-8")) < MAX_BYTES
    with pytest.raises(ManifestError) as excinfo:
        load_text(text, source="recipe.yaml")
    assert _only_error(excinfo) == (
        f"line 1, column 1: anchors and aliases expand to more than {MAX_TEXT:,} characters "
        "of text (write the values out, or share fewer of them)"
    )


def test_a_file_without_aliases_is_not_refused_for_its_text() -> None:
    note = "x" * (MAX_BYTES - 100)
    assert load_text(f"notes: {note}\n")["notes"] == note
    shared = "y" * (MAX_TEXT // 4 - 100)  # shared, but expanding to less than the limit
    data = load_text(f"a: &s {shared}\nb: *s\nc: *s\nd: *s\n")
    assert data["d"] == shared


def test_huge_file_is_refused_before_reading(tmp_path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as handle:
        handle.write("a: 1\n")
        handle.seek(MAX_BYTES + 10)
        handle.write("\n")
    with pytest.raises(ManifestError) as excinfo:
        load_file(path)
    assert "manifests are limited to" in _only_error(excinfo)


def test_missing_file_says_so(tmp_path) -> None:
    with pytest.raises(ManifestError) as excinfo:
        load_file(tmp_path / "nope.yaml")
    assert "no such file" in _only_error(excinfo)


def test_exponent_without_dot_is_a_float() -> None:
    assert load_text("lr: 1e-4\nbig: 1_000_000\n") == {"lr": 1e-4, "big": 1_000_000}


@pytest.mark.parametrize(
    ("text", "message"),
    [("when: 2020-13-45\n", "month must be in 1..12"), ("? [a, b]\n: 1\n", "unhashable type"),
     ("x: !!float abc\n", "could not convert string to float")],
)  # fmt: skip
def test_a_value_no_yaml_constructor_takes_is_a_sentence(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=f"invalid YAML value: {message}"):
        load_text(text)
