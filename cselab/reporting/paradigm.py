"""The gradient paradigm's analysis figures (Li, Zhang, Nie, 2024, §3): simulated gradient terms
(Figures 2-4, no training), a component sweep (Figure 6) and statistics of trained models on a
held-out slice of the corpus (Figures 5, 7, 8).

Simulation (its §3.1): a batch is 1 positive angle ``~ N(mu_pos, 0.05)`` and 127 negative
angles ``~ N(mu_neg, 0.10)`` around an anchor; every term is averaged over 1,000 batches per
point. The negatives enter each term only through ``sum_j exp(cos theta_j / tau)`` and
``max_j cos theta_j``, which are drawn once per ``mu_neg`` and shared by every ``mu_pos``, so a
100 x 100 grid takes about a second.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cselab.reporting.figures import _save

N_NEGATIVES = 127
SIGMA_POS, SIGMA_NEG = 0.05, 0.10
TAU = 0.05
ARCCON_MARGIN = math.radians(10.0)
MPT_MARGIN, MET_MARGIN = 0.23, 0.45
GD_LOSSES = ("infonce", "arccon", "mpt", "met")
WEIGHT_TEMPERATURES = (0.3, 0.1, 0.05, 0.03, 0.01, 0.005)


def _negatives(mu_neg: np.ndarray, n_batches: int, rng: np.random.Generator, taus: Sequence[float]):
    """Per (mu_neg, batch): ``logsumexp_j cos theta_j / tau`` for each tau, and ``max_j cos theta_j``."""
    lse, best = {tau: np.empty((len(mu_neg), n_batches)) for tau in taus}, np.empty((len(mu_neg), n_batches))
    for k, mu in enumerate(mu_neg):
        cos = np.cos(rng.normal(mu, SIGMA_NEG, size=(n_batches, N_NEGATIVES)))
        best[k] = cos.max(axis=1)
        for tau in taus:
            z = cos / tau
            top = z.max(axis=1)
            lse[tau][k] = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return lse, best


def _gd(loss: str, cos_pos: np.ndarray, lse: np.ndarray, best: np.ndarray, tau: float = TAU) -> np.ndarray:
    """The gradient-dissipation term of ``loss`` (its Table 1): the fraction ``1 - p(positive)``
    for InfoNCE and ArcCon (ArcCon with the margin on the positive angle), an indicator for MPT
    and MET. Shapes broadcast: ``cos_pos`` [P, 1, B], ``lse``/``best`` [1, Q, B]."""
    if loss in ("infonce", "arccon"):
        pos = cos_pos if loss == "infonce" else np.cos(np.arccos(np.clip(cos_pos, -1, 1)) + ARCCON_MARGIN)
        return 1.0 / (1.0 + np.exp(pos / tau - lse))
    if loss == "mpt":
        return (cos_pos - best < MPT_MARGIN).astype(float)
    if loss == "met":
        d_pos, d_neg = np.sqrt(2 - 2 * cos_pos + 1e-8), np.sqrt(2 - 2 * best + 1e-8)
        return (d_neg - d_pos < MET_MARGIN).astype(float)
    raise ValueError(f"no gradient-dissipation term for {loss!r}; choose from {GD_LOSSES}")


def simulate_gd(losses: Sequence[str] = GD_LOSSES, points: int = 100, n_batches: int = 1000,
                seed: int = 0) -> pd.DataFrame:
    """Figure 2: mean GD over ``mu_pos`` in [0.05 pi, 0.5 pi] x ``mu_neg`` in [0.05 pi, pi]."""
    rng = np.random.default_rng(seed)
    mu_pos, mu_neg = np.linspace(0.05, 0.5, points) * np.pi, np.linspace(0.05, 1.0, points) * np.pi
    lse, best = _negatives(mu_neg, n_batches, rng, [TAU])
    cos_pos = np.cos(rng.normal(mu_pos[:, None], SIGMA_POS, size=(points, n_batches)))[:, None, :]
    rows = []
    for loss in losses:
        gd = _gd(loss, cos_pos, lse[TAU][None], best[None]).mean(axis=2)  # [P, Q]
        p, q = np.meshgrid(mu_pos, mu_neg, indexing="ij")
        rows.append(pd.DataFrame({"loss": loss, "mu_pos_pi": (p / np.pi).ravel(), "mu_neg_pi": (q / np.pi).ravel(),
                                  "gd": gd.ravel()}))
    return pd.concat(rows, ignore_index=True)


def simulate_weight(temperatures: Sequence[float] = WEIGHT_TEMPERATURES, points: int = 100, n_batches: int = 1000,
                    mu_pos: float = 0.5, seed: int = 0, gd_threshold: float = 1e-2) -> pd.DataFrame:
    """Figure 3: the hardest negative's share ``max_j W_ij`` of the softmax weights, averaged over
    the batches whose InfoNCE GD at the same temperature is at least ``gd_threshold`` (1 when
    none is), against ``mu_neg`` in [pi/20, pi]; the positive angle ``~ N(mu_pos, 0.05)`` (radians)."""
    rng = np.random.default_rng(seed)
    mu_neg = np.linspace(np.pi / 20, np.pi, points)
    lse, best = _negatives(mu_neg, n_batches, rng, temperatures)
    cos_pos = np.cos(rng.normal(mu_pos, SIGMA_POS, size=n_batches))[None, :]
    rows = []
    for tau in temperatures:
        share = np.exp(best / tau - lse[tau])
        keep = _gd("infonce", cos_pos, lse[tau], best, tau) >= gd_threshold
        counts = keep.sum(axis=1)
        mean = np.where(counts > 0, (share * keep).sum(axis=1) / np.maximum(counts, 1), 1.0)
        rows.append(pd.DataFrame({"tau": tau, "mu_neg_pi": mu_neg / np.pi, "hardest_share": mean}))
    return pd.concat(rows, ignore_index=True)


def ratio_grid(points: int = 100) -> pd.DataFrame:
    """Figure 4: the dynamic ratio of ArcCon (``sin(theta_ii + u) / sin theta_ii``) and MET
    (``d_neg / d_pos``) over ``theta_ii`` in [0.05 pi, 0.5 pi] x ``theta_ij`` in [0.05 pi, pi];
    ``masked`` where the negative is closer than the positive or the loss's GD is about 0
    (ArcCon: GD < 0.01 with all 127 negatives at ``theta_ij``; MET: ``d_neg - d_pos >= 0.45``)."""
    pos, neg = np.meshgrid(np.linspace(0.05, 0.5, points) * np.pi, np.linspace(0.05, 1.0, points) * np.pi,
                           indexing="ij")
    d_pos, d_neg = np.sqrt(2 - 2 * np.cos(pos) + 1e-8), np.sqrt(2 - 2 * np.cos(neg) + 1e-8)
    lse = np.cos(neg) / TAU + np.log(N_NEGATIVES)
    arccon_gd = _gd("arccon", np.cos(pos), lse, np.cos(neg))
    frames = []
    for loss, ratio, dead in (("arccon", np.sin(pos + ARCCON_MARGIN) / np.sin(pos), arccon_gd < 1e-2),
                              ("met", d_neg / d_pos, d_neg - d_pos >= MET_MARGIN)):
        frames.append(pd.DataFrame({"loss": loss, "theta_pos_pi": (pos / np.pi).ravel(),
                                    "theta_neg_pi": (neg / np.pi).ravel(), "ratio": ratio.ravel(),
                                    "masked": ((pos > neg) | dead).ravel()}))
    return pd.concat(frames, ignore_index=True)


def _heatmaps(df: pd.DataFrame, panels: Sequence[str], x: str, y: str, value: str, title: str | None,
              vmin: float, vmax: float, cmap: str, mask: str | None = None) -> Figure:
    fig = Figure(figsize=(4.2 * len(panels), 3.6))
    for k, name in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        sub = df[df["loss"] == name]
        grid = sub.pivot(index=y, columns=x, values=value)
        mesh = ax.pcolormesh(grid.columns, grid.index, grid.to_numpy(), vmin=vmin, vmax=vmax, cmap=cmap,
                             shading="auto")
        if mask:
            shade = sub.pivot(index=y, columns=x, values=mask).to_numpy().astype(float)
            ax.pcolormesh(grid.columns, grid.index, np.where(shade > 0, 1.0, np.nan), cmap="Greys", vmin=0,
                          vmax=1.6, alpha=0.6, shading="auto")
        ax.set_title(name)
        ax.set_xlabel(f"{x.replace('_pi', '')} (x pi)")
        ax.set_ylabel(f"{y.replace('_pi', '')} (x pi)")
        fig.colorbar(mesh, ax=ax)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def figure_gd(out_png, out_csv, title=None, losses: Sequence[str] = GD_LOSSES, points: int = 100,
              n_batches: int = 1000, seed: int = 0) -> pd.DataFrame:
    df = simulate_gd(losses, points, n_batches, seed)
    fig = _heatmaps(df, losses, "mu_neg_pi", "mu_pos_pi", "gd", title, 0.0, 1.0, "viridis")
    return _save(fig, df, out_png, out_csv)


def figure_weight(out_png, out_csv, title=None, temperatures: Sequence[float] = WEIGHT_TEMPERATURES,
                  points: int = 100, n_batches: int = 1000, seed: int = 0) -> pd.DataFrame:
    df = simulate_weight(temperatures, points, n_batches, seed=seed)
    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    for tau, rows in df.groupby("tau", sort=False):
        ax.plot(rows["mu_neg_pi"], rows["hardest_share"], label=f"tau = {tau:g}")
    ax.set_xlabel("mu_neg (x pi)")
    ax.set_ylabel("share of the hardest negative in W")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, df, out_png, out_csv)


def figure_ratio(out_png, out_csv, title=None, points: int = 100) -> pd.DataFrame:
    df = ratio_grid(points)
    return _save(_heatmaps(df, ["arccon", "met"], "theta_neg_pi", "theta_pos_pi", "ratio", title, 0.0, 5.0, "tab20c",
                           mask="masked"), df, out_png, out_csv)


def figure_sweep(results: Mapping[float, float], parameter: str, out_png, out_csv, title=None) -> pd.DataFrame:
    """Figure 6: STS-B dev Spearman against one component's value (``results``: value -> score)."""
    df = pd.DataFrame({parameter: list(results), "stsb_dev_spearman": list(results.values())}).sort_values(parameter)
    fig = Figure(figsize=(4.5, 3.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(df[parameter], df["stsb_dev_spearman"], "-o", ms=4)
    ax.set_xlabel(parameter)
    ax.set_ylabel("STS-B dev Spearman x100")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, df, out_png, out_csv)


def figure_training_ratio(curves: Mapping[str, pd.DataFrame], out_png, out_csv, title=None) -> pd.DataFrame:
    """Figure 8: per training step, the mean dynamic ratios (ArcCon, MET) of the kept anchors and
    the mean anchor-positive cosine, from the scalars the paradigm method logs."""
    columns = ["ratio_arccon", "ratio_met", "pos_cos"]
    frames = []
    for label, curve in curves.items():
        missing = [c for c in columns if c not in curve.columns]
        if missing:
            from cselab.errors import DataError

            raise DataError(f"training curve of {label!r} has no {', '.join(missing)}: Figure 8 needs a run of the "
                            f"paradigm method (it logs them)")
        rows = curve.dropna(subset=["pos_cos"])
        frames.append(rows.assign(label=label)[["label", "step", *columns]])
    df = pd.concat(frames, ignore_index=True)
    fig = Figure(figsize=(11, 3.4))
    for k, (col, name) in enumerate(zip(columns, ("ArcCon ratio", "MET ratio", "cos(anchor, positive)"))):
        ax = fig.add_subplot(1, 3, k + 1)
        for label, rows in df.groupby("label", sort=False):
            ax.plot(rows["step"], rows[col], label=label)
        ax.set_xlabel("step")
        ax.set_title(name, fontsize=9)
    ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, df, out_png, out_csv)


