"""What the inference engines accept, below every stage: LMDeploy 0.18's TurboMind (`turbomind.py`) and
PyTorch engine (`pytorch.py`), specq's embedded transformers engine (`embedded.py`), the tensor layouts they
read (`layout.py`), the draft/target rules of speculative decoding and the draft-token range
(`speculation.py`), and the verdict type they all return (`verdict.py`). Pure rules read from config.json,
tokenizer files and safetensors headers (no torch at import); `convert`, `quantize`, `serve` and `toy` ask
them, so each rule is written once.

"Engine" means one thing per name: `EngineName` is the engine that loads the weights (turbomind | pytorch |
embedded); `ServerName` is the server specq starts (`--engine` / `engine.engine`: lmdeploy | embedded,
`serve/registry.py`); `serve.engine.Engine` is the handle on that running server."""

from typing import Literal

EngineName = Literal["turbomind", "pytorch", "embedded"]
ServerName = Literal["lmdeploy", "embedded"]
