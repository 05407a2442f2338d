"""The memory service's search engine: how a memory becomes points in the vector index, and how a
recall finds and ranks them. The application uses it (saves, projection, replay, purge, recall);
it never uses the application.

=========================  =====================================================================
``recall.py``              the ranking pipeline: hybrid search, keyword feedback, late
                           interaction, rerank
``indexing.py``            a memory as a point: sentences, weights, dense and keyword vectors,
                           filters, the view a hit carries, rerank fusion
``late.py``                late interaction: token vectors, their packing, MaxSim
``embedding.py``           batch priming of the embedder and the late encoder (LRU)
``vector_cache.py``        the embedding cache: what a model made of a text, kept across replays
``index_sync.py``          a point's fingerprint: which points a replay may leave as they are
``encoders.py``            the encoders the service runs, bundled (embedder, late encoder,
                           reranker, cache), and what a memory is indexed with
``ports.py``               what the engine needs from adapters (vector index, models, cache
                           storage) and from the read model (``RecallReads``)
=========================  =====================================================================

The pure keyword rules (terms, stemming, BM25 weights, query expansion) are domain code:
:mod:`services.memory.domain.keywords`.
"""
