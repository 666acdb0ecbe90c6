"""Chunk planning: where a pool's registration chunks start and end (``chunking``), drawn as
SVG (``svg``). Both targets' references plan with it."""
