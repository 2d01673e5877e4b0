"""cselab: a reproducible experiment pipeline for contrastive sentence-embedding research."""

__version__ = "0.1.0"
