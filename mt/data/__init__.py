"""Data: reading corpora, the prepare pipeline, the token store, tokenizers and the batches
training consumes."""
