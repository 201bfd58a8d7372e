"""The side-by-side workloads (W1–W6): planexec, the LangGraph peers and a plain asyncio floor,
each measured by a function that returns its figures; ``benchmarks.compare`` runs them."""
