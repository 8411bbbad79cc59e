"""Tool calls in a model's turn: each family's format read from the turn's text, every way a
model gets it wrong reported as a status (never raised), the parser chosen from a chat template
or a model type, and what a tool-calling environment receives for the turn."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agile_llm import tools
from agile_llm.tools import (
    MAX_TEXT_CHARS,
    NO_CALL,
    PARSERS,
    Feedback,
    ToolCall,
    TurnCalls,
    detect,
    parser_for,
    route,
    tool_message,
)

WEATHER = ToolCall("get_weather", {"city": "Paris"})
TIME = ToolCall("get_time", {"zone": "UTC"})


def parse(name: str, text: str, tool_schemas: list[Any] | None = None) -> TurnCalls:
    """The turn as the named parser reads it."""
    return PARSERS[name].parse(text, tool_schemas)


def assert_malformed(turn: TurnCalls, error: str) -> None:
    """``turn`` is malformed with ``error``, a reason, and no calls."""
    assert (turn.status, turn.error) == ("malformed", error), turn
    assert turn.reason and not turn.calls


# -- tool_call: <tool_call>{json}</tool_call> ----------------------------------------------------


def test_tool_call_reads_one_call_and_the_prose_around_it() -> None:
    text = (
        "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "One moment.<|im_end|>"
    )
    turn = parse("tool_call", text)
    assert turn == TurnCalls(status="ok", calls=(WEATHER,), prose="Let me check.\n\nOne moment.")


def test_tool_call_reads_several_calls_in_order_and_string_arguments() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}</tool_call>'
    )
    assert parse("tool_call", text).calls == (WEATHER, TIME)


def test_tool_call_skips_calls_inside_the_reasoning() -> None:
    text = '<tool_call>{"name": "x"}</tool_call> maybe not</think>The answer is 4.'
    assert parse("tool_call", text) == TurnCalls(status="none", prose="The answer is 4.")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>', "invalid_json"),
        ('<tool_call>{"name": "get_weather", "arguments": {}}', "unclosed_block"),
        ('<tool_call>{"name": "a", "arguments": {}}<tool_call>{}</tool_call>', "unclosed_block"),
        ('{"name": "a", "arguments": {}}</tool_call>', "malformed_structure"),
        ('<tool_call>{"arguments": {"city": "Paris"}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "missing_name"),
        ('<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>', "malformed_structure"),
        ('<tool_call>{"name": "a", "arguments": "not json"}</tool_call>', "malformed_structure"),
        ('<tool_call>{"name": "a"}</tool_call>', "malformed_structure"),
        ('<tool_call>["a", {}]</tool_call>', "malformed_structure"),
    ],
)
def test_tool_call_malformed(text: str, error: str) -> None:
    assert_malformed(parse("tool_call", text), error)


def test_one_bad_call_fails_the_whole_turn_and_the_reason_names_it() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": 3}</tool_call>'
    )
    turn = parse("tool_call", text)
    assert_malformed(turn, "malformed_structure")
    assert turn.reason.startswith("Call 2: ")


NEMOTRON = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\n{city}\n</parameter>\n"
    "<parameter=days>\n{days}\n</parameter>\n</function>\n</tool_call>"
)
WEATHER_SCHEMA = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]


def test_tool_call_reads_nemotron_xml_bodies() -> None:
    text = NEMOTRON.format(city="Paris", days="3")
    assert parse("tool_call", text).calls == (
        ToolCall("get_weather", {"city": "Paris", "days": 3}),
    )


def test_xml_values_follow_the_schema_when_tools_are_given() -> None:
    text = NEMOTRON.format(city="42", days="3")
    call = ToolCall("get_weather", {"city": "42", "days": 3})
    assert parse("tool_call", text, WEATHER_SCHEMA).calls == (call,)
    bad = NEMOTRON.format(city="Paris", days="three")
    assert_malformed(parse("tool_call", bad, WEATHER_SCHEMA), "invalid_json")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("<function=>\n</function>", "missing_name"),
        ("<function=f>\n<parameter=a>\n1\n</parameter>", "malformed_structure"),
        ("<function=f>\n<parameter=a>\n1\n</function>", "unclosed_block"),
        ("<function=f>\nstray\n<parameter=a>\n1\n</parameter>\n</function>", "malformed_structure"),
        ("<function=f>\n<parameter=>\n1\n</parameter>\n</function>", "malformed_structure"),
    ],
)
def test_tool_call_malformed_xml(body: str, error: str) -> None:
    assert_malformed(parse("tool_call", f"<tool_call>{body}</tool_call>"), error)


# -- granite3: <|tool_call|>[json, ...] ---------------------------------------------------------


def test_granite3_reads_the_list_of_calls() -> None:
    text = (
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_time", "arguments": {"zone": "UTC"}}]<|end_of_text|>'
    )
    assert parse("granite3", text) == TurnCalls(status="ok", calls=(WEATHER, TIME))
    single = '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    assert parse("granite3", single).calls == (WEATHER,)


def test_granite3_without_the_tag_is_prose() -> None:
    assert parse("granite3", " It is sunny.\n") == TurnCalls(status="none", prose="It is sunny.")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('Sure! <|tool_call|>[{"name": "a", "arguments": {}}]', "malformed_structure"),
        ('<|tool_call|>{"name": "a", "arguments": {}}', "malformed_structure"),
        ('<|tool_call|>[{"name": "a", "arguments": {]', "invalid_json"),
        ("<|tool_call|>[]", "malformed_structure"),
        ('<|tool_call|>[{"arguments": {}}]', "missing_name"),
        ('<|tool_call|>[{"name": "a", "arguments": "x"}]', "malformed_structure"),
        ('<|tool_call|>["a"]', "malformed_structure"),
    ],
)
def test_granite3_malformed(text: str, error: str) -> None:
    assert_malformed(parse("granite3", text), error)


# -- gemma4: <|tool_call>call:name{key:value}<tool_call|> ---------------------------------------


def test_gemma4_reads_its_own_argument_syntax() -> None:
    text = (
        "<|channel>thought\nCall the tool.<channel|>Checking. "
        '<|tool_call>call:get_weather{city:<|"|>Paris, France<|"|>,days:3,'
        'units:{temp:celsius},tags:[<|"|>a<|"|>, b, {x:<|"|>}{<|"|>}],}<tool_call|><turn|>'
    )
    arguments = {
        "city": "Paris, France",
        "days": "3",
        "units": {"temp": "celsius"},
        "tags": ["a", "b", {"x": "}{"}],
    }
    expected = TurnCalls(
        status="ok", calls=(ToolCall("get_weather", arguments),), prose="Checking."
    )
    assert parse("gemma4", text) == expected


def test_gemma4_reads_several_calls_and_empty_arguments() -> None:
    text = (
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
        '<|tool_call>call:get_time{zone:<|"|>UTC<|"|>}<tool_call|><|tool_call>call:ping{}<tool_call|>'
    )
    assert parse("gemma4", text).calls == (WEATHER, TIME, ToolCall("ping", {}))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('call:get_weather{city:<|"|>Paris}', "malformed_structure"),
        ('call:get_weather{city:<|"|>Paris<|"|>', "malformed_structure"),
        ('call:get_weather{city:<|"|>Paris<|"|>} and more', "malformed_structure"),
        ('call:get_weather{city:<|"|>Paris<|"|> days:3}', "malformed_structure"),
        ("call:get_weather{city}", "malformed_structure"),
        ("call:get_weather{city:}", "malformed_structure"),
        ("call:get_weather{:3}", "malformed_structure"),
        ("call:get_weather{a:[1,2}", "malformed_structure"),
        ('call:{city:<|"|>Paris<|"|>}', "missing_name"),
        ('get_weather{city:<|"|>Paris<|"|>}', "malformed_structure"),
        ("call:get_weather", "malformed_structure"),
        ('{"name": "get_weather", "arguments": {}}', "malformed_structure"),
    ],
)
def test_gemma4_malformed(body: str, error: str) -> None:
    assert_malformed(parse("gemma4", f"<|tool_call>{body}<tool_call|>"), error)


def test_gemma4_unbalanced_tags() -> None:
    assert_malformed(parse("gemma4", "<|tool_call>call:f{}"), "unclosed_block")
    assert_malformed(parse("gemma4", "call:f{}<tool_call|>"), "malformed_structure")


def test_gemma4_bounds_how_deep_arguments_nest() -> None:
    deep = "call:f" + "{a:" * 200 + "1" + "}" * 200
    assert_malformed(parse("gemma4", f"<|tool_call>{deep}<tool_call|>"), "malformed_structure")


def test_gemma4_renders_tool_results_itself() -> None:
    results = [tool_message("get_weather", "sunny"), {"role": "tool", "content": "12:00"}]
    assert PARSERS["gemma4"].render_results(results) == (
        '<|tool_response>response:get_weather{value:<|"|>sunny<|"|>}<tool_response|>'
        '<|tool_response>response:unknown{value:<|"|>12:00<|"|>}<tool_response|>'
    )
    assert PARSERS["gemma4"].render_results([{"role": "user", "content": "hi"}]) is None
    assert PARSERS["gemma4"].render_results([]) is None
    for name in ("tool_call", "granite3", "harmony"):
        assert PARSERS[name].render_results(results) is None


# -- harmony: gpt-oss messages addressed to=functions.NAME --------------------------------------

HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)


def test_harmony_reads_a_call_after_the_analysis() -> None:
    assert parse("harmony", HARMONY_CALL) == TurnCalls(status="ok", calls=(WEATHER,))


def test_harmony_reads_calls_in_the_first_message_and_the_role_header() -> None:
    text = (
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>"
        '{"zone": "UTC"}'
        "<|end|>"
    )
    assert parse("harmony", text).calls == (WEATHER, TIME)


def test_harmony_prose_is_the_final_message_without_the_analysis() -> None:
    text = (
        "<|channel|>analysis<|message|>2+2 is 4.<|end|><|start|>assistant<|channel|>final"
        "<|message|>The answer is 4.<|return|>ignored"
    )
    assert parse("harmony", text) == TurnCalls(status="none", prose="The answer is 4.")
    assert parse("harmony", "The answer is 4.") == TurnCalls(
        status="none", prose="The answer is 4."
    )


def test_harmony_leaves_built_in_tools_to_others() -> None:
    text = '<|channel|>analysis to=browser.search<|message|>{"query": "x"}<|call|>'
    assert parse("harmony", text) == TurnCalls(status="none")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<|channel|>commentary to=functions.f json<|message|>{"a": }<|call|>', "invalid_json"),
        ('<|channel|>commentary to=functions.f json<|message|>{"a": 1}', "unclosed_block"),
        ("<|channel|>commentary to=functions.f json", "unclosed_block"),
        ('<|channel|>commentary to=functions. json<|message|>{"a": 1}<|call|>', "missing_name"),
        ("<|channel|>commentary to=functions.f json<|message|>[1]<|call|>", "malformed_structure"),
        ('<|channel|>commentary to=functions.f json<|message|>"a"<|call|>', "malformed_structure"),
    ],
)
def test_harmony_malformed(text: str, error: str) -> None:
    assert_malformed(parse("harmony", text), error)


# -- every parser: bounds and garbage -----------------------------------------------------------


@pytest.mark.parametrize("name", list(PARSERS))
def test_a_turn_past_the_bound_is_refused_unread(name: str) -> None:
    turn = parse(name, "<tool_call>" + "x" * MAX_TEXT_CHARS)
    assert_malformed(turn, "too_long")
    assert parse(name, "x" * MAX_TEXT_CHARS).status == "none"


@pytest.mark.parametrize("name", list(PARSERS))
def test_deep_nesting_is_a_status_not_a_recursion_error(name: str) -> None:
    nested = "[" * 50_000
    texts = [
        f"<tool_call>{nested}</tool_call>",
        f"<|tool_call|>{nested}",
        f"<|tool_call>call:f{{a:{nested}<tool_call|>",
        f"<|channel|>commentary to=functions.f<|message|>{nested}<|call|>",
    ]
    for text in texts:
        assert parse(name, text).status in ("none", "malformed")


@pytest.mark.parametrize("name", list(PARSERS))
def test_non_text_is_malformed(name: str) -> None:
    assert_malformed(PARSERS[name].parse(None), "malformed_structure")  # type: ignore[arg-type]


PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<|tool_call|>",
    "<|tool_call>",
    "<tool_call|>",
    "call:",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "</think>",
    "<channel|>",
    "<|start|>",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    "<|return|>",
    "<|channel|>",
    " to=functions.",
    '<|"|>',
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    '"',
    "name",
    "arguments",
    "f",
    '{"name": "f", "arguments": {}}',
    "\n",
    " ",
    "é",
    "\x00",
    "\ud800",
]


@pytest.mark.parametrize("name", list(PARSERS))
def test_garbage_never_raises(name: str) -> None:
    generator = random.Random(f"garbage-{name}")
    for _ in range(400):
        text = "".join(generator.choice(PIECES) for _ in range(generator.randint(0, 40)))
        turn = parse(name, text)
        assert turn.status in ("ok", "none", "malformed")
        assert (turn.status == "malformed") == bool(turn.reason)
        for call in turn.calls:
            assert isinstance(call.name, str) and call.name.strip()
            assert isinstance(call.arguments, dict)


# -- names, detection -----------------------------------------------------------------------------


def test_parser_names_are_2_58s() -> None:
    assert list(PARSERS) == ["tool_call", "granite3", "gemma4", "harmony"]
    assert all(parser_for(name).name == name for name in PARSERS)
    with pytest.raises(ValueError, match="tool_call, granite3, gemma4, harmony"):
        parser_for("hermes")


QWEN25_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"\\n\\n# Tools\\n\\nYou may call one or "
    'more functions to assist with the user query.\\n\\n<tools>" }}{%- for tool in tools %}'
    '{{- tool | tojson }}{%- endfor %}{{- "\\n</tools>\\n\\nFor each function call, return a json '
    "object with function name and arguments within <tool_call></tool_call> XML tags:\\n"
    '<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n'
    '</tool_call><|im_end|>\\n" }}{%- endif %}'
)
GRANITE3_TEMPLATE = (
    "{%- if tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>' }}"
    "{{- tools | tojson(indent=4) }}{{- '<|end_of_text|>\\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant_tool_call' %}"
    "{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] "
    "+ '<|end_of_text|>\\n' }}"
)
GEMMA4_TEMPLATE = (
    "{%- for tool_call in message['tool_calls'] -%}{{- '<|tool_call>call:' + "
    "tool_call['function']['name'] + '{' -}}{{- '}<tool_call|>' -}}{%- endfor -%}"
    "{%- if message['role'] == 'tool' -%}{{- '<|tool_response>response:' + message['name'] "
    "-}}{{- '<tool_response|>' -}}{%- endif -%}{{- '<|turn>model\\n' -}}"
)
HARMONY_TEMPLATE = (
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking + '<|end|>' }}"
    "{{- '<|start|>assistant to=' }}{{- 'functions.' + tool_call.name + "
    "'<|channel|>commentary json<|message|>' }}{{- tool_call.arguments|tojson }}"
    "{{- '<|call|>' }}{{- '<|start|>assistant<|channel|>final<|message|>' + message.content }}"
)
GEMMA3_TEMPLATE = "{{ bos_token }}{{ '<start_of_turn>' + role + '\\n' }}<end_of_turn>"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN25_TEMPLATE, "tool_call"),
        (GRANITE3_TEMPLATE, "granite3"),
        (GEMMA4_TEMPLATE, "gemma4"),
        (HARMONY_TEMPLATE, "harmony"),
        (GEMMA3_TEMPLATE, None),
        ("", None),
        (None, None),
    ],
)
def test_detect_reads_the_chat_template(template: str | None, expected: str | None) -> None:
    assert detect(template, None) == expected
    assert detect(template, "llama") == expected


def test_detect_takes_a_known_family_first() -> None:
    assert detect(None, "qwen2") == "tool_call"
    assert detect(None, "granitemoe") == "granite3"
    assert detect(None, "granitemoehybrid") == "tool_call"
    assert detect(None, "gemma4_text") == "gemma4"
    assert detect(QWEN25_TEMPLATE, "gpt_oss") == "harmony"
    assert detect(GEMMA3_TEMPLATE, "gemma3") is None
    assert set(tools.FAMILY_PARSERS.values()) <= set(PARSERS)


# -- route ----------------------------------------------------------------------------------------


def test_route_runs_the_calls() -> None:
    turn = TurnCalls(status="ok", calls=(WEATHER, TIME), prose="Checking.")
    assert route(turn) == (WEATHER, TIME)
    assert route(turn, answer_tool="submit") == (WEATHER, TIME)


def test_route_sends_prose_to_the_answer_tool() -> None:
    turn = parse("tool_call", "<think>hmm</think>My guess is 42.")
    assert route(turn, answer_tool="guess") == (ToolCall("guess", {"message": "My guess is 42."}),)
    answer = ToolCall("submit_answer", {"answer": "My guess is 42."})
    assert route(turn, answer_tool="submit_answer", action_field="answer") == (answer,)


def test_route_asks_for_a_call_when_no_tool_takes_prose() -> None:
    feedback = route(TurnCalls(status="none", prose="My guess is 42."))
    assert isinstance(feedback, Feedback) and feedback.error == NO_CALL
    message = feedback.as_message()
    assert message["role"] == "tool" and message["name"] == "unknown"
    assert message["content"].startswith("Error: No tool call found.")


def test_route_rejects_a_malformed_turn_even_with_an_answer_tool() -> None:
    turn = parse("tool_call", '<tool_call>{"name": "guess", "arguments": {"n": }}</tool_call>')
    for answer_tool in (None, "guess"):
        feedback = route(turn, answer_tool=answer_tool)
        assert isinstance(feedback, Feedback) and feedback.error == "invalid_json"
        assert feedback.message.startswith(turn.reason) and "No call ran" in feedback.message


def test_tool_message_is_a_chat_message() -> None:
    assert tool_message("get_weather", "sunny") == {
        "role": "tool",
        "name": "get_weather",
        "content": "sunny",
    }
