# Data: the training corpus and the SentEval tree, downloaded from the real URLs or taken
# from local copies (data_dir / data.*.path), verified, with a manifest of sha256 and counts.


rule prepare_corpus:
    output:
        corpus="resources/corpus/corpus.txt",
        manifest="resources/corpus/manifest.json",
    params:
        source=CFG["data"]["corpus"],
        download_dir="resources/downloads",
    log:
        "logs/prepare_corpus.log",
    benchmark:
        "benchmarks/prepare_corpus.tsv"
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/cselab.yaml"
    script:
        "../workflow_scripts/prepare_corpus.py"


rule prepare_senteval:
    output:
        manifest="resources/senteval/manifest.json",
    params:
        source=CFG["data"]["senteval"],
        tasks=["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"],
        extract_dir="resources/senteval/tree",
        download_dir="resources/downloads",
    log:
        "logs/prepare_senteval.log",
    benchmark:
        "benchmarks/prepare_senteval.tsv"
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        "../envs/cselab.yaml"
    script:
        "../workflow_scripts/prepare_senteval.py"


rule resolve_plm:
    output:
        "resources/plms/{plm}.json",
    params:
        model=lambda wc: CFG["plms"][wc.plm]["model"],
    log:
        "logs/resolve_plm/{plm}.log",
    benchmark:
        "benchmarks/resolve_plm/{plm}.tsv"
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/cselab.yaml"
    script:
        "../workflow_scripts/resolve_plm.py"
