"""Stage 4, reporting: the papers' tables (ours beside the published numbers), figures and the
statistics behind them (seed summaries, paired bootstrap)."""
