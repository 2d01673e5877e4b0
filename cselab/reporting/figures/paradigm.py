"""The gradient paradigm's analysis figures (Li, Zhang, Nie, 2024, §3 and Appendix A): simulated
gradient terms (Figures 2-4, no training), a component sweep (Figure 6), statistics of trained
models on a held-out slice of the corpus (Figures 5, 7 and 8(a)), and the scalars the paradigm
method logs during training (Figure 8(b, c) and Figure 9).

Simulation (its §3.1): a batch is 1 positive angle ``~ N(mu_pos, 0.05)`` and 127 negative
angles ``~ N(mu_neg, 0.10)`` around an anchor; every term is averaged over 1,000 batches per
point. The negatives enter each term only through ``sum_j exp(cos theta_j / tau)`` and
``max_j cos theta_j``, which are drawn once per ``mu_neg`` and shared by every ``mu_pos``, so a
100 x 100 grid takes about a second.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

from cselab.reporting.figures import label_axes, new_figure, save_figure
from cselab.reporting.kinds import FigureInputs, NoOptions, Out, figure_kind
from cselab.settings.base import setting, settings
from cselab.settings.spec import ExperimentSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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
    fig = new_figure(figsize=(4.2 * len(panels), 3.6))
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
    return save_figure(fig, df, out_png, out_csv)


def figure_weight(out_png, out_csv, title=None, temperatures: Sequence[float] = WEIGHT_TEMPERATURES,
                  points: int = 100, n_batches: int = 1000, seed: int = 0) -> pd.DataFrame:
    df = simulate_weight(temperatures, points, n_batches, seed=seed)
    fig = new_figure(figsize=(5.5, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    for tau, rows in df.groupby("tau", sort=False):
        ax.plot(rows["mu_neg_pi"], rows["hardest_share"], label=f"tau = {tau:g}")
    label_axes(ax, "mu_neg (x pi)", "share of the hardest negative in W", title)
    return save_figure(fig, df, out_png, out_csv)


def figure_ratio(out_png, out_csv, title=None, points: int = 100) -> pd.DataFrame:
    df = ratio_grid(points)
    return save_figure(_heatmaps(df, ["arccon", "met"], "theta_neg_pi", "theta_pos_pi", "ratio", title, 0.0, 5.0, "tab20c",
                           mask="masked"), df, out_png, out_csv)


def figure_sweep(results: Mapping[float, float], parameter: str, out_png, out_csv, title=None) -> pd.DataFrame:
    """Figure 6: STS-B dev Spearman against one component's value (``results``: value -> score)."""
    df = pd.DataFrame({parameter: list(results), "stsb_dev_spearman": list(results.values())}).sort_values(parameter)
    fig = new_figure(figsize=(4.5, 3.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(df[parameter], df["stsb_dev_spearman"], "-o", ms=4)
    label_axes(ax, parameter, "STS-B dev Spearman x100", title, legend=False)
    return save_figure(fig, df, out_png, out_csv)


def dropout_pairs(encoder, sentences: Sequence[str], batch_size: int = 128, max_len: int = 32, seed: int = 0):
    """Two dropout views of every batch of ``sentences`` (raw pooled [CLS], the encoder in train
    mode, no gradient): what the authors' statistics compare, a sentence with itself. The dropout
    masks come from ``seed`` (the global RNG state is left as it was): a figure rebuilt from the
    same checkpoints is the same figure."""
    import torch

    device = next(encoder.parameters()).device
    was_training = encoder.training
    encoder.train()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            torch.manual_seed(seed)
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
    fig = new_figure(figsize=(10, 3.6))
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
    return save_figure(fig, pd.DataFrame(rows), out_png, out_csv)




# -- Figure 8: Lemma 1 on held-out batches; the dynamic ratios and cos(anchor, positive) in training --

#: Figure 8(a) defaults: the baseline's gradient-dissipation margin m and Lemma 1's step length
LEMMA1_MARGINS = (0.30,)
LEMMA1_STEP_SIZES = (0.1,)
#: the logged scalars Figure 8(b) plots: curve column -> (legend name, line style)
DYNAMIC_RATIOS = {"ratio_arccon": ("ArcCon", "-"), "ratio_met": ("MET", "--"), "ratio_mat": ("MAT", ":")}
TRAINING_RATIO_COLUMNS = ("step", *DYNAMIC_RATIOS, "pos_cos")
#: the logged scalars Figure 9 plots (angles in radians)
ANGLE_COLUMNS = ("step", "pos_angle_mean", "pos_angle_std", "neg_angle_mean", "neg_angle_std")
_SETTING_STYLES = ("-", "--", ":", "-.")


def _unit(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def lemma1_min_ratio(u, v, m: float = 0.30, step: float = 0.1) -> np.ndarray:
    """Lemma 1's minimum ratio R for every valid anchor of one batch (the paper's §3.1.3 and
    Appendix C; the math of ``cal_r_requirements`` in the authors' statistics code,
    BDBC-KG-NLP/UnderstandingCSE ``statistics.py``).

    ``u``, ``v``: two dropout views of the batch ([B, d], L2-normalised here): anchors ``u_i``,
    positives ``p = v_i`` and each anchor's hardest negative ``n = v_j*``, ``j* = argmax_{j!=i}
    s_ij``; only the anchors gradient dissipation keeps (``s_ii - s_ij* < m``) count. With
    ``alpha``, ``beta`` the anchor's angles to ``p`` and ``n`` and ``theta`` the angle between the
    tangent directions ``t_p = p - u cos alpha`` and ``t_n = n - u cos beta``, a step
    ``step * (R t_p - t_n)`` leaves the anchor no farther from its positive iff
    ``R >= 1/step + (sin beta / sin alpha) cos theta - sqrt(1/step^2 - (sin beta / sin alpha)^2
    sin^2 theta)``, computed here in the equivalent form without the cancellation at small steps;
    ``step = 0`` gives the limit ``(sin beta / sin alpha) cos theta``. As in the authors' code an
    anchor is valid when ``cos alpha``, ``cos beta`` and ``cos theta`` are > 0 and
    ``sin^2 alpha - step^2 sin^2 beta sin^2 theta > 0`` (the bound is real).
    """
    u, v = _unit(u), _unit(v)
    n = len(u)
    s = u @ v.T
    hardest = (s - 1e8 * np.eye(n)).argmax(axis=1)
    cos_a, cos_b = np.diag(s), s[np.arange(n), hardest]
    t_p, t_n = v - cos_a[:, None] * u, v[hardest] - cos_b[:, None] * u
    lengths = np.linalg.norm(t_p, axis=1) * np.linalg.norm(t_n, axis=1)
    cos_t = (t_p * t_n).sum(axis=1) / np.maximum(lengths, 1e-12)
    sin_a, sin_b = (np.sqrt(np.clip(1 - c ** 2, 0.0, None)) for c in (cos_a, cos_b))
    sin2_t = np.clip(1 - cos_t ** 2, 0.0, None)
    valid = ((cos_a - cos_b < m) & (cos_a > 0) & (cos_b > 0) & (cos_t > 0)
             & (sin_a ** 2 - step ** 2 * sin_b ** 2 * sin2_t > 0))
    ratio = sin_b[valid] / sin_a[valid]
    k = ratio ** 2 * sin2_t[valid]
    # 1/step - sqrt(1/step^2 - k) = step k / (1 + sqrt(1 - step^2 k))
    return ratio * cos_t[valid] + step * k / (1 + np.sqrt(1 - step ** 2 * k))


def heldout_min_ratios(embed_pairs, margins: Sequence[float] = LEMMA1_MARGINS,
                       step_sizes: Sequence[float] = LEMMA1_STEP_SIZES) -> dict[tuple[float, float], np.ndarray]:
    """Figure 8(a) for one model: (m, step) -> Lemma 1's minimum ratio (:func:`lemma1_min_ratio`)
    of every valid anchor of every held-out batch. ``embed_pairs`` yields two dropout views of a
    batch, as for :func:`heldout_statistics` (:func:`dropout_pairs` over the held-out slice; the
    paper's Appendix A.2 splits it into batches of its training batch size, 128)."""
    found: dict[tuple[float, float], list] = {(float(m), float(step)): [] for m in margins for step in step_sizes}
    for u, v in embed_pairs:
        for (m, step), parts in found.items():
            parts.append(lemma1_min_ratio(u, v, m, step))
    return {key: np.concatenate(parts) if parts else np.empty(0) for key, parts in found.items()}


def require_curve_columns(curves: Mapping[str, pd.DataFrame], columns: Sequence[str], figure: str,
                          experiments: Mapping[str, str] | None = None) -> None:
    """A :class:`~cselab.errors.DataError` naming the experiment whose training curve lacks one
    of ``columns``: a run of another method, or a paradigm run older than the scalar."""
    from cselab.errors import DataError

    for label, curve in curves.items():
        missing = [c for c in columns if c not in curve.columns]
        if missing:
            exp = (experiments or {}).get(label)
            who, fix = repr(label), "retrain it with the paradigm method"
            if exp:
                who = f"{label!r} (experiment {exp})"
                fix = f"retrain {exp} with the paradigm method (delete its results folder and rerun the figure)"
            raise DataError(f"the training curve of {who} has no {', '.join(missing)}: {figure} plots scalars the "
                            f"paradigm method logs during training, which a run of another method or one trained "
                            f"before they were logged lacks; {fix}")


def _min_ratio_panel(ax, min_ratios: Mapping[str, Mapping[tuple[float, float], np.ndarray]]) -> pd.DataFrame:
    """Figure 8(a): a KDE of Lemma 1's minimum ratio per model (colour) and (m, step) (line
    style), its median marked; R = 1 (the baseline's ratio) for reference."""
    from scipy.stats import gaussian_kde

    pooled = np.concatenate([r for per in min_ratios.values() for r in per.values()] + [np.empty(0)])
    grid = np.linspace(0.0, max(2.0, 1.1 * float(np.quantile(pooled, 0.99))) if pooled.size else 2.0, 241)
    settings = sorted({key for per in min_ratios.values() for key in per})
    frames = []
    for k, (label, per) in enumerate(min_ratios.items()):
        for (m, step), values in per.items():
            style = _SETTING_STYLES[settings.index((m, step)) % len(_SETTING_STYLES)]
            name = label if len(settings) == 1 else f"{label}, m = {m:g}, step size = {step:g}"
            density = gaussian_kde(values)(grid) if values.size > 1 and np.ptp(values) > 0 else np.zeros_like(grid)
            median = float(np.median(values)) if values.size else float("nan")
            share = float((values <= 1.0).mean()) if values.size else float("nan")
            ax.plot(grid, density, style, color=f"C{k}", label=f"{name} (median {median:.2f}, n = {values.size})")
            if values.size:
                ax.plot([median], [np.interp(median, grid, density)], "v", color=f"C{k}", ms=5)
            summary = pd.DataFrame({"quantity": ["median", "share_at_most_1", "anchors"],
                                    "x": [median, 1.0, np.nan], "y": [np.nan, share, values.size]})
            frames += [pd.DataFrame({"quantity": "density", "x": grid, "y": density}).assign(label=label, m=m,
                                                                                             step_size=step),
                       summary.assign(label=label, m=m, step_size=step)]
    ax.axvline(1.0, color="k", ls="--", lw=0.8, label="R = 1")
    ax.set_xlabel("minimum R of Lemma 1")
    ax.set_ylabel("density")
    ax.set_title("(a) minimum ratio on held-out batches (KDE, v: median)", fontsize=9)
    ax.legend(fontsize=6)
    return pd.concat(frames, ignore_index=True).assign(panel="a") if frames else pd.DataFrame()


def _training_panels(ax_ratio, ax_cos, curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Figure 8(b): the dynamic ratios, one colour per model and one line style per ratio, 1 for
    reference; (c): the mean cos(anchor, positive); both per logging window of training."""
    from matplotlib.lines import Line2D

    frames = []
    for k, (label, curve) in enumerate(curves.items()):
        logged = curve.dropna(subset=["pos_cos"])
        for col, (_, style) in DYNAMIC_RATIOS.items():
            ax_ratio.plot(logged["step"], logged[col], style, color=f"C{k}")
            frames.append(pd.DataFrame({"panel": "b", "label": label, "quantity": col, "x": logged["step"],
                                        "y": logged[col]}))
        ax_cos.plot(logged["step"], logged["pos_cos"], color=f"C{k}", label=label)
        frames.append(pd.DataFrame({"panel": "c", "label": label, "quantity": "pos_cos", "x": logged["step"],
                                    "y": logged["pos_cos"]}))
    ax_ratio.axhline(1.0, color="0.4", ls="-.", lw=0.8)
    handles = [Line2D([], [], color=f"C{k}", label=label) for k, label in enumerate(curves)]
    handles += [Line2D([], [], color="0.3", ls=style, label=name) for name, style in DYNAMIC_RATIOS.values()]
    ax_ratio.legend(handles=handles, fontsize=6)
    ax_ratio.set_title("(b) dynamic ratios during training (kept anchors)", fontsize=9)
    ax_cos.set_title("(c) cos(anchor, positive) during training", fontsize=9)
    ax_cos.legend(fontsize=7)
    for ax in (ax_ratio, ax_cos):
        ax.set_xlabel("step")
    return pd.concat(frames, ignore_index=True)


def figure_training_ratio(curves: Mapping[str, pd.DataFrame],
                          min_ratios: Mapping[str, Mapping[tuple[float, float], np.ndarray]], out_png, out_csv,
                          title=None, experiments: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Figure 8 (§3.2.3, Conjecture 3) in three panels and one CSV (``panel``, ``label``,
    ``quantity``, ``m``, ``step_size``, ``x``, ``y``): (a) per model, the distribution over held-out
    batches of Lemma 1's minimum ratio (``min_ratios``: label -> (m, step) -> values, from
    :func:`heldout_min_ratios`; CSV quantities ``density``, ``median``, ``share_at_most_1`` (the
    share of anchors R = 1 already serves) and ``anchors``); (b) the dynamic ratios of ArcCon, MET
    and MAT and (c) the mean cos(anchor, positive), from the training curves (``curves``: label ->
    curve; ``x`` is the step). ``experiments`` (label -> experiment id) names the run to retrain
    in the error a curve without these scalars raises.

    The paper's Appendix A.2 computes (b) on held-out batches of saved checkpoints; here (b) and
    (c) are the training batches' values after the training head, averaged per logging window.
    """
    require_curve_columns(curves, TRAINING_RATIO_COLUMNS, "Figure 8", experiments)
    fig = new_figure(figsize=(14, 3.8))
    axes = [fig.add_subplot(1, 3, k + 1) for k in range(3)]
    df = pd.concat([_min_ratio_panel(axes[0], min_ratios), _training_panels(axes[1], axes[2], curves)],
                   ignore_index=True)
    df = df.reindex(columns=["panel", "label", "quantity", "m", "step_size", "x", "y"])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, df, out_png, out_csv)


def figure_angle_statistics(curves: Mapping[str, pd.DataFrame], out_png, out_csv, title=None,
                            experiments: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Figure 9 (Appendix A.1): per logged step of training, the mean positive and negative
    angles ``mu_p``, ``mu_n`` (units of pi) and their standard deviations ``sigma_p``, ``sigma_n``
    (radians) within the training batches (averaged per logging window), which check the §3.1
    simulation's ``theta_ap ~ N(mu_p, 0.05^2)``, ``theta_an ~ N(mu_n, 0.10^2)``: dashed lines mark
    its sigmas. CSV: ``label, step, mu_pos_pi, mu_neg_pi, sigma_pos, sigma_neg``."""
    require_curve_columns(curves, ANGLE_COLUMNS, "Figure 9", experiments)
    frames = []
    for label, curve in curves.items():
        logged = curve.dropna(subset=["pos_angle_mean"])
        frames.append(pd.DataFrame({"label": label, "step": logged["step"].astype(int),
                                    "mu_pos_pi": logged["pos_angle_mean"] / np.pi,
                                    "mu_neg_pi": logged["neg_angle_mean"] / np.pi,
                                    "sigma_pos": logged["pos_angle_std"], "sigma_neg": logged["neg_angle_std"]}))
    df = pd.concat(frames, ignore_index=True)
    fig = new_figure(figsize=(10, 3.6))
    ax_mu, ax_sigma = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for k, (label, rows) in enumerate(df.groupby("label", sort=False)):
        for ax, pos, neg in ((ax_mu, "mu_pos_pi", "mu_neg_pi"), (ax_sigma, "sigma_pos", "sigma_neg")):
            ax.plot(rows["step"], rows[pos], "-", color=f"C{k}", label=f"{label}: positive")
            ax.plot(rows["step"], rows[neg], "-.", color=f"C{k}", label=f"{label}: negative")
    for value, name in ((SIGMA_POS, "sigma_p"), (SIGMA_NEG, "sigma_n")):
        ax_sigma.axhline(value, color="0.3", ls="--", lw=0.8)
        ax_sigma.text(1.0, value, f" simulation {name} = {value:g}", transform=ax_sigma.get_yaxis_transform(),
                      va="center", fontsize=7)
    ax_mu.set_ylabel("mean angle (x pi)")
    ax_sigma.set_ylabel("standard deviation (radians)")
    ax_mu.set_title("mu_p, mu_n", fontsize=9)
    ax_sigma.set_title("sigma_p, sigma_n (dashed: the simulation's)", fontsize=9)
    for ax in (ax_mu, ax_sigma):
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, df, out_png, out_csv)


# -- the kinds -----------------------------------------------------------------------------------

def _points():
    return setting(100, doc="grid points per axis (the paper: 100)", minimum=1)


def _batches():
    return setting(1000, doc="batches per point (the paper: 1,000)", minimum=1)


def _seed():
    return setting(0, doc="the simulation's random seed", minimum=0)


def _holdout():
    return setting(0.1, doc="the held-out fraction of the corpus (as the experiments' training.holdout)",
                   exclusiveMinimum=0, exclusiveMaximum=1)


def _max_sentences():
    return setting(10000, doc="held-out sentences used", minimum=1)


@settings
class GradientDissipationOptions:
    losses: list[Literal[GD_LOSSES]] = setting(list(GD_LOSSES), doc="the losses whose GD term is drawn", minItems=1)
    points: int = _points()
    batches: int = _batches()
    seed: int = _seed()


@settings
class GradientWeightOptions:
    temperatures: list[float] = setting(list(WEIGHT_TEMPERATURES), doc="the temperatures drawn", minItems=1,
                                        items={"exclusiveMinimum": 0})
    points: int = _points()
    batches: int = _batches()
    seed: int = _seed()


@settings
class GradientRatioOptions:
    points: int = _points()


@settings
class ComponentSweepOptions:
    parameter: Literal["m", "tau", "ratio"] = setting("m", doc="the option on the x axis")


@settings
class TrainingRatioOptions:
    holdout: float = _holdout()
    max_sentences: int = _max_sentences()
    batch_size: int = setting(128, doc="held-out sentences per batch for Figure 8(a) (the paper's training batch)",
                              minimum=1)
    margins: list[float] = setting(list(LEMMA1_MARGINS), doc="GD margins m that select the anchors of (a)",
                                   minItems=1, items={"minimum": 0})
    step_sizes: list[float] = setting(list(LEMMA1_STEP_SIZES), minItems=1, items={"minimum": 0},
                                      doc="Lemma 1's step lengths for (a); 0: the limit (sin beta / sin alpha) "
                                          "cos theta")


@settings
class HeldoutStatisticsOptions:
    holdout: float = _holdout()
    max_sentences: int = _max_sentences()


@figure_kind("gradient_dissipation", options=GradientDissipationOptions)
def draw_gradient_dissipation(inputs: FigureInputs, options: GradientDissipationOptions, out: Out):
    """Figure 2: the simulated gradient-dissipation term (no training)."""
    return figure_gd(losses=list(options.losses), n_batches=options.batches, seed=options.seed,
                     points=options.points, **out.kwargs())


@figure_kind("gradient_weight", options=GradientWeightOptions)
def draw_gradient_weight(inputs: FigureInputs, options: GradientWeightOptions, out: Out):
    """Figure 3: the hardest negative's share of the simulated weight term."""
    return figure_weight(temperatures=list(options.temperatures), n_batches=options.batches, seed=options.seed,
                         points=options.points, **out.kwargs())


@figure_kind("gradient_ratio", options=GradientRatioOptions)
def draw_gradient_ratio(inputs: FigureInputs, options: GradientRatioOptions, out: Out):
    """Figure 4: the dynamic ratios of ArcCon and MET over the angle grid."""
    return figure_ratio(points=options.points, **out.kwargs())


def _sweep_check(options: ComponentSweepOptions, spec: ExperimentSpec) -> str | None:
    if spec.options.get(options.parameter) is None:
        return f"sets no options.{options.parameter}, the value this sweep plots"
    return None


@figure_kind("component_sweep", reads="stsb_dev", trained=True, check=_sweep_check,
             values=lambda options, spec: float(spec.options[options.parameter]), options=ComponentSweepOptions)
def draw_component_sweep(inputs: FigureInputs, options: ComponentSweepOptions, out: Out):
    """Figure 6: STS-B dev against one component's value, one experiment per value."""
    from cselab.evaluation.records import read_result

    scores = {label: read_result(inputs.files[label]["stsb_dev"])["scores"]["STS-B dev"]
              for label in inputs.labels}
    return figure_sweep({inputs.values[label]: scores[label] for label in scores}, options.parameter,
                        **out.kwargs())


def _heldout_sentences(inputs: FigureInputs, options: TrainingRatioOptions | HeldoutStatisticsOptions) -> list[str]:
    from cselab.data.corpus import read_sentences

    return read_sentences(inputs.heldout)[: options.max_sentences]


@figure_kind("training_ratio", reads=("model", "curve"), trained=True, heldout=True, options=TrainingRatioOptions)
def draw_training_ratio(inputs: FigureInputs, options: TrainingRatioOptions, out: Out):
    """Figure 8: (a) from the checkpoints on the held-out slice, (b) and (c) from the training
    curves (their columns checked before any model is loaded)."""
    curves = inputs.curves()
    require_curve_columns(curves, TRAINING_RATIO_COLUMNS, "Figure 8", inputs.labels)
    sentences = _heldout_sentences(inputs, options)
    min_ratios = {label: heldout_min_ratios(dropout_pairs(m.encoder, sentences, options.batch_size),
                                            list(options.margins), list(options.step_sizes))
                  for label, m in inputs.models().items()}
    return figure_training_ratio(curves, min_ratios, experiments=inputs.labels, **out.kwargs())


@figure_kind("heldout_statistics", reads="model", heldout=True, options=HeldoutStatisticsOptions)
def draw_heldout_statistics(inputs: FigureInputs, options: HeldoutStatisticsOptions, out: Out):
    """Figures 5 and 7 from the checkpoints on the held-out slice."""
    sentences = _heldout_sentences(inputs, options)
    stats = {label: heldout_statistics(dropout_pairs(m.encoder, sentences)) for label, m in inputs.models().items()}
    return figure_heldout(stats, **out.kwargs())


@figure_kind("angle_statistics", reads="curve", trained=True)
def draw_angle_statistics(inputs: FigureInputs, options: NoOptions, out: Out):
    """Figure 9: the positive and negative angles' means and deviations from the training curves."""
    return figure_angle_statistics(inputs.curves(), experiments=inputs.labels, **out.kwargs())
