"""``training``: the settings of a training run (the loop's and the methods'), their defaults
the paper config's. Overridden per PLM, method, experiment and pretraining stage
(``Overrides(Training)``: the schema's ``$defs/training``)."""

from typing import ClassVar, Literal

from cselab.settings.base import DEFS, setting, settings

POSITIVE = {"minimum": 1}

#: the settings that change how a job runs (speed, memory, logging, processes), never its numbers:
#: left out of a job's spec, so changing one never reruns it (:mod:`cselab.pipeline.experiments`)
OPERATIONAL = ("checkpoint_steps", "compile", "pad_to_multiple_of", "devices", "nodes", "dist_timeout_s",
               "owner_wait_s", "log_steps", "dev_batch_size", "chunk_size", "chunk_tokens", "collapse", "peak_tflops")


@settings
class Collapse:
    """The collapse alarm's thresholds."""

    #: given, both are given: an override (``experiments.<e>.training.collapse``) replaces the whole object
    ALL_KEYS: ClassVar[bool] = True

    min_effective_rank: float | None = setting(2.0, minimum=0,
                                               doc="effective rank of the STS-B dev embeddings' covariance below which "
                                                   "an evaluation alarms (null: off)")
    max_uniformity: float | None = setting(-0.1, maximum=0,
                                           doc="uniformity of the STS-B dev embeddings above which an evaluation "
                                               "alarms (0: all identical; null: off)")


