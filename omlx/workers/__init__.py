"""Non-text models, one thread each: embeddings, rerankers, vision-language and OCR models."""
