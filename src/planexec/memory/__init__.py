"""Plan memory: plans of successful runs, remembered and offered again for goals like theirs."""

from planexec.memory._embed import DenseVector, Embedder, LexicalEmbedder, SparseVector, Vector, goal_words

__all__ = ["DenseVector", "Embedder", "LexicalEmbedder", "SparseVector", "Vector", "goal_words"]
