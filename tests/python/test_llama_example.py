"""examples/llama_transformers.py as a test: a transformers Llama through flashattn matches its sdpa run."""

import importlib.util
from pathlib import Path

import pytest
import torch

import flashattn
from helpers import CUDA, backward_supported

pytest.importorskip("transformers", reason="pip install -r python/requirements-test.txt")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_transformers.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("llama_transformers", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("pad", [0, 11], ids=["dense", "padded_varlen"])
def test_llama_cpu_fp32_matches_sdpa(example, monkeypatch, pad):
    calls = {"dense": 0, "varlen": 0}
    for name, key in (("flash_attn_func", "dense"), ("flash_attn_varlen_func", "varlen")):
        original = getattr(flashattn, name)
        monkeypatch.setattr(flashattn, name, lambda *a, _f=original, _k=key, **kw: calls.__setitem__(_k, calls[_k] + 1)
                            or _f(*a, **kw))
    diffs = example.compare("cpu", torch.float32, pad=pad)
    layers = example.small_llama_config().num_hidden_layers
    assert calls == ({"dense": layers, "varlen": 0} if pad == 0 else {"dense": 0, "varlen": layers})
    assert max(diffs.values()) <= 1e-4, diffs


@pytest.mark.skipif(not CUDA, reason="bf16 Llama on CUDA needs a GPU and the CUDA backend")
def test_llama_cuda_bf16_matches_sdpa(example):
    diffs = example.compare("cuda", torch.bfloat16, backward=backward_supported("cuda"))
    assert max(diffs.values()) <= 2e-2, diffs
