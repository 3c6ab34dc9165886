"""The search index over people's passages: vectors and full text, one backend per database.

INTERFACE ONLY while the backends are written (wt-index replaces this file).

    index_chunks(chunks: list[Chunk], vectors: list[list[float]]) -> None
        Store each chunk's vector (RETRIEVAL_EMBEDDING_DIMENSIONS floats) and make its text
        full-text searchable. Chunks are saved rows of one document.
    remove_document(document_id: int) -> None
        Drop the document's entries (chunk rows cascade; a backend's own tables must follow).
    search(owner_id: int, document_ids: list[int], query: str, vector: list[float], k: int) -> list[Passage]
        The best k passages of those documents (all the owner's, never another's), vector and full-text
        results fused by reciprocal rank, best first.
"""
