"""Prompts and completions as token tensors: rendering chat turns, padding, generating.

Prompts are padded on the left (so that generation continues every row at the same position)
and sequences for a loss are ``prompt + response`` padded on the right. Every function takes
the tokenizer explicitly; none holds state.
"""

from __future__ import annotations

import re
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from agile_cli import UsageError
from agile_cli.helpers import printable
from agile_llm import objectives, templates
from agile_llm.messages import error_detail
from agile_llm.objectives import IGNORE

if TYPE_CHECKING:
    from agile_llm.constraints import Constraint

#: Characters tokenised per token a text may contribute. A text longer than ``limit`` times
#: this is cut to that many characters at the end the model reads before it is tokenised, so
#: memory follows the context length, not the row. Common tokenizers average about four
#: characters a token, so the cut text still holds more tokens than are kept.
CHARS_PER_TOKEN = 32
#: Shown once per process (the warnings module shows a message once per place).
CUT_NOTICE = (
    f"environment.dataset: a text of more than {CHARS_PER_TOKEN} characters for each token "
    "it can take of max_context_length was cut before tokenising, keeping the end the model "
    "reads (a prompt's last characters, a response's first), where the token limit cuts it"
)
UNREADABLE_NOTICE = (
    "a text held lone surrogates or NUL characters, which no tokenizer takes; they were "
    "replaced by U+FFFD before tokenising"
)
#: What no tokenizer takes: NUL, and a surrogate code point standing alone.
_UNREADABLE = re.compile("[\x00\ud800-\udfff]")


def clean(text: str) -> str:
    """``text`` as a tokenizer takes it: a surrogate pair written as two code points joined
    into one character, a lone surrogate or a NUL replaced by U+FFFD (a JSON file's
    ``"\\ud800"`` or an environment's ``"\\x00"`` would make the tokenizer raise)."""
    if not _UNREADABLE.search(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined.replace("\x00", "\ufffd")


def start_ids(tokenizer: Any) -> list[int]:
    """What an empty prompt is read as: the tokenizer's beginning-of-text token (its end
    token where it has none), so that the model has a position to continue from."""
    for token in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id):
        if token is not None:
            return [int(token)]
    return []


def render(
    tokenizer: Any, messages: list[dict[str, str]], *, chat: bool = True,
    tools: list[Any] | None = None,
) -> str:  # fmt: skip
    """Chat turns as the prompt text the model continues.

    With a chat template (and ``chat``), the template renders them (continuing a final
    assistant turn, else opening the assistant's) in agile's bounded sandbox
    (:mod:`agile_llm.templates`); otherwise the turns' texts are joined by newlines (a prompt
    read as written).

    :raises UsageError: the template fails: Jinja's sandbox refuses it (SecurityError), it is
        not valid Jinja (TemplateSyntaxError), it raises on these turns, or it breaks a bound
        on its time or on what it makes.
    """
    if not chat or not getattr(tokenizer, "chat_template", None):
        return "\n".join(message["content"] for message in messages)
    try:
        return templates.render(tokenizer, messages, tools)
    except templates.OverBound as bound:
        raise over_bound(tokenizer, bound) from None
    except Exception as error:  # the template is the model folder's code: all it raises is its own
        raise _template_failed(tokenizer, error) from None


def check_template(tokenizer: Any) -> None:
    """Render a short conversation (a user turn, an assistant turn continued, a user turn
    after it) with the tokenizer's chat template, to refuse a template that breaks a bound on
    any conversation before a run folder is made. What it raises on these stand-in turns is
    left for the real ones to report.

    :raises UsageError: the template broke a bound.
    """
    if not getattr(tokenizer, "chat_template", None):
        return
    user, assistant = {"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}
    for messages in ([user], [user, assistant], [user, assistant, user]):
        try:
            templates.render(tokenizer, messages)
        except templates.OverBound as bound:
            raise over_bound(tokenizer, bound) from None
        except Exception:  # reported, if the real turns raise it too, when they render
            continue


def _folder(tokenizer: Any) -> str:
    return printable(str(getattr(tokenizer, "name_or_path", "") or "the model folder"))


def over_bound(tokenizer: Any, bound: templates.OverBound) -> UsageError:
    """The error of a chat template that went past a bound of agile's sandbox."""
    return UsageError(
        f"the chat template of the tokenizer in {_folder(tokenizer)} went past agile's bounds "
        f"on a template: it {bound}",
        "a chat template renders turns in milliseconds and about their own size; fix "
        "chat_template in its tokenizer_config.json (or chat_template.jinja), or remove it to "
        "join the turns' texts by newlines",
    )


def _template_failed(tokenizer: Any, error: Exception) -> UsageError:
    """What a chat template that cannot render the prompt turns did (it renders in Jinja's
    sandbox, which refuses unsafe calls with a SecurityError)."""
    return UsageError(
        f"the chat template of the tokenizer in {_folder(tokenizer)} cannot render the prompt "
        f"turns: {type(error).__name__}: {error_detail(error)}",
        "fix chat_template in its tokenizer_config.json (or chat_template.jinja), or remove it "
        "to join the turns' texts by newlines",
    )


def encode_all(
    tokenizer: Any, texts: list[str], limit: int, *, keep_end: bool = False, special: bool = False
) -> list[list[int]]:
    """:func:`encode` of each of ``texts``, tokenised in one call."""
    if not texts:
        return []
    budget = max(limit, 1) * CHARS_PER_TOKEN
    if any(len(text) > budget for text in texts):
        warnings.warn(CUT_NOTICE, stacklevel=1)
        texts = [(t[-budget:] if keep_end else t[:budget]) if len(t) > budget else t for t in texts]
    cleaned = [clean(t) for t in texts]
    if cleaned != texts:
        warnings.warn(UNREADABLE_NOTICE, stacklevel=1)
        texts = cleaned
    before, after = framing(tokenizer) if special else ([], [])
    room = max(limit - len(before) - len(after), 0)
    cut = []
    for ids in tokenizer(texts, add_special_tokens=False).input_ids:
        ids = list(ids)
        ids = ids[max(len(ids) - room, 0) :] if keep_end else ids[:room]
        cut.append(before + ids + after)
    return cut


def encode(
    tokenizer: Any, text: str, limit: int, *, keep_end: bool = False, special: bool = False
) -> list[int]:
    """The first ``limit`` token ids of ``text`` (the last ones with ``keep_end``), without
    special tokens added (a template writes its own) unless ``special`` (a prompt read as
    written: the tokenizer adds its own, e.g. a beginning-of-text token, and keeps them).

    Only the ``limit * CHARS_PER_TOKEN`` characters at that end are tokenised (with a notice
    when a text is longer): a row of any size costs memory for ``limit`` tokens, not for all
    of its own.
    """
    return encode_all(tokenizer, [text], limit, keep_end=keep_end, special=special)[0]


def framing(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (a beginning-of-text
    token, say); none where it adds none, or wraps a text some other way. Worked out once
    per tokenizer."""
    known = _FRAMINGS.get(tokenizer)
    if known is not None:
        return list(known[0]), list(known[1])
    plain = list(tokenizer("a", add_special_tokens=False).input_ids)
    framed = list(tokenizer("a", add_special_tokens=True).input_ids)
    found: tuple[list[int], list[int]] = ([], [])
    for start in range(len(framed) - len(plain) + 1):
        if framed[start : start + len(plain)] == plain:
            found = framed[:start], framed[start + len(plain) :]
            break
    _FRAMINGS[tokenizer] = found
    return list(found[0]), list(found[1])


_FRAMINGS: weakref.WeakKeyDictionary[Any, tuple[list[int], list[int]]] = weakref.WeakKeyDictionary()


@dataclass
class Prompts:
    """A left-padded batch of prompts: ``ids`` and ``mask`` are ``[B, P]``."""

    ids: torch.Tensor
    mask: torch.Tensor


def prompt_batch(tokenizer: Any, prompts: list[list[int]], device: Any) -> Prompts:
    """Left-pad token id lists into one batch."""
    width = max(len(ids) for ids in prompts)
    pad = int(tokenizer.pad_token_id)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, tokens in enumerate(prompts):
        if tokens:
            ids[row, width - len(tokens) :] = torch.tensor(tokens)
            mask[row, width - len(tokens) :] = 1
    return Prompts(ids.to(device), mask.to(device))


@dataclass
class Sequences:
    """Right-padded ``prompt + response`` rows: ``ids``, ``mask`` and ``labels`` (the response
    tokens; prompt and padding are :data:`~agile_llm.objectives.IGNORE`), all ``[B, T]``."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor

    def take(self, rows: slice | torch.Tensor) -> Sequences:
        """The rows ``rows`` (a slice, or a tensor of row indices)."""
        return Sequences(self.ids[rows], self.mask[rows], self.labels[rows])


def sequence_batch(
    tokenizer: Any, pairs: list[tuple[list[int], list[int]]], limit: int, device: Any
) -> Sequences:
    """``(prompt, response)`` id lists as training rows of at most ``limit`` tokens (the
    response's end is cut to leave one prompt token, then the prompt's start)."""
    rows = []
    for prompt, response in pairs:
        response = response[: max(limit - 1, 1)]
        prompt = prompt[-max(limit - len(response), 1) :]
        rows.append((prompt + response, len(prompt)))
    width = max(len(tokens) for tokens, _ in rows)
    pad = int(tokenizer.pad_token_id)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for row, (tokens, prompt_length) in enumerate(rows):
        ids[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
        labels[row, prompt_length : len(tokens)] = torch.tensor(tokens[prompt_length:])
    return Sequences(ids.to(device), mask.to(device), labels.to(device))


@dataclass
class Completions:
    """Generated continuations of a prompt batch.

    :param ids: ``[N, P + L]`` prompt then completion (padding after the end token).
    :param mask: ``[N, P + L]`` attention mask of ``ids``.
    :param completion: ``[N, P + L]`` True at completion tokens (up to and including the end
        token), the positions a policy-gradient loss counts.
    :param texts: each completion decoded, without special tokens.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    completion: torch.Tensor
    texts: list[str]

    def take(self, rows: slice) -> Completions:
        """The completions of rows ``rows``."""
        return Completions(self.ids[rows], self.mask[rows], self.completion[rows], self.texts[rows])


@dataclass(frozen=True)
class Sampling:
    """How completions are sampled: the algorithm's sampling fields (``top_k`` 0: every
    token; ``stop``: strings that end a completion, the last of them kept)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: Any) -> Sampling:
        """The sampling fields of an algorithm section."""
        config = getattr(spec, "vllm_config", None)
        stop = getattr(config, "stop_sequences", None) or ()
        return cls(float(getattr(spec, "temperature", 1.0)), float(getattr(spec, "top_p", 1.0)),
                   int(getattr(spec, "top_k", 0)), float(getattr(spec, "min_p", 0.0)),
                   float(getattr(spec, "repetition_penalty", 1.0)), tuple(stop))  # fmt: skip

    def options(self) -> dict[str, Any]:
        """transformers' ``generate`` arguments for it."""
        options: dict[str, Any] = {"do_sample": True, "temperature": self.temperature,
                                   "top_p": self.top_p, "top_k": self.top_k}  # fmt: skip
        if self.min_p:
            options["min_p"] = self.min_p
        if self.repetition_penalty != 1.0:
            options["repetition_penalty"] = self.repetition_penalty
        return options


def generate(
    model: Any,
    tokenizer: Any,
    prompts: Prompts,
    *,
    max_new_tokens: int,
    min_new_tokens: int | None = None,
    sampling: Sampling | None = None,
    seed: int | None = None,
    constraint: Constraint | None = None,
) -> Completions:
    """Continue every prompt: sampled as ``sampling`` says (seeded by ``seed``), or greedily
    when it is None, held to ``constraint`` (a reasoning budget, an answer's pattern). A
    completion ends at the end token or after a stop string."""
    options: dict[str, Any] = {"do_sample": False, "max_new_tokens": max(1, max_new_tokens)}
    if constraint is not None:
        from transformers import LogitsProcessorList

        processor = constraint.processor(tokenizer, int(prompts.ids.shape[1]))
        options["logits_processor"] = LogitsProcessorList([processor])
    if sampling is not None:
        options.update(sampling.options())
        if seed is not None:
            torch.manual_seed(seed)  # transformers samples from torch's global generator
    if sampling is not None and sampling.stop:
        options.update(stop_strings=list(sampling.stop), tokenizer=tokenizer)
    if min_new_tokens:
        options["min_new_tokens"] = min(min_new_tokens, options["max_new_tokens"])
    with torch.no_grad():
        ids = model.generate(
            input_ids=prompts.ids, attention_mask=prompts.mask,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **options,
        )  # fmt: skip
    return _completions(tokenizer, prompts, ids)


def _completions(tokenizer: Any, prompts: Prompts, ids: torch.Tensor) -> Completions:
    width = prompts.ids.shape[1]
    generated = ids[:, width:]
    ended = generated == tokenizer.eos_token_id
    # A token counts until (and including) the first end token, and not in the padding that
    # follows a completion stopped by a stop string (when padding is not the end token).
    before_end = (ended.long().cumsum(dim=1) - ended.long()) == 0
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        padding = (generated == tokenizer.pad_token_id).long().flip(1).cumprod(1).flip(1)
        before_end &= padding == 0
    completion = torch.zeros_like(ids, dtype=torch.bool)
    completion[:, width:] = before_end
    mask = torch.cat([prompts.mask, before_end.long()], dim=1)
    texts = [
        tokenizer.decode(row[keep], skip_special_tokens=True)
        for row, keep in zip(generated, before_end, strict=True)
    ]
    return Completions(ids, mask, completion, texts)


def log_probs(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(log p, counted)``, both ``[N, T - 1]``: each labelled next token's log-probability
    (under the distribution sampled at ``temperature``, as 2.58 scores its samples).

    Positions follow the attention mask, so a left-padded prompt is read exactly as it was
    during generation.
    """
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return objectives.token_log_probs(logits, labels, temperature)


def labelled_log_probs(model: Any, batch: Sequences, temperature: float = 1.0) -> torch.Tensor:
    """Each labelled next token's log-probability in ``batch`` (``[N, T - 1]``, 0 where none
    is labelled), at ``temperature``."""
    return log_probs(model, batch.ids, batch.mask, batch.labels, temperature)[0]


def log_probs_and_states(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(log p, counted, hidden)``: as :func:`log_probs`, and the last hidden state ``[N,
    T - 1, H]`` of the position each labelled token is chosen in."""
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                output_hidden_states=True)  # fmt: skip
    current, counted = objectives.token_log_probs(out.logits, labels, temperature)
    return current, counted, out.hidden_states[-1][:, :-1]
