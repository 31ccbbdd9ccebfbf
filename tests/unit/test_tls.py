"""specq's HTTP clients share one TLS context a process, verifying certificates as httpx's default does."""

from __future__ import annotations

import ssl

from specq.pipeline.tls import tls


def test_one_context_a_process_that_verifies_certificates_and_hostnames() -> None:
    ctx = tls()
    assert tls() is ctx  # built once: a client made with verify=True would load the CA bundle again
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded
