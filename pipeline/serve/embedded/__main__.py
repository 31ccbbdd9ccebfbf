"""Entry point of the embedded server child process: `python -m specq.pipeline.serve.embedded MODEL ...`.
Started and supervised by `EmbeddedEngine` (never through a shell). API keys, when any, arrive in the
environment variable SPECQ_EMBEDDED_API_KEYS (comma-separated), never on the command line."""

from __future__ import annotations

import argparse
import os
import sys

from ...errors import SpecqError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m specq.pipeline.serve.embedded")
    p.add_argument("model")
    p.add_argument("--draft-model")
    p.add_argument("--draft-tokens", type=int, default=0)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"])
    p.add_argument("--max-queue", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--trust-remote-code", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvicorn

        from .app import build_app
        from .generator import Generator
        from .metrics import EngineMetrics

        if args.threads > 0:
            import torch

            torch.set_num_threads(args.threads)
        draft_tokens = args.draft_tokens if args.draft_model else 0
        metrics = EngineMetrics(args.served_model_name, draft_tokens=draft_tokens)
        generator = Generator(
            args.model,
            draft_model_path=args.draft_model,
            draft_tokens=draft_tokens,
            device=args.device,
            dtype=args.dtype,
            trust_remote_code=args.trust_remote_code,
            metrics=metrics,
        )
        keys = [k for k in os.environ.get("SPECQ_EMBEDDED_API_KEYS", "").split(",") if k]
        app = build_app(
            generator,
            metrics,
            args.served_model_name,
            max_queue=args.max_queue,
            default_max_tokens=args.max_new_tokens,
            api_keys=keys or None,
        )
        print(
            f"specq-embedded: loaded {args.model} on {generator.device}"
            + (f" with draft {args.draft_model} (K={draft_tokens})" if draft_tokens else ""),
            file=sys.stderr,
            flush=True,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
        return 0
    except SpecqError as e:
        print(f"specq-embedded: error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
