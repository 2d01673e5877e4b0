"""Stage 3, evaluation: STS, transfer tasks, retrieval and alignment/uniformity, each reading
embeddings through one encode-unique helper and the embedding cache (:mod:`.encoding`)."""
