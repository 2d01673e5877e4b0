"""Snakemake script of every sharing rule (mteb_results, mteb_check, model_card, export_onnx,
export_model, push, push_sweep): the job cselab.pipeline.jobs.export.export; all logic lives in the library."""
import cselab_path  # noqa: F401  (repository root on sys.path)
from cselab.pipeline.jobs import main
from cselab.pipeline.jobs.export import export

main(snakemake, export)  # noqa: F821 (injected by Snakemake)
