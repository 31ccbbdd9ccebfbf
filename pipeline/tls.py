"""One TLS context a process for specq's HTTP clients."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls() -> ssl.SSLContext:
    """httpx's default certificate verification (its CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR), built once a
    process. A client made with the default `verify=True` loads the bundle again, 25-60 ms of CPU, and bench
    makes one for every /metrics scrape, liveness probe and run."""
    import httpx

    return httpx.create_ssl_context()
