"""The real small model (`specq toy fetch smollm2`), when the cache holds it: the cached files match their
checksums, transformers loads a 30-layer Llama with tied embeddings, and it models English prose far better
than chance. Skipped when it was never fetched: CI has no copy and never downloads one."""

from __future__ import annotations

import math

import pytest

from specq.pipeline.toy import smollm2

PROSE = (
    "The committee met on Tuesday morning to discuss the budget for the coming year. After a long debate, "
    "the members agreed to increase funding for the public library and to delay the repairs to the old "
    "bridge until the spring, when the weather would be better suited to the work."
)


@pytest.fixture(scope="module")
def smollm2_dir():
    d = smollm2.locate()
    if d is None:
        pytest.skip(
            "smollm2 is not in the specq cache (run `specq toy fetch smollm2`; tests never download it)"
        )
    return d


def test_cached_checkpoint_matches_its_checksums(smollm2_dir) -> None:
    report = smollm2.verify(smollm2_dir)
    assert report.gguf_sha256 == smollm2.GGUF_SHA256
    assert "Q4_1" in report.provenance
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(report.files)


def test_loads_as_llama_and_models_prose(smollm2_dir) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 and model.config.tie_word_embeddings
    ids = torch.tensor([tok(PROSE)["input_ids"]])
    with torch.inference_mode():
        loss = model(input_ids=ids, labels=ids).loss.item()
        shuffled = ids[:, torch.randperm(ids.shape[1], generator=torch.Generator().manual_seed(0))]
        loss_shuffled = model(input_ids=shuffled, labels=shuffled).loss.item()
    # chance is ln(49152) = 10.8 nats; the same tokens in a random order must cost far more than in order
    assert math.exp(loss) < 60
    assert loss_shuffled > loss + 2