def dropout_pairs(encoder, sentences: Sequence[str], batch_size: int = 128, max_len: int = 32):
    """Two dropout views of every batch of ``sentences`` (raw pooled [CLS], the encoder in train
    mode, no gradient): what the authors' statistics compare, a sentence with itself."""
    import torch

    was_training = encoder.training
    encoder.train()
    try:
        with torch.no_grad():
            for start in range(0, len(sentences), batch_size):
                chunk = list(sentences[start:start + batch_size])
                if len(chunk) < 2:
                    continue
                batch = encoder.pad(encoder.tokenize(chunk, max_len))
                z = encoder(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1))
                z = z.float().cpu().numpy()
                yield z[: len(chunk)], z[len(chunk):]
    finally:
        encoder.train(was_training)


def heldout_statistics(embed_pairs, taus: Sequence[float] = (0.01, 0.05, 0.1, 0.3, 1.0), m: float = 0.30,
                       batch_size: int = 128) -> dict:
    """Figures 5 and 7 from one model on held-out sentences, in batches of ``batch_size``.

    ``embed_pairs`` yields ``(u, v)``: two dropout views of a batch of held-out sentences (raw
    [CLS], as the authors' statistics). Returns the positive cosines ``s_ii`` and the hardest
    negative cosines ``max_{j!=i} s_ij`` of every anchor (Figure 5) and, per ``tau``, the share of
    the hardest negative in the paradigm's update direction over the anchors kept by GD
    (Figure 7: the projection of ``W_ij* t_ij*`` on ``sum_j W_ij t_ij``, ``t_ij = v_j - s_ij u_i``,
    as a fraction of its length).
    """
    pos, hard = [], []
    shares = {tau: [] for tau in taus}
    for u, v in embed_pairs:
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        s = u @ v.T
        n = len(u)
        off = s - 1e8 * np.eye(n)
        pos.append(np.diag(s))
        hard.append(off.max(axis=1))
        kept = np.diag(s) - off.max(axis=1) < m
        for tau in taus:
            z = off / tau
            w = np.exp(z - z.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            t = v[None, :, :] - s[:, :, None] * u[:, None, :]          # [n, n, d] tangential directions
            combined = (w[:, :, None] * t).sum(axis=1)
            star = w.argmax(axis=1)
            hardest = w[np.arange(n), star][:, None] * t[np.arange(n), star]
            norm = np.linalg.norm(combined, axis=1)
            share = (hardest * combined).sum(axis=1) / np.maximum(norm ** 2, 1e-12)
            shares[tau].extend(share[kept].tolist())
    return {"pos_cos": np.concatenate(pos), "hardest_neg_cos": np.concatenate(hard),
            "hardest_share": {tau: float(np.mean(v)) if v else float("nan") for tau, v in shares.items()}}


def figure_heldout(stats: Mapping[str, dict], out_png, out_csv, title=None) -> pd.DataFrame:
    """Figures 5 and 7 side by side: KDE of positive and hardest-negative cosines per model, and
    the hardest negative's share against the temperature."""
    from scipy.stats import gaussian_kde

    rows = []
    fig = Figure(figsize=(10, 3.6))
    ax_kde, ax_share = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    grid = np.linspace(-0.2, 1.0, 241)
    for label, st in stats.items():
        for kind, style in (("pos_cos", "-"), ("hardest_neg_cos", "--")):
            values = st[kind]
            density = gaussian_kde(values)(grid) if np.ptp(values) > 0 else np.zeros_like(grid)
            ax_kde.plot(grid, density, style, label=f"{label}: {kind.replace('_cos', '')}")
            rows += [{"label": label, "kind": kind, "x": x, "density": d} for x, d in zip(grid, density)]
        taus = sorted(st["hardest_share"])
        ax_share.plot(taus, [st["hardest_share"][t] for t in taus], "-o", ms=3, label=label)
        rows += [{"label": label, "kind": "hardest_share", "x": t, "density": st["hardest_share"][t]} for t in taus]
    ax_kde.set_xlabel("cosine")
    ax_kde.set_title("Figure 5: positives and hardest negatives (KDE)", fontsize=9)
    ax_kde.legend(fontsize=7)
    ax_share.set_xscale("log")
    ax_share.set_xlabel("tau")
    ax_share.set_title("Figure 7: share of the hardest negative", fontsize=9)
    ax_share.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, pd.DataFrame(rows), out_png, out_csv)


