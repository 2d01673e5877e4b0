"""Stage 1, data: the training corpus, SentEval and BEIR (downloaded or used in place, verified),
their task files, and CompCSE's clause-level spans and subsampled corpora. Imports no torch."""
