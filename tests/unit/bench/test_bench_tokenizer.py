"""The tokenizer recount with a real Hugging Face fast tokenizer (trained here, no download): every token
of the re-tokenized output lands in the chunk holding its last character."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(inspect.getsource(inspect).splitlines()[:600], trainer)
    out = tmp_path_factory.mktemp("tok")
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(out)
    return out


def test_counts_per_chunk_cover_the_whole_output(tokenizer_dir):
    from specq.pipeline.bench.client import load_token_counter

    counter, why = load_token_counter(str(tokenizer_dir))
    assert counter is not None, why
    text = "def signature(obj):\n    return Signature.from_callable(obj)\n"
    chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
    counts = counter.counts_per_chunk(chunks)
    assert sum(counts) == len(counter.encode(text)) and len(counts) == len(chunks)
    # a chunk boundary inside a token: the token belongs to the chunk where it ends
    whole = counter.counts_per_chunk([text])
    assert whole == [len(counter.encode(text))]
    assert counter.counts_per_chunk(["", text, ""]) == [0, whole[0], 0]


def test_missing_tokenizer_is_not_fatal(tmp_path):
    from specq.pipeline.bench.client import load_token_counter

    counter, why = load_token_counter(str(tmp_path))
    assert counter is None and "did not load" in (why or "")
    assert load_token_counter(None) == (None, "no local tokenizer given")
