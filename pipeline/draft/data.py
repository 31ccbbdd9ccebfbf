"""What a drafter learns from: texts (the calibration loader's sources, local files, or the toy corpus),
turned into token sequences — continued greedily by the target itself when self-distilling — and, per
sequence, the target's context features and its own greedy next tokens (the labels a drafter must match,
because speculative decoding accepts exactly those). Imports torch/transformers inside functions only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EnvironmentMissing, InputError, missing_package
from ..progress import Progress, null_progress

TEXT_FIELDS = ("text", "prompt", "content", "code")


@dataclass
class Texts:
    train: list[str]
    heldout: list[str]
    source: str


def _toy_corpus() -> Texts:
    from ..toy.corpus import load_corpus

    corpus = load_corpus()
    return Texts(list(corpus.train), list(corpus.heldout), "toy corpus")


def _read_local(path: Path) -> list[str]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".txt", ".py", ".md"))
        return [t for t in (p.read_text(encoding="utf-8", errors="replace") for p in files) if t.strip()]
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(_text_of(json.loads(line)))
                except json.JSONDecodeError:
                    raise InputError(f"{path}:{n}: not valid JSON") from None
        return [t for t in out if t]
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of texts or records")
        return [t for t in map(_text_of, data) if t]
    # plain text: documents separated by blank lines
    return [d.strip() for d in text.split("\n\n\n") if d.strip()] or [text]


def _text_of(record: Any) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        for f in TEXT_FIELDS:
            if isinstance(record.get(f), str):
                return str(record[f])
    raise InputError(f"record {str(record)[:60]!r} has none of the text fields {', '.join(TEXT_FIELDS)}")


def _calibration(source: str, tokenizer: Path | None) -> list[str] | None:
    """Texts through the shared calibration loader (`datasets` names and local files); None without a
    tokenizer to load with."""
    if tokenizer is None:
        return None
    from ..calibration import load_calibration

    result = load_calibration(source, tokenizer, samples=1, seqlen=64, heldout_samples=0)
    texts = [t for t in (getattr(result, "texts", None) or []) if isinstance(t, str) and t.strip()]
    return texts or None


def load_texts(source: str | None, tokenizer: Path | None = None) -> Texts:
    """Training and held-out texts. `source`: None or "toy" (the project's toy code corpus), else whatever
    the calibration loader reads (a `datasets` name or local files; `tokenizer` is the target directory it
    needs), else — without a tokenizer — a local .jsonl/.json/.txt file or a directory of text files."""
    if source in (None, "toy"):
        return _toy_corpus()
    assert source is not None
    path = Path(source).expanduser()
    texts = _calibration(source, tokenizer)
    if texts is None and path.exists():
        texts = _read_local(path)
    if texts is None:
        raise InputError(f"--data {source}: no such file or directory")
    if len(texts) < 2:
        raise InputError(f"--data {source}: needs at least 2 texts, found {len(texts)}")
    cut = max(1, len(texts) // 10)  # the last tenth is held out for the offline evaluation
    return Texts(texts[:-cut], texts[-cut:], str(source))


def read_prompts(path: Path) -> list[str]:
    if not path.exists():
        raise InputError(f"--prompts {path}: no such file")
    texts = _read_local(path)
    if not texts:
        raise InputError(f"--prompts {path}: no texts found")
    return texts


# ---------------------------------------------------------------- target side (torch)


def quantization_label(path: Path) -> str:
    """How a target's weights are stored, for the reports: 'awq 4-bit, group 128 (gptqmodel)' for a
    GPTQ/AWQ checkpoint, else its dtype ('bfloat16')."""
    from ..checkpoint import Checkpoint

    ckpt = Checkpoint(path)
    q = ckpt.quantization
    if q is None:
        return str(ckpt.torch_dtype or "unquantized")
    bits = f" {q.bits}-bit" if q.bits else ""
    group = f", group {q.group_size}" if q.group_size and q.group_size > 0 else ""
    return f"{q.method}{bits}{group}"


class Target:
    """The frozen target: tokenizer, model, its embeddings and lm_head, feature extraction, greedy runs. A
    GPTQ/AWQ checkpoint is loaded through the project's one quantized loader
    (`engines.embedded.load_quantized`, gptqmodel), so its hidden states, greedy tokens, embeddings and head
    are the 4-bit model's own: what a drafter meets when that checkpoint is served."""

    def __init__(self, path: Path, device: str, progress: Progress = null_progress):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise missing_package(e.name or "torch", "ml") from None
        from ..checkpoint import Checkpoint

        self.path = path
        self.device = torch.device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: cannot load its tokenizer ({str(e).splitlines()[0]})") from None
        dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        quant = Checkpoint(path).quantization
        self.quantization = quantization_label(path)
        try:
            if quant is not None and quant.method in ("gptq", "awq"):
                model: Any = self._load_quantized(path, quant.method)
            else:
                model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
            self.model = model.to(self.device)
        except (OSError, ValueError, ImportError, RuntimeError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise EnvironmentMissing(f"{path}: transformers cannot load this target here ({msg})") from None
        self.model.eval()
        self.model.requires_grad_(False)
        # a multimodal checkpoint (gptqmodel loads Qwen3.5 with its vision tower) keeps the LM's sizes here
        self.config: Any = getattr(self.model.config, "text_config", None) or self.model.config
        self.num_layers = int(self.config.num_hidden_layers)
        self.vocab_size = int(self.config.vocab_size)
        self.embed = self.model.get_input_embeddings()
        self.lm_head = self.model.get_output_embeddings()
        progress(
            f"target {path.name} ({self.quantization}): {self.num_layers} layers, "
            f"hidden {self.config.hidden_size}"
        )

    def _load_quantized(self, path: Path, method: str) -> Any:
        from ..engines.embedded import load_quantized
        from ..hardware import module_present

        if not module_present("gptqmodel"):
            raise EnvironmentMissing(
                f"{path}: a {method} checkpoint; loading it needs gptqmodel (pip install 'specq[quant]')"
            )
        return load_quantized(path, self.device.type)

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a conversation through the target's chat template, generation prompt added."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise InputError(f"{self.path}: the tokenizer has no chat template; evaluate on --prompts text")
        ids: Any = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def chat_frame(self) -> tuple[list[int], list[int]] | None:
        """The token ids the chat template puts before and after a user turn's text (generation prompt
        included), or None without a template. Found by rendering a marker message and splitting there."""
        if not getattr(self.tokenizer, "chat_template", None):
            return None
        marker = "\u2063SPECQ\u2063"
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False
        )
        if not isinstance(text, str) or text.count(marker) != 1:
            return None
        head, tail = text.split(marker)
        ids = [self.tokenizer(part, add_special_tokens=False)["input_ids"] for part in (head, tail)]
        return ids[0], ids[1]

    def chat_wrap(self, windows: list[list[int]], fraction: float) -> tuple[list[list[int]], int]:
        """Every 1/fraction-th window (evenly spread) framed as a chat user turn, trimmed so that every
        prompt keeps its length: served chat requests continue after the assistant header, and a drafter
        trained only on raw text never sees that context. Returns the prompts and how many were framed."""
        frame = self.chat_frame() if fraction > 0 else None
        if frame is None or not windows:
            return windows, 0
        head, tail = frame
        length = len(windows[0])
        room = length - len(head) - len(tail)
        if room < 4:
            return windows, 0
        out, framed, acc = [], 0, 0.0
        for w in windows:
            acc += fraction
            if acc >= 1.0 - 1e-9:
                acc -= 1.0
                out.append(head + w[:room] + tail)
                framed += 1
            else:
                out.append(w)
        return out, framed

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    def windows(
        self, texts: list[str], length: int, limit: int, stride: int | None = None
    ) -> list[list[int]]:
        """Up to `limit` token windows of exactly `length` tokens, taken in order from the texts."""
        out: list[list[int]] = []
        stride = stride or length
        for text in texts:  # encoded one at a time: a large corpus is only read as far as needed
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            for start in range(0, max(len(ids) - length + 1, 0), stride):
                out.append(ids[start : start + length])
                if len(out) >= limit:
                    return out
        return out

    def greedy_continue(self, prompts: list[list[int]], new_tokens: int, batch: int = 32) -> Any:
        """Prompts [N, P] (equal lengths) continued greedily by the target: a LongTensor [N, P + new]."""
        import torch

        out = []
        for i in range(0, len(prompts), batch):
            ids = torch.tensor(prompts[i : i + batch], device=self.device)
            with torch.no_grad():
                gen = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,  # a fixed length; EOS is suppressed, not the end of data
                    pad_token_id=self.tokenizer.pad_token_id or 0,
                )
            out.append(gen[:, : ids.shape[1] + new_tokens])
        return torch.cat(out)

    def features(self, tokens: Any, layer_ids: list[int], batch: int = 16) -> tuple[Any, Any]:
        """Context features [N, T, k·H] (residual stream after each layer in `layer_ids`, Hugging Face
        `hidden_states[i + 1]`) and the target's greedy next token at every position [N, T]."""
        import torch

        feats, greedy = [], []
        for i in range(0, tokens.shape[0], batch):
            ids = tokens[i : i + batch].to(self.device)
            with torch.no_grad():
                out = self.model(input_ids=ids, output_hidden_states=True)
            feats.append(torch.cat([out.hidden_states[j + 1] for j in layer_ids], dim=-1).float().cpu())
            greedy.append(out.logits.argmax(-1).cpu())
        return torch.cat(feats), torch.cat(greedy)


def pick_mask_token_id(tokens: Any, vocab_size: int, tokenizer: Any) -> int:
    """A valid id that never occurs in the data: the highest unused id, preferring ids the tokenizer does
    not produce for text (padding rows of the embedding)."""
    import torch

    used = set(torch.unique(tokens).tolist())
    for special in (tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id):
        if special is not None:
            used.add(int(special))
    for cand in range(vocab_size - 1, -1, -1):
        if cand not in used:
            return cand
    raise InputError("every token id occurs in the data; cannot choose a mask token")
