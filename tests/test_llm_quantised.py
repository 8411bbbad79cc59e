"""A quantised base (``algorithm.quantization``), held to bitsandbytes' contract with
transformers: AgileRL's presets become the same ``BitsAndBytesConfig``, the model is loaded
onto the CUDA device with it (never moved after), and a run that cannot load one (off a GPU,
or without the package) stops before loading, saying how to train without it. The load itself
runs only where a GPU is (benchmarks, the device check); CI has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import torch

from agile_cli import TrainingError, UsageError
from agile_llm import model as model_module


@pytest.mark.parametrize("preset", ["nf4", "4bit", "4 bit", "BNB-4bit", "bnb_4bit"])
def test_nf4_presets_are_the_qlora_recipe(preset: str) -> None:
    config = model_module.quantization_config(preset)
    assert config.load_in_4bit and not config.load_in_8bit
    assert config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_use_double_quant
    assert config.bnb_4bit_compute_dtype == torch.bfloat16
    assert config.bnb_4bit_quant_storage == torch.bfloat16


def test_int8_none_and_settings() -> None:
    assert model_module.quantization_config("INT8").load_in_8bit
    assert model_module.quantization_config("none") is None
    assert model_module.quantization_config(None) is None
    settings = {"load_in_4bit": True, "bnb_4bit_compute_dtype": "float16"}
    config = model_module.quantization_config(settings)
    assert config.load_in_4bit and config.bnb_4bit_compute_dtype == torch.float16
    with pytest.raises(UsageError, match=r"algorithm\.quantization"):
        model_module.quantization_config({"load_in_4bit": True, "load_in_8bit": True})


def test_off_a_gpu_a_quantised_base_is_refused_before_loading(tiny: Path) -> None:
    with pytest.raises(TrainingError, match="this run is on cpu") as caught:
        model_module.load_model(str(tiny), device=torch.device("cpu"), quantization="nf4")
    assert "--set algorithm.quantization=null" in str(caught.value.hint)


def test_without_bitsandbytes_a_quantised_base_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TrainingError, match="bitsandbytes package is not installed"):
        model_module.require_bitsandbytes(torch.device("cuda"))


def test_on_a_gpu_the_base_loads_quantised_in_place(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for transformers' loader records what it is asked: the config, placed on
    the device as it loads; the loaded model is frozen and not moved."""
    from transformers import AutoModelForCausalLM

    asked: dict[str, Any] = {}

    class Loaded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(2))

        def to(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a quantised model cannot be moved")

    def from_pretrained(path: str, **options: Any) -> Any:
        asked.update(options)
        if not options.get("output_loading_info"):
            return Loaded()
        return Loaded(), {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set()}

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(model_module, "require_bitsandbytes", lambda device: None)
    cuda = torch.device("cuda", 0)
    loaded = model_module.load_model(str(tiny), device=cuda, quantization="int8")
    assert asked["quantization_config"].load_in_8bit
    assert asked["device_map"] == {"": cuda} and asked["use_safetensors"]
    assert not loaded.training and not loaded.weight.requires_grad