@settings
class Training:
    batch_size: int = setting(64, **POSITIVE, doc="global batch of sentences per optimizer step")
    max_len: int = setting(32, minimum=4, doc="training sentences are truncated to this many tokens")
    epochs: int = setting(1, **POSITIVE)
    max_steps: int | None = setting(None, **POSITIVE,
                                    doc="stop after this many optimizer steps, the schedule shortened (null: full "
                                        "epochs)")
    stop_at: int | None = setting(None, **POSITIVE,
                                  doc="stop after this many steps without shortening the learning-rate schedule "
                                      "(unlike max_steps): the first steps of a full run")
    checkpoint_steps: int = setting(500, minimum=0,
                                    doc="save a resumable training state every N steps under "
                                        "results/experiments/<id>/resume (0: off)")
    lr: float = setting(3.0e-5, exclusiveMinimum=0, maximum=1, doc="peak learning rate")
    weight_decay: float = setting(0.0, minimum=0,
                                  doc="AdamW's decoupled weight decay, not applied to biases and LayerNorm weights "
                                      "(the HF Trainer's rule)")
    max_grad_norm: float | None = setting(1.0, exclusiveMinimum=0, doc="gradient clipping (null: off)")
    warmup_steps: int = setting(0, minimum=0,
                                doc="linear warm-up from lr 0 over this many steps (the HF Trainer's schedule); a "
                                    "positive value wins over warmup_ratio")
    warmup_ratio: float = setting(0.0, minimum=0, maximum=1,
                                  doc="warm-up over this share of the schedule's steps, rounded up (Condenser's 0.1 "
                                      "for InfoCSE's stage 1)")
    temperature: float = setting(0.05, exclusiveMinimum=0, doc="the contrastive loss's temperature")
    pooler: Literal["cls", "avg"] = setting("cls", doc="sentence embedding while training: final-layer [CLS] or the "
                                                       "mean of the tokens (training heads: the methods')")
    dropout: float = setting(0.1, minimum=0, maximum=1, doc="the encoder's dropout (the two views' only difference "
                                                            "in SimCSE)")
    eval_steps: int | None = setting(125, **POSITIVE,
                                     doc="score STS-B dev every N steps and keep the best checkpoint (null: never; a "
                                         "pretraining stage is not scored)")
    log_steps: int = setting(10, **POSITIVE, doc="log the losses every N steps; operational")
    dev_batch_size: int = setting(128, **POSITIVE, doc="batch of the STS-B dev scoring; operational")
    precision: Literal["fp32", "bf16", "fp16"] = setting(
        "fp16", doc="numerics of the training step: fp16 autocast with a gradient scaler (the references of SimCSE, "
                    "CompCSE, DiffCSE and InfoCSE), fp32 (the gradient paradigm's scripts), or bf16 autocast; part of "
                    "the experiment")
    subsampling: Literal["none", "adjacent", "overlapping", "subsuming"] = setting(
        "none", doc="CompCSE Table 2: expand the training set with sub-spans of each sentence's clause units "
                    "(cselab/data/subsample.py)")
    eval_at_end: bool = setting(False, doc="also score STS-B dev at the last step (the references' trainer scores "
                                           "multiples of eval_steps only)")
    holdout: float | None = setting(None, exclusiveMinimum=0, exclusiveMaximum=1,
                                    doc="train on all but this fraction of the corpus (a seeded split; the gradient "
                                        "paradigm's held-out statistics read the rest)")
    unpadded: bool = setting(True, doc="run the pooled forward of BERT-style encoders over real tokens only, and with "
                                       "cls pooling the last layer for [CLS] only (the same math as the padded "
                                       "forward; dropout masks drawn over real tokens, a different random stream, so "
                                       "this is part of the experiment); false: Hugging Face's padded forward")
    compile: Literal[False, True, "auto", "default", "reduce-overhead", "max-autotune"] = setting(
        "auto", doc="run the step through torch.compile while training (true = mode default; reduce-overhead adds "
                    "CUDA graphs; auto = reduce-overhead on one CUDA device, else eager; with gradient caching "
                    "each chunk is compiled in one fixed shape); "
                    "sequence lengths padded to multiples of 8; the compiled forward is the padded one (see "
                    "unpadded); operational: changes speed, not results, and retrains nothing")
    pad_to_multiple_of: int | None = setting(None, **POSITIVE,
                                             doc="pad training batches to a multiple of this length (null: 8 with "
                                                 "compile, else 1); operational")
    accumulation_steps: int = setting(1, **POSITIVE,
                                      doc="split each step's global batch into this many micro-batches run one after "
                                          "the other, gradients summed (for a global batch the devices cannot hold at "
                                          "once); each micro-batch has its own in-batch negatives, so this is part of "
                                          "the experiment")
    devices: int = setting(1, **POSITIVE,
                           doc="processes (GPUs) per node for one training job: torchrun workers, "
                               "DistributedDataParallel, in-batch negatives gathered from all of them; the global "
                               "batch_size is split across them (at least 2 sentences a process and micro-batch, "
                               "checked when the config is read); operational: changes no experiment id and "
                               "retrains nothing (the rule asks SLURM for devices x nodes GPUs)")
    nodes: int = setting(1, **POSITIVE, doc="nodes for one training job (inside a SLURM allocation: srun starts one "
                                            "torchrun agent per node); operational")
    batchnorm_stats: Literal["global", "per_process"] = setting(
        "global", doc="BatchNorm heads of a multi-process job: global normalises over the global batch on every "
                      "backend (the single-process math the references ran), per_process over each process's shard "
                      "(DDP's default); part of the experiment of methods with a BatchNorm head")
    dist_timeout_s: float = setting(1800, exclusiveMinimum=0,
                                    doc="collective timeout of a multi-process job: a process that waits this long "
                                        "for the others fails the job; operational")
    owner_wait_s: float = setting(60, minimum=0,
                                  doc="a training job whose experiment folder another live job holds "
                                      "(cselab/pipeline/locks.py) waits this many seconds, then fails naming the "
                                      "holder (host, pid, since); operational")
    keyed_dropout: bool = setting(True, doc="dropout masks keyed by row (each sentence's masks depend on the step's "
                                            "seed, its view and its place in the global batch, not on the rows beside "
                                            "it: cselab/models/keyed.py), so chunk_size and the number of processes "
                                            "change no mask; false: torch's own stream (no chunk_size); part of the "
                                            "experiment")
    chunk_size: int | Literal["auto"] | None = setting(
        "auto", schema={"anyOf": [{"type": "integer", "minimum": 1}, {"enum": ["auto", None]}]},
        doc="how a batch runs in the device's memory (docs/speed.md): auto = whole where the step fits the device "
            "(always on the CPU), else in the largest chunks that fit, estimated from the model, the batch's tokens "
            "and the device's free memory (cselab/training/memory.py), an out-of-memory step halving them and "
            "running again; an integer: gradient caching (Gao et al., 2021), networks run over at most this many "
            "rows at a time, twice (without and with a graph), the loss on the whole batch: the full-batch step "
            "with the activation memory of one chunk (cselab/training/chunks.py); an objective whose loss is a sum "
            "over sentences (InfoCSE's stage 1) runs accumulated micro-batches of that many sentences instead; "
            "null: the batch whole; operational (chunks need keyed_dropout)")
    chunk_tokens: int | None = setting(None, **POSITIVE,
                                       doc="gradient caching by a token budget (sentence-transformers' "
                                           "mini_batch_num_tokens): a chunk holds as many rows as fit this many "
                                           "tokens at the batch's padded length (a compiled step's: max_len), "
                                           "instead of chunk_size rows; at least max_len (a chunk holds a "
                                           "sentence); null: chunk_size decides; operational (needs keyed_dropout)")
    collapse: Collapse = setting(Collapse,
                                 doc="the collapse alarm (cselab/training/diagnostics.py): a dev evaluation whose "
                                     "effective rank is below min_effective_rank or whose uniformity is above "
                                     "max_uniformity logs a warning, tags the MLflow run and is named in the tables' "
                                     "notes; null: that check off; operational")
    peak_tflops: float | None = setting(None, exclusiveMinimum=0,
                                        doc="the device's peak TFLOP/s for the MFU diagnostic (null: the dense 16-bit "
                                            "peak of a known CUDA device; none on the CPU); operational")


DEFS["training"] = Training
