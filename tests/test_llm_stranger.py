"""A model folder from a stranger, and hostile data: chat templates that loop for hours or build
gigabytes, a config.json describing a model its weights do not hold, dataset rows nested
100,000 deep, multi-turn environments that say nothing, unreadable characters or 50 MB. Each
ends in one sentence before a run folder is made, or trains in the memory of the context."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from agile_cli import TrainingManifest, UsageError
from agile_cli.helpers import installed_registry
from agile_llm import data as datasets
from agile_llm import folder, templates, text
from agile_llm.algorithms import play_episodes
from agile_llm.tiny import character_tokenizer

from .test_llm_training import manifest, write_manifest

# -- chat templates ------------------------------------------------------------------------------

CHATML = (
    "{%- for m in messages %}{%- if loop.first and m['role'] != 'system' %}<|im_start|>system\n"
    "You help.<|im_end|>\n{% endif %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
HEADERS = (
    "{{- bos_token }}{%- set ns = namespace(system='') %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set ns.system = messages[0]['content'] %}"
    "{%- set messages = messages[1:] %}{%- endif %}"
    "{{- '<|header|>system\\n' ~ ns.system ~ '<|eot|>' }}"
    "{%- for m in messages %}{%- if m.role not in ['user', 'assistant'] %}"
    "{{ raise_exception('roles alternate') }}{% endif %}"
    "{{- '<|header|>' ~ m.role ~ '\\n' ~ m.content | trim ~ '<|eot|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|header|>assistant\\n' }}{%- endif %}"
)
MARKED = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}A: {{ m.content }}"
    "{{ eos_token }}{% endgeneration %}{% else %}U: {{ m.content }}\n{% endif %}"
    "{% if loop.index > 5 %}{% break %}{% endif %}{% endfor %}{% if add_generation_prompt %}A:"
    "{% endif %}"
)
TOOLS = (
    "{{ dict(a=1, b=[1, 2])|tojson }}{{ messages|map(attribute='role')|join(',') }}"
    "{% for m in messages|selectattr('role', 'equalto', 'user') %}{{ m.content|upper }}"
    "{{ loop.length }}{% endfor %}{{ messages|length * 2 }}{{ '%d-%s' % (1700000000000, 'x') }}"
    "{{ '{}!'.format(1700000000000) }}{{ '%d'|format(1700000000000) }}{{ [1, 2]|sum }}"
    "{{ range(3)|list }}{{ messages[-1]['content'] }}"
)
ESCAPING = (
    "{% for m in messages %}{% if m.role != 'assistant' %}{% autoescape true %}"
    "{{ m.content ~ '<x>' }}{{ '<y>'|safe ~ m.role }}{% endautoescape %}"
    "{% else %}{{ '<z>'|safe ~ m.content }}{% endif %}{% endfor %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "1<2 & 2>1 "}],
    [{"role": "system", "content": "Add"}, {"role": "user", "content": "1+1="},
     {"role": "assistant", "content": "2"}],
    [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"},
     {"role": "user", "content": "and 2+2?"}],
]  # fmt: skip


@pytest.mark.parametrize(
    "template",
    [CHATML, HEADERS, MARKED, TOOLS, ESCAPING],
    ids=["chatml", "headers", "marked", "tools", "escaping"],
)
def test_templates_render_as_transformers_renders_them(template: str) -> None:
    """agile's bounded sandbox writes what ``apply_chat_template`` writes, with the globals
    and filters transformers gives templates, continuing a final assistant turn or opening
    the assistant's."""
    tokenizer = character_tokenizer()
    tokenizer.chat_template = template
    for messages in CONVERSATIONS:
        prefilled = messages[-1]["role"] == "assistant"
        expected = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=not prefilled,
            continue_final_message=prefilled,
        )  # fmt: skip
        assert templates.render(tokenizer, messages) == expected


LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
LOOPS_OF_ONE_RANGE = (
    "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% for c in r %}{% endfor %}"
    "{% endfor %}{% endfor %}"
)
DOUBLING_MACRO = (
    "{% macro twice(s, n) %}{% if n %}{{ twice(s ~ s, n - 1) }}{% else %}{{ s|length }}"
    "{% endif %}{% endmacro %}{{ twice('x', 64) }}"
)
DOUBLING_NAMESPACE = (
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s|length }}"
)
WRITING = "{% for i in range(100000) %}{% for j in range(100) %}" + "x" * 100 + "{% endfor %}" * 2
#: The turn ``user: 12=`` holds 7 characters.
TOO_MUCH = (
    "made more than the 2,000,112 characters one render may make (2,000,000 plus 16 for each "
    "character of the turns), at "
)


@pytest.mark.parametrize(
    ("template", "clause"),
    [
        ("{{ 'x' * 10**9 }}", f"{TOO_MUCH}the operator *"),
        ("{{ [0] * 10**9 }}", "at the operator *"),
        ("{{ 'x'.encode() * 10**9 }}", "at the operator *"),
        ("{{ 'x'|center(10**9) }}", "passed 1,000,000,000 to the filter center, more than the"),
        ("{{ 'x'.ljust(10**9) }}", "passed 1,000,000,000 to the call of ljust()"),
        ("{{ '{:>999999999}'.format(1) }}", "at the call of format()"),
        ("{{ '%0999999999d' % 1 }}", "at the operator %"),
        (DOUBLING_MACRO, "at the operator ~"),
        (DOUBLING_NAMESPACE, "at the operator +"),
        ("{{ range(100000)|list|tojson(indent=100000) }}", "at the filter tojson"),
        ("{{ ('9' * 100000)|replace('9', 'x' * 1000) }}", "at the filter replace"),
        ("{{ ('\\n' * 100000)|indent(100) }}", "at the filter indent"),
        ("{{ (['x'] * 100000)|join('y' * 1000) }}", "at the filter join"),
        ("{{ 2 ** 100000000 }}", "computed a power of ~100,000,000 bits, more than the 10,000 a"),
        (WRITING, "at the text it writes"),
        (LOOPS, "ran for more than 0.5 s"),
        (LOOPS_OF_ONE_RANGE, "ran for more than 0.5 s"),
        ("{# " + "x" * 200_000 + " #}", "is 200,006 characters long, more than the 200,000 agile"),
    ],
    ids=["string", "list", "bytes", "center", "ljust", "format", "percent", "macro", "namespace",
         "tojson", "replace", "indent", "join", "power", "writing", "loops", "one-range", "long"],
)  # fmt: skip
def test_a_template_past_a_bound_is_one_usage_error_at_once(
    template: str, clause: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(templates, "SECONDS", 0.5)
    tokenizer = character_tokenizer()
    tokenizer.chat_template = template
    tokenizer.name_or_path = "models/tiny"
    started = time.monotonic()
    with pytest.raises(UsageError) as caught:
        text.render(tokenizer, [{"role": "user", "content": "12="}])
    assert time.monotonic() - started < 5
    message = caught.value.message
    assert message.startswith(
        "the chat template of the tokenizer in models/tiny went past agile's bounds on a "
        "template: it "
    )
    assert clause in message
    assert "remove it" in (caught.value.hint or "")


def test_a_long_row_renders_within_the_bounds_it_scales() -> None:
    """What a render may make grows with the turns: a 3-million-character turn (more than the
    floor) goes through a template that copies it several times."""
    tokenizer = character_tokenizer()
    tokenizer.chat_template = CHATML
    content = "7" * 3_000_000
    rendered = text.render(tokenizer, [{"role": "user", "content": content}])
    assert rendered.endswith(f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n")


# -- the whole run, under a memory ceiling -------------------------------------------------------


def _address_space() -> int:
    """The address space a fresh Python takes with the LLM stack imported."""
    probe = ("import torch, transformers, peft, agile_cli.cli, agile_llm.population, "
             "agile_llm.multiturn; print(next(l.split()[1] for l in open('/proc/self/status') "
             "if l.startswith('VmPeak')))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return int(done.stdout) * 1024


@pytest.fixture(scope="module")
def ceiling() -> int:
    """Room for a tiny model's run (loading and training it take ~0.3 GiB more than the
    imports), far below what the hostile inputs took: 7.3 GB and more."""
    if not Path("/proc/self/status").exists():
        pytest.skip("reads /proc (Linux)")
    return _address_space() + 3 * 1024**3


def _train_within(ceiling: int, path: Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                   float]:  # fmt: skip
    """``agile train PATH`` in a process of at most ``ceiling`` bytes of address space and 240
    s; what it did and how long it took."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "agile_cli", "train", str(path), "--run-dir", str(cwd / "run")],
        capture_output=True, text=True, timeout=240, preexec_fn=limit, cwd=cwd,
    )  # fmt: skip
    return done, time.monotonic() - started


def _stranger(tiny: Path, folder_: Path, *, template: str | None = None,
              config: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """A copy of the tiny model with ``template`` as its chat template and ``config``'s
    entries in its config.json (None removes one)."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny, folder_)
    if template is not None:
        tokenizer = AutoTokenizer.from_pretrained(folder_)
        tokenizer.chat_template = template
        tokenizer.save_pretrained(folder_)
    written = json.loads((folder_ / "config.json").read_text())
    for key, value in (config or {}).items():
        if value is None:
            written.pop(key, None)
        else:
            written[key] = value
    (folder_ / "config.json").write_text(json.dumps(written))
    return folder_


HOSTILE_ENV = '''
class Hostile:
    """Says ``said`` every turn (or, with ``size``, that many characters of it)."""

    system_prompt = None

    def __init__(self, said="", size=0, max_turns=3):
        self.said = said * size if size else said
        self.max_turns = max_turns

    def reset(self, seed=None):
        return self.said, {}

    def step(self, reply):
        return self.said, 0.0, False, False, {}


def make(**options):
    return Hostile(**options)
'''


def _multiturn(tiny: Path, context: int = 48, **env_config: Any) -> dict[str, Any]:
    """A GRPO manifest over the multi-turn environment ``hostile.py:make``, transcripts of
    ``context`` tokens."""
    return {
        "algorithm": {"name": "GRPO", "batch_size": 2, "lr": 0.01, "temperature": 1.0,
                      "max_output_tokens": 2, "gradient_checkpointing": False, "group_size": 2},
        "environment": {"env_type": "multiturn", "entrypoint": "hostile.py:make",
                        "env_config": {"max_turns": 3, **env_config}},
        "training": {"max_steps": 4, "evo_steps": 1, "pop_size": 2, "eval_rows": 2},
        "mutation": {"rand_seed": 1, "probabilities": {"no_mut": 0.5, "rl_hp_mut": 0.5}},
        "tournament_selection": {"tournament_size": 2, "elitism": True},
        "network": {"pretrained_model_name_or_path": str(tiny), "max_context_length": context,
                    "lora_config": {"lora_r": 2, "lora_alpha": 4, "lora_dropout": 0.0,
                                    "target_modules": ["q_proj", "v_proj"]}},
    }  # fmt: skip


#: Nested loops that run only once a conversation has more than one turn.
LATE_LOOPS = "{% if messages|length > 1 %}" + LOOPS + "{% endif %}{{ messages[0]['content'] }}"


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [
        ({"template": "{{ 'x' * 10**9 }}"}, "template: it made more than the 2,000,"),
        ({"template": LOOPS}, "template: it ran for more than 2 s"),
        ({"template": LATE_LOOPS, "multiturn": True}, "template: it ran for more than 2 s"),
        ({"config": {"num_hidden_layers": 200_000, "layer_types": None}},
         "num_hidden_layers 200,000"),  # past the memory, or the weights' 2 layers
    ],
    ids=["template-memory", "template-loops", "template-loops-multiturn", "layers-200000"],
)  # fmt: skip
def test_a_hostile_model_folder_stops_training_at_once_before_the_run_folder(
    tiny: Path, data: Path, tmp_path: Path, ceiling: int, hostile: dict[str, Any], expected: str
) -> None:
    """The probe's findings: the template took 7.3 GB or hung past 90 s and left a run folder
    holding latest.pt; the config ran past 120 s at 1.8 GB. Each is now refused in seconds,
    before the run folder, within a ceiling of a few GiB."""
    multiturn = hostile.pop("multiturn", False)
    model = _stranger(tiny, tmp_path / "stranger", **hostile)
    if multiturn:
        (tmp_path / "hostile.py").write_text(HOSTILE_ENV, encoding="utf-8")
        content = _multiturn(model, said="guess")
    else:
        content = manifest("GRPO", model, data)
    done, seconds = _train_within(ceiling, write_manifest(tmp_path / "m.yaml", content), tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert expected in done.stderr and f"{model}" in done.stderr
    assert "Traceback" not in done.stderr and seconds < 90
    assert not (tmp_path / "run").exists()


def test_a_multiturn_environment_saying_50_mb_trains_in_the_contexts_memory(
    tiny: Path, tmp_path: Path, ceiling: int
) -> None:
    """Each 50 MB message is cut to what a transcript of max_context_length tokens can use
    (it took 7 GB, then the process aborted)."""
    (tmp_path / "hostile.py").write_text(HOSTILE_ENV, encoding="utf-8")
    content = _multiturn(tiny, said="x", size=50_000_000)
    done, _ = _train_within(ceiling, write_manifest(tmp_path / "m.yaml", content), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reset() of the episode seeded" in done.stderr
    assert "gave a text of 50,000,000 characters" in done.stderr
    assert "it is cut to its last 1,536" in done.stderr  # 48 tokens of 32 characters


# -- config.json against the weights -------------------------------------------------------------


def _meta_parameters(config: Any) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def test_the_estimate_from_config_json_is_a_lower_bound_of_the_model() -> None:
    from transformers import GPT2Config, LlamaConfig, MixtralConfig, Qwen2Config

    configs = [
        Qwen2Config(vocab_size=99, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
        LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False),
        GPT2Config(vocab_size=500, n_embd=64, n_layer=3, n_head=4),
        MixtralConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_local_experts=4),
    ]  # fmt: skip
    for config in configs:
        estimate = folder.estimate(config.to_dict())
        assert estimate is not None
        real = _meta_parameters(config)
        assert real / 3 < estimate.parameters <= real, type(config).__name__
        assert estimate.nbytes == estimate.parameters * 4  # float32


def test_a_config_larger_than_the_memory_is_refused_naming_its_field(
    run, tiny: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agile_llm.model

    monkeypatch.setattr(agile_llm.model, "available_memory", lambda: 64 << 20)
    model = _stranger(tiny, tmp_path / "stranger", config={"vocab_size": 1_000_000})
    content = manifest("SFT", model, data)
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"the config.json of {model} gives vocab_size 1,000,000: a model of about " in (
        result.output
    )
    assert "more than the 64.0 MiB this machine has free (its weight files take" in result.output
    assert not (tmp_path / "run").exists()


def _drop_norm(folder_: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(folder_ / "model.safetensors")
    del weights["model.norm.weight"]
    save_file(weights, folder_ / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"num_hidden_layers": 3, "layer_types": None},
         "config.json gives num_hidden_layers 3, and the weights in {model} hold 2 layers "
         "(model.layers.0 to model.layers.1): the rest would be random"),
        ({"num_hidden_layers": 1, "layer_types": None},
         "the weights of {model} hold 12 tensors the model its config.json describes has no "
         "place for (model.layers.1.input_layernorm.weight"),
        ({"intermediate_size": 256},
         "the weights of {model} do not fit the model its config.json describes: 6 tensors "
         "differ in shape, the first model.layers.0.mlp.down_proj.weight ([64, 128] in the "
         "weights, [64, 256] by the config)"),
        (None, "the weights of {model} lack 1 tensor of the model its config.json describes "
               "(model.norm.weight), which would start at random"),
    ],
    ids=["more-layers", "fewer-layers", "other-shapes", "missing-tensor"],
)  # fmt: skip
def test_weights_that_do_not_cover_the_config_are_refused(
    run, tiny: Path, data: Path, tmp_path: Path, config: dict[str, Any] | None, expected: str
) -> None:
    """The probe's 3 layers over weights of 2 trained silently with a random layer."""
    model = _stranger(tiny, tmp_path / "stranger", config=config)
    if config is None:
        _drop_norm(model)
    content = manifest("SFT", model, data)
    result = run("train", str(write_manifest(tmp_path / "m.yaml", content)), "--run-dir",
                 str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert expected.format(model=model) in result.output
    assert "use the config.json the weights were saved with" in result.output
    assert not (tmp_path / "run").exists()


# -- dataset rows --------------------------------------------------------------------------------


def _rows(count: int) -> str:
    return "".join(json.dumps({"prompt": f"{i}=", "answer": str(i)}) + "\n" for i in range(count))


def _nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("name", "line", "where"),
    [
        ("rows.jsonl", _nested(100_000, "list"), "rows.jsonl, line 3 nests"),
        ("rows.jsonl", _nested(100_000, "object"), "rows.jsonl, line 3 nests"),
        ("rows.jsonl", json.dumps({"prompt": "1=", "answer": json.loads(_nested(150, "list"))}),
         "rows.jsonl, line 3 nests"),
        ("rows.json", _nested(100_000, "object"), "rows.json nests"),
        ("rows.json", json.dumps({"prompt": "1=", "answer": json.loads(_nested(150, "object"))}),
         "rows.json: item 2 nests"),
    ],
    ids=["jsonl-list", "jsonl-object", "jsonl-150-deep", "json-object", "json-150-deep"],
)  # fmt: skip
def test_a_row_nested_too_deep_is_one_sentence_naming_its_line(
    tmp_path: Path, name: str, line: str, where: str
) -> None:
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text(_rows(2) + line + "\n" + _rows(1), encoding="utf-8")
    else:
        rows = [json.loads(r) for r in _rows(2).splitlines()]
        path.write_text("[" + ",".join([*map(json.dumps, rows), line]) + "]", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        datasets.load_rows(str(path))
    assert caught.value.message == (
        f"environment.dataset: {path.absolute().parent}/{where} lists or objects more than 100 deep"
    )


def test_a_row_nested_within_the_bound_is_read(tmp_path: Path) -> None:
    row = {"prompt": "1=", "answer": json.loads(_nested(99, "list"))}
    assert datasets.nesting(row) == 100
    path = tmp_path / "rows.jsonl"
    path.write_text(_rows(2) + json.dumps(row) + "\n", encoding="utf-8")
    assert datasets.load_rows(str(path))[2] == row


def test_lone_surrogates_and_nul_in_a_text_are_tokenised_as_replacement_characters() -> None:
    tokenizer = character_tokenizer()
    with pytest.warns(UserWarning, match="lone surrogates or NUL characters"):
        ids = text.encode(tokenizer, "1\ud800+\x002\ud83d\ude00", 16)
    unknown = tokenizer.unk_token_id  # U+FFFD and the emoji are not among its characters
    assert ids == [tokenizer.convert_tokens_to_ids("1"), unknown,
                   tokenizer.convert_tokens_to_ids("+"), unknown,
                   tokenizer.convert_tokens_to_ids("2"), unknown]  # fmt: skip
    assert text.clean("1\ud800+\x002\ud83d\ude00") == "1\ufffd+\ufffd2\U0001f600"


# -- multi-turn environments ---------------------------------------------------------------------


#: A chat template short enough for three turns in the tiny model's 128 positions.
SHORT = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def _members(tiny: Path, game: Path, chat: str | None, **env_config: Any) -> tuple[list[Any], Any]:
    """Two GRPO members over ``hostile.py:make`` (with ``chat`` as the chat template),
    transcripts of 128 tokens."""
    from agile_cli.training import setup
    from agile_rl.runtime.agent import AgentContext

    (game / "hostile.py").write_text(HOSTILE_ENV, encoding="utf-8")
    registry = installed_registry()
    content = _multiturn(tiny, 128, **env_config)
    parsed = TrainingManifest.get_validated(content, registry=registry)
    env = setup.build_environment(parsed, registry, seed=0)
    context = AgentContext(torch.device("cpu"), 1, parsed.training)
    members: list[Any] = setup.build_population(
        parsed, setup.algorithm_class(parsed, registry), env, context, size=2
    )
    if chat is not None:
        members[0].tokenizer.chat_template = chat
    return members, env


@pytest.fixture
def game(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("chat", [None, SHORT], ids=["as-written", "chat-template"])
def test_an_environment_that_says_nothing_is_played_to_its_last_turn(
    tiny: Path, game: Path, chat: str | None
) -> None:
    """An empty opening is read as the start token (generation raised IndexError on a prompt
    of no tokens); empty answers are legitimate turns."""
    members, env = _members(tiny, game, chat, said="")
    episodes = play_episodes(members[:1], [env.rows_at(0, 2)], env, explore=True)[0]
    assert [e.turns for e in episodes] == [3] * 4  # two seeds, a group of two each
    assert all(not m["content"] for e in episodes for m in e.messages if m["role"] == "user")
    if chat is None:
        assert all(e.ids[0] == members[0].tokenizer.bos_token_id for e in episodes)
    rollout = members[0].episodes_rollout(episodes)
    assert rollout is None or rollout["ids"].shape[1] <= 128


@pytest.mark.parametrize("said", ["a\ud800b", "a\x00b"], ids=["surrogate", "nul"])
@pytest.mark.parametrize("chat", [None, SHORT], ids=["as-written", "chat-template"])
def test_unreadable_characters_from_an_environment_are_replaced_naming_it(
    tiny: Path, game: Path, said: str, chat: str | None
) -> None:
    members, env = _members(tiny, game, chat, said=said)
    with pytest.warns(UserWarning) as caught:
        episodes = play_episodes(members[:1], [env.rows_at(0, 1)], env, explore=False)[0]
    shown = [str(w.message) for w in caught if "lone surrogates" in str(w.message)]
    assert shown == [
        "environment.entrypoint (hostile.py:make): reset() of the episode seeded "
        f"{episodes[0].seed}, turn 0 gave lone surrogates or NUL characters, which no tokenizer "
        "takes; they are replaced by U+FFFD"
    ]  # once a run, naming the first
    users = [m["content"] for e in episodes for m in e.messages if m["role"] == "user"]
    assert users and set(users) == {"a\ufffdb"}
    assert [e.turns for e in episodes] == [3]


def test_a_message_longer_than_the_context_is_cut_and_the_transcript_kept_to_it(
    tiny: Path, game: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members, env = _members(tiny, game, None, said="ab", size=10_000)
    encode_all, longest = text.encode_all, []

    def spy(tokenizer: Any, texts: list[str], limit: int, **options: Any) -> Any:
        longest.append(max(map(len, texts)))
        return encode_all(tokenizer, texts, limit, **options)

    monkeypatch.setattr(text, "encode_all", spy)
    with pytest.warns(UserWarning, match="gave a text of 20,000 characters, more than"):
        episodes = play_episodes(members[:1], [env.rows_at(0, 2)], env, explore=True)[0]
    limit = 128 * text.CHARS_PER_TOKEN
    assert max(longest) <= limit
    assert all(len(e.ids) <= 128 and len(e.turn_of) == len(e.ids) for e in episodes)
    assert all(e.cut for e in episodes)  # the opening and a reply fill the context
    assert all(len(m["content"]) <= limit for e in episodes for m in e.messages)
