"""Decoding: search, translation in batches, the engines (torch and CTranslate2), scoring and
BLEU/chrF."""
