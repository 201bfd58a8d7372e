"""Plan memory: plans of successful runs, remembered and offered again for goals like theirs.

    memory = PlanMemory(store)            # entries beside the run logs
    agent = Agent(planner, tools=..., store=store, memory=memory)

See :class:`PlanMemory` for how a plan is reused (directly, or as the planner's example) and
:class:`Embedder` for how goals are compared.
"""

from planexec.memory._embed import DenseVector, Embedder, LexicalEmbedder, SparseVector, Vector, goal_words
from planexec.memory._entry import MemoryEntry, Recall, ReuseMode
from planexec.memory._memory import PlanMemory
from planexec.memory._provider import OpenAIEmbedder
from planexec.memory._rebind import render_answer
from planexec.memory._sentence import SentenceEmbedder

__all__ = [
    "DenseVector",
    "Embedder",
    "LexicalEmbedder",
    "MemoryEntry",
    "OpenAIEmbedder",
    "PlanMemory",
    "Recall",
    "ReuseMode",
    "SentenceEmbedder",
    "SparseVector",
    "Vector",
    "goal_words",
    "render_answer",
]
