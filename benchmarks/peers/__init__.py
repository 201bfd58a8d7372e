"""The peers the side-by-side benchmarks run planexec against: LangGraph graphs built the way
LangGraph's own documentation builds them, with a scripted chat model in place of the LLM.

Needs the ``bench`` extra: ``pip install -e '.[bench]'``.
"""
