"""Building and optimising networks without loading torch's compiler stack.

Two conveniences of torch pull in its compiler's machinery on first use, before training takes
its first step, though eager training never compiles anything (measured on the project's
2-core CPU, torch 2.13; ``benchmarks/first_step.py``):

- ``torch.nn.utils.skip_init`` builds a layer on the meta device, whose first use imports
  torch's meta registrations and sympy: 0.4 s. :func:`uninitialised` builds the layer with
  its parameters allocated and not drawn, on the CPU.
- ``torch.optim.Optimizer``'s ``__init__`` helpers, ``state_dict``, ``load_state_dict`` and
  ``zero_grad`` are wrapped to be skipped by ``torch.compile``; the wrapper imports
  ``torch._dynamo`` on its first call to build the skipping version: 0.9 s.
  :func:`eager_optimizers` hands those wrappers the plain method instead, which is what the
  skipping version runs outside a compiled region.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, TypeVar

import torch
from torch import nn

_Module = TypeVar("_Module", bound=nn.Module)


#: The subclass :func:`_skipping_init` made of each layer class.
_SKIPPING_INIT: dict[type[nn.Module], type[nn.Module]] = {}


def _skipping_init(cls: type[nn.Module]) -> type[nn.Module]:
    """A subclass of ``cls`` whose ``reset_parameters`` does nothing (made once per class)."""
    skipping = _SKIPPING_INIT.get(cls)
    if skipping is None:
        skipping = type(cls.__name__, (cls,), {"reset_parameters": lambda self: None})
        _SKIPPING_INIT[cls] = skipping
    return skipping


def uninitialised(cls: type[_Module], *args: Any, **kwargs: Any) -> _Module:
    """``cls(*args, **kwargs)`` (a layer with a ``reset_parameters``, e.g. ``nn.Linear``,
    ``nn.Conv2d``, ``nn.LSTM``) with its parameters allocated but not initialised: building it
    draws nothing from torch's global generator; the caller initialises them."""
    module = _skipping_init(cls)(*args, **kwargs)
    module.__class__ = cls
    assert isinstance(module, cls)
    return module


@functools.cache
def eager_optimizers() -> None:
    """Let ``torch.optim``'s compiler-skipping wrappers call their method directly instead of
    importing ``torch._dynamo`` to build a skipping version (0.9 s of start-up). Outside
    ``torch.compile`` the two are the same call. Done once, and only while ``torch._dynamo``
    is not loaded: a process that has loaded it (it may compile) keeps torch's own behaviour."""
    if "torch._dynamo" in sys.modules:
        return
    try:
        from torch._compile import _disable_dynamo
    except ImportError:  # a torch without this wrapper: nothing to do
        return
    wrapper_code = _disable_dynamo(lambda: None).__code__
    for method in vars(torch.optim.Optimizer).values():
        plain = getattr(method, "__wrapped__", None)
        if getattr(method, "__code__", None) is wrapper_code and plain is not None:
            plain.__dynamo_disable = plain
