"""The gradient paradigm's losses: hand-checked values, gradients equal to the paradigm's
formula, the three components, and the method's options and scalars."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from cselab.errors import ConfigError
from cselab.training import losses as L
from cselab.training.methods import Context
from cselab.training.methods.paradigm import LOSSES, Paradigm
from cselab.training.objective import method_class


def views(n=6, d=8, seed=0, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g)
    v = u + noise * torch.randn(n, d, generator=g)
    return F.normalize(u, dim=-1), F.normalize(v, dim=-1)


def tangent(u, g):
    """The gradient through L2 normalisation at a unit vector: the tangential part."""
    return g - (g * u).sum(-1, keepdim=True) * u


def test_triplet_losses_match_a_loop():
    u, v = views()
    s = u @ v.T
    n = len(u)
    pos = s.diagonal()
    hardest = torch.stack([max(s[i, j] for j in range(n) if j != i) for i in range(n)])
    assert L.mpt(u, v, 0.23).item() == pytest.approx(F.relu(hardest - pos + 0.23).mean().item(), abs=1e-6)
    d = torch.sqrt(torch.clamp(2 - 2 * s, min=1e-4))
    nearest = torch.stack([min(d[i, j] for j in range(n) if j != i) for i in range(n)])
    assert L.met(u, v, 0.45).item() == pytest.approx(F.relu(d.diagonal() - nearest + 0.45).mean().item(), abs=1e-6)
    a = torch.acos(s.clamp(-1, 1))
    near_a = torch.stack([min(a[i, j] for j in range(n) if j != i) for i in range(n)])
    assert L.mat(u, v, 0.15).item() == pytest.approx(
        F.relu(a.diagonal() - near_a + 0.15 * math.pi).mean().item(), abs=1e-5)


def test_arccon_is_infonce_with_an_angular_margin_on_the_positive():
    u, v = views()
    assert L.arccon(u, v, 0.05, margin_deg=0.0).item() == pytest.approx(L.info_nce(u, v, 0.05).item(), abs=1e-5)
    assert L.arccon(u, v, 0.05, margin_deg=10.0).item() > L.info_nce(u, v, 0.05).item()
    same = F.normalize(torch.randn(4, 8), dim=-1)
    assert torch.isfinite(L.arccon(same, same, 0.05))  # cosine 1: clamped, no NaN


@pytest.mark.parametrize("ratio", [1.0, 1.5])
def test_paradigm_loss_gradient_is_the_paradigms(ratio):
    """With positive='anchor' and every anchor kept, dL/du_i = (1/N^2) (sum_{j!=i} W_ij v_j - R v_i)
    (tangential part), W the softmax of s_ij / tau over the negatives; the authors' code (both
    directions pull the positive) gives ratio 2R instead."""
    u, v = views(noise=0.1)
    n, tau = len(u), 0.05
    s = u @ v.T
    weight = torch.softmax((s - 1e8 * torch.eye(n)) / tau, dim=1)
    for positive, effective in (("anchor", ratio), ("both", 2 * ratio)):
        uu = u.clone().requires_grad_(True)
        loss = L.paradigm_loss(uu, v, m=10.0, tau=tau, ratio=ratio, positive=positive)  # m = 10: all kept
        loss.backward()
        expected = tangent(u, (weight @ v - effective * v) / n ** 2)
        assert torch.allclose(uu.grad, expected, atol=1e-6), positive


def test_paradigm_gradient_dissipation_and_empty_batches():
    u, v = views(noise=0.01)  # positives far closer than any negative: no anchor passes s_ii - max < m
    uu = u.clone().requires_grad_(True)
    loss = L.paradigm_loss(uu, v, m=0.05, tau=0.05)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(uu.grad == 0)  # the authors' code would return NaN here
    kept_all = L.paradigm_loss(u, v, m=10.0, gd=True)
    assert kept_all.item() == pytest.approx(L.paradigm_loss(u, v, gd=False).item(), abs=1e-6)


def test_gd_masks_same_view_and_positive():
    u = F.normalize(torch.tensor([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]]), dim=-1)
    v = F.normalize(torch.tensor([[1.0, 0.05], [0.5, 0.5], [0.1, 1.0]]), dim=-1)
    same, _ = L.gd_masks(u, v, m=0.05, reference="same_view")
    assert same.tolist() == [True, True, False]  # rows 0 and 1 have a same-view neighbour within cos 0.95
    pos, _ = L.gd_masks(u, v, m=0.05, reference="positive")
    s = u @ v.T
    assert pos.tolist() == [(s[i, i] - max(s[i, j] for j in range(3) if j != i)).item() < 0.05 for i in range(3)]


def test_vicreg_original_gradient():
    """VICReg's surrogate: dL/du_i = -(2/N) v_i + lam * sum_j W_ij u_j (+ the v-anchored term's
    share), W = 2 u u^T / N^2 from the own view; here checked on the u-anchored half."""
    u, v = views()
    n, lam = len(u), 30.0
    uu = u.clone().requires_grad_(True)
    L._surrogate(uu, v, uu, lam, False, False, 0.05, 1.0, lambda a, b: -(2 / n) * (a * b.detach()).sum(-1)).backward()
    weight = 2 * (u @ u.T) / n ** 2
    assert torch.allclose(uu.grad, -(2 / n) * v + lam * weight @ u, atol=1e-6)


def test_components_change_what_they_should():
    u, v = views(n=8)
    assert L.mhs(u, v, w=True).item() == L.mhs(u, v, w=False).item()  # MHS: no weight change ("-*")
    for fn in (L.mhe, L.vicreg, L.barlow_twins):
        base = fn(u, v).item()
        assert fn(u, v, w=True).item() != base and fn(u, v, r=True, ratio=1.5).item() != base
    kept_all = L.mhe(u, v, gd=True, m=10.0).item()
    assert kept_all == pytest.approx(L.mhe(u, v).item(), abs=1e-6)  # every row kept: GD changes nothing
    uu = u.clone().requires_grad_(True)
    L.barlow_twins(uu, v, gd=True, m=0.0).backward()  # m = 0: no row keeps its gradient
    assert torch.all(uu.grad == 0)
    # all three terms on: Barlow Twins and VICReg differ only in whose Gram matrix gives W
    assert L.barlow_twins(u, u, gd=True, w=True, r=True).item() == pytest.approx(
        L.vicreg(u, u, gd=True, w=True, r=True).item(), abs=1e-6)


def test_losses_stay_fp32_under_autocast():
    u, v = views(n=16, d=32)
    for name in ("arccon", "mpt", "met", "mat", "paradigm_loss", "mhe", "mhs", "vicreg", "barlow_twins"):
        fn = getattr(L, name)
        args = (0.05,) if name == "arccon" else ()
        ref = fn(u, v, *args)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = fn(u, v, *args)
        assert got.dtype == torch.float32 and got.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-6), name


def build(tiny_encoder, **options):
    return method_class("paradigm")(Context(encoder=tiny_encoder, options=Paradigm.check_options(options),
                            training={"temperature": 0.05, "max_len": 32}))


@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_trains(tiny_encoder, loss):
    modified = loss in ("paradigm", "barlowtwins", "vicreg", "mhe", "mhs")
    method = build(tiny_encoder, loss=loss, gd=modified, w=modified, r=modified)
    ids = tiny_encoder.tokenize(["a man plays a guitar .", "a dog runs .", "it rains today .", "x y"], 32)
    batch = tiny_encoder.pad(ids)
    tiny_encoder.train()
    tiny_encoder.zero_grad()
    out = method(batch, {})
    (value,) = out.losses.values()
    assert torch.isfinite(value)
    value.backward()
    assert set(out.scalars) == {"pos_cos", "hardest_neg_cos", "gd_kept", "ratio_arccon", "ratio_met", "ratio_mat",
                                "pos_angle_mean", "pos_angle_std", "neg_angle_mean", "neg_angle_std"}
    assert 0 <= out.scalars["gd_kept"].item() <= 1 and out.scalars["ratio_arccon"].item() > 0
    assert all(isinstance(v, torch.Tensor) for v in out.scalars.values())  # no host sync: tensors, no .item()


def test_statistics_of_a_known_batch():
    """Anchors e_1..e_3, positives at angle a = 0.2 pi towards the next axis: every positive angle
    is a, the hardest negative (the previous anchor's positive) is at 0.5 pi - a, the other
    negative at 0.5 pi; so mu_n = 0.4 pi and sigma_n = 0.1 pi sqrt(6/5) over the 6 pairs."""
    from types import SimpleNamespace

    a, b = 0.2 * math.pi, 0.3 * math.pi
    u = torch.eye(3)
    v = math.cos(a) * u + math.sin(a) * u.roll(1, dims=1)  # v_i = cos a e_i + sin a e_{i+1}
    method = SimpleNamespace(options=Paradigm.check_options({"m": 0.3}))
    st = {k: t.item() for k, t in Paradigm.statistics(method, u, v).items()}
    assert st["pos_cos"] == pytest.approx(math.cos(a), abs=1e-6)
    assert st["hardest_neg_cos"] == pytest.approx(math.cos(b), abs=1e-6)
    assert st["gd_kept"] == 1.0  # cos a - cos b = 0.22 < 0.3
    assert st["ratio_arccon"] == pytest.approx(math.sin(a + math.radians(10)) / math.sin(a), rel=1e-5)
    assert st["ratio_met"] == pytest.approx(math.sin(b / 2) / math.sin(a / 2), rel=1e-5)
    assert st["ratio_mat"] == pytest.approx(math.sin(b) / math.sin(a), rel=1e-5)
    assert st["pos_angle_mean"] == pytest.approx(a, abs=1e-5) and st["pos_angle_std"] == pytest.approx(0, abs=1e-5)
    assert st["neg_angle_mean"] == pytest.approx(0.4 * math.pi, abs=1e-5)
    assert st["neg_angle_std"] == pytest.approx(0.1 * math.pi * math.sqrt(6 / 5), abs=1e-5)
    none_kept = Paradigm.statistics(SimpleNamespace(options=Paradigm.check_options({"m": 0.1})), u, v)
    assert none_kept["gd_kept"].item() == 0 and none_kept["ratio_mat"].item() == 0
    assert none_kept["neg_angle_mean"].item() == pytest.approx(0.4 * math.pi, abs=1e-5)  # angles: every anchor


def test_head_init_and_frozen_embeddings(tiny_bert):
    from cselab.models.encoder import load_encoder

    encoder = load_encoder(tiny_bert)
    torch.manual_seed(0)
    method = build(encoder, loss="mhe", freeze_embeddings=True, head="tanh_linear")
    linear = method.head[1]
    assert linear.weight.std().item() == pytest.approx(6e-3, rel=0.15)
    assert linear.bias.abs().max().item() > 0  # the authors draw the bias from N(0, 6e-3) too
    assert not any(p.requires_grad for p in encoder.backbone.embeddings.parameters())
    assert all(p.requires_grad for p in encoder.backbone.encoder.parameters())


@pytest.mark.parametrize("options, message", [
    ({"loss": "infonse"},
     r"'options\.loss': 'infonse' is not one of \['infonce', 'arccon', 'mpt'.*\(did you mean 'infonce'\?\)"),
    ({"loss": "mhe", "ratio": -1.5}, r"'options\.ratio': must be a number > 0"),
    ({"loss": "mpt", "margin": -0.2}, r"'options\.margin': must be a number >= 0"),
    ({"loss": "paradigm", "m": -0.3}, r"'options\.m': must be a number >= 0"),
    ({"loss": "paradigm", "tau": 0}, r"'options\.tau': must be a number > 0, got 0"),
    ({"loss": "arccon", "gd": True}, r"'options\.loss': arccon is an effective loss"),
])
def test_bad_options_are_one_clear_message(options, message):
    with pytest.raises(ConfigError, match=message):
        Paradigm.check_options(options)


# -- the analysis figures (cselab.reporting.figures.paradigm) -------------------------------------------

def test_simulated_infonce_gd_is_one_minus_the_positive_probability():
    """GD of InfoNCE is |d loss / d positive logit| = 1 - p(positive): check _gd against autograd."""
    from cselab.reporting.figures.paradigm import TAU, _gd

    g = torch.Generator().manual_seed(0)
    cos_neg = torch.cos(torch.rand(5, 127, generator=g, dtype=torch.float64) * math.pi)
    cos_pos = torch.cos(torch.rand(5, generator=g, dtype=torch.float64) * math.pi / 2)
    logits = (torch.cat([cos_pos[:, None], cos_neg], dim=1) / TAU).requires_grad_(True)
    F.cross_entropy(logits, torch.zeros(5, dtype=torch.long), reduction="sum").backward()
    lse = torch.logsumexp(cos_neg / TAU, dim=1)
    gd = _gd("infonce", cos_pos.numpy(), lse.numpy(), cos_neg.max(1).values.numpy())
    assert gd == pytest.approx((-logits.grad[:, 0]).numpy(), rel=1e-9)


def test_simulated_gd_grid():
    from cselab.reporting.figures.paradigm import simulate_gd

    df = simulate_gd(points=12, n_batches=50)
    assert len(df) == 4 * 12 * 12 and df["gd"].between(0, 1).all()
    mpt = df[df["loss"] == "mpt"]
    # positive at 0.05 pi, every negative near pi: the margin is met, no gradient; reversed: full gradient
    assert mpt[(mpt.mu_pos_pi == mpt.mu_pos_pi.min()) & (mpt.mu_neg_pi == 1.0)]["gd"].item() == 0
    assert mpt[(mpt.mu_pos_pi == 0.5) & (mpt.mu_neg_pi == mpt.mu_neg_pi.min())]["gd"].item() == 1
    info = df[df["loss"] == "infonce"].pivot(index="mu_pos_pi", columns="mu_neg_pi", values="gd")
    assert (info.diff(axis=0).iloc[1:] >= -1e-9).to_numpy().all()  # a farther positive: more gradient
    arccon = df[df["loss"] == "arccon"]["gd"].to_numpy()
    assert (arccon >= df[df["loss"] == "infonce"]["gd"].to_numpy() - 1e-12).all()  # the margin adds gradient


def test_simulated_weight_and_ratio():
    from cselab.reporting.figures.paradigm import ratio_grid, simulate_weight

    w = simulate_weight(temperatures=(1.0, 0.05, 0.005), points=10, n_batches=40)
    mid = w[np.isclose(w.mu_neg_pi, w.mu_neg_pi.unique()[2])].set_index("tau")["hardest_share"]
    assert 0 < mid[1.0] < mid[0.05] < mid[0.005] <= 1  # a colder softmax concentrates on the hardest
    assert mid[1.0] == pytest.approx(1 / 127, rel=0.5)  # a warm one spreads over all 127
    r = ratio_grid(points=10)
    arccon = r[r["loss"] == "arccon"]
    row = arccon.iloc[0]
    theta = row.theta_pos_pi * math.pi
    assert row.ratio == pytest.approx(math.sin(theta + math.radians(10)) / math.sin(theta))
    assert r[r.theta_pos_pi > r.theta_neg_pi]["masked"].all()
    met = r[(r["loss"] == "met") & ~r["masked"]]
    assert (met["ratio"] >= 1).all()  # kept: the negative is farther than the positive, within the margin


def test_heldout_statistics():
    from cselab.reporting.figures.paradigm import heldout_statistics

    rng = np.random.default_rng(0)
    u = rng.normal(size=(16, 8))
    v = u + 0.05 * rng.normal(size=(16, 8))
    st = heldout_statistics([(u, v), (u[:8], u[:8])], taus=(1e-3, 1.0, 100.0), m=2.0)
    assert st["pos_cos"].shape == (24,) and st["hardest_neg_cos"].shape == (24,)
    assert st["pos_cos"][16:] == pytest.approx(1.0) and (st["pos_cos"][:16] > 0.99).all()
    assert (st["hardest_neg_cos"] < st["pos_cos"]).all()
    share = st["hardest_share"]
    assert share[1e-3] == pytest.approx(1.0, abs=1e-3)  # one negative takes all the weight
    assert share[100.0] < share[1.0] < share[1e-3]
    none_kept = heldout_statistics([(u, v)], taus=(0.05,), m=-1.0)
    assert math.isnan(none_kept["hardest_share"][0.05])


def lemma1_batch(a=0.2 * math.pi, b=0.3 * math.pi, t=0.25 * math.pi):
    """Anchor 0 = e_1 with its positive at angle ``a`` and its only negative (anchor 1's positive)
    at angle ``b``, their tangent directions ``t`` apart; anchor 1 = e_4 is orthogonal to both
    (cos alpha = 0: never valid)."""
    e = np.eye(4)
    u = np.stack([e[0], e[3]])
    p = math.cos(a) * e[0] + math.sin(a) * e[1]
    n = math.cos(b) * e[0] + math.sin(b) * (math.cos(t) * e[1] + math.sin(t) * e[2])
    return u, np.stack([p, n])


def test_lemma1_min_ratio_by_hand():
    from cselab.reporting.figures.paradigm import heldout_min_ratios, lemma1_min_ratio

    a, b, t, step = 0.2 * math.pi, 0.3 * math.pi, 0.25 * math.pi, 0.1
    u, v = lemma1_batch(a, b, t)
    q = math.sin(b) / math.sin(a)
    by_hand = 1 / step + q * math.cos(t) - math.sqrt(1 / step ** 2 - q ** 2 * math.sin(t) ** 2)
    (got,) = lemma1_min_ratio(u, v, m=0.3, step=step)
    assert got == pytest.approx(by_hand, rel=1e-9)
    # the bound's meaning (Appendix C, in the anchor's tangent plane): the step step * (R t_p - t_n) with
    # R = R_min leaves the anchor exactly as far from its positive, a larger R brings it closer
    t_p = np.array([math.sin(a), 0.0])
    t_n = math.sin(b) * np.array([math.cos(t), math.sin(t)])
    def distance_after(ratio):
        return np.linalg.norm(step * (ratio * t_p - t_n) - t_p)

    assert distance_after(got) == pytest.approx(math.sin(a), rel=1e-9)
    assert distance_after(1.2 * got) < math.sin(a) < distance_after(0.8 * got)
    # step -> 0: the limit (sin b / sin a) cos theta, without the cancellation of the direct form
    assert lemma1_min_ratio(u, v, 0.3, 0.0)[0] == pytest.approx(q * math.cos(t), rel=1e-12)
    assert lemma1_min_ratio(u, v, 0.3, 1e-9)[0] == pytest.approx(q * math.cos(t), rel=1e-8)
    # validity masks: not kept by GD, cos theta <= 0, cos beta <= 0, the bound not real (a long step)
    assert lemma1_min_ratio(u, v, m=0.1, step=step).size == 0
    assert lemma1_min_ratio(*lemma1_batch(t=0.6 * math.pi), m=0.3, step=step).size == 0
    assert lemma1_min_ratio(*lemma1_batch(b=0.6 * math.pi), m=2.0, step=step).size == 0
    assert lemma1_min_ratio(u, v, m=0.3, step=2.0).size == 0  # sin^2 a < 4 sin^2 b sin^2 t
    assert lemma1_min_ratio(3 * u, 0.5 * v, m=0.3, step=step) == pytest.approx([got])  # normalised
    dist = heldout_min_ratios([(u, v), (u, v)], margins=(0.1, 0.3), step_sizes=(0.0, step))
    assert set(dist) == {(0.1, 0.0), (0.1, step), (0.3, 0.0), (0.3, step)}
    assert dist[(0.1, step)].size == 0 and dist[(0.3, step)] == pytest.approx([got, got])


def training_curve(steps=6, mat=True, seed=0):
    """A paradigm run's curve: every step logs the scalars, an evaluation row every 3 steps."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(1, steps + 1):
        rows.append({"step": step, "loss": 1.0 / step, "pos_cos": 0.8 + 0.01 * step, "ratio_arccon": 1.3,
                     "ratio_met": 1.6 + 0.1 * rng.random(), "pos_angle_mean": 0.2 * math.pi,
                     "pos_angle_std": 0.05, "neg_angle_mean": 0.45 * math.pi, "neg_angle_std": 0.12,
                     **({"ratio_mat": 1.4} if mat else {})})
        if step % 3 == 0:
            rows.append({"step": step, "stsb_dev_spearman": 60.0})
    return pd.DataFrame(rows)


def test_figure8_and_figure9(tmp_path):
    from cselab.errors import DataError
    from cselab.reporting.figures import paradigm as P

    rng = np.random.default_rng(0)
    curves = {"R = 1": training_curve(), "R = 2": training_curve(seed=1)}
    ratios = {"R = 1": {(0.3, 0.1): rng.gamma(4.0, 0.3, 200), (0.5, 0.1): rng.gamma(4.0, 0.3, 300)},
              "R = 2": {(0.3, 0.1): rng.gamma(3.0, 0.3, 150), (0.5, 0.1): np.empty(0)}}
    df = P.figure_training_ratio(curves, ratios, tmp_path / "f8.png", tmp_path / "f8.csv", title="Figure 8")
    assert list(df.columns) == ["panel", "label", "quantity", "m", "step_size", "x", "y"]
    saved = pd.read_csv(tmp_path / "f8.csv")
    assert len(saved) == len(df) and set(saved["panel"]) == {"a", "b", "c"}
    a = df[df["panel"] == "a"].set_index(["label", "m", "quantity"])
    assert a.loc[("R = 1", 0.3, "median"), "x"] == pytest.approx(np.median(ratios["R = 1"][(0.3, 0.1)]))
    assert a.loc[("R = 1", 0.5, "share_at_most_1"), "y"] == pytest.approx((ratios["R = 1"][(0.5, 0.1)] <= 1).mean())
    assert a.loc[("R = 2", 0.5, "anchors"), "y"] == 0 and math.isnan(a.loc[("R = 2", 0.5, "median"), "x"])
    b = df[df["panel"] == "b"]
    assert set(b["quantity"]) == {"ratio_arccon", "ratio_met", "ratio_mat"} and len(b) == 2 * 3 * 6
    c = df[df["panel"] == "c"]
    assert list(c[c["label"] == "R = 1"]["x"]) == [1, 2, 3, 4, 5, 6] and c["y"].between(-1, 1).all()
    old = {"R = 1": training_curve(mat=False)}
    with pytest.raises(DataError, match=r"'R = 1' \(experiment gp-base-s42\) has no ratio_mat: Figure 8 .* "
                                        r"retrain gp-base-s42 .*delete its results folder"):
        P.figure_training_ratio(old, {"R = 1": {}}, tmp_path / "x.png", tmp_path / "x.csv",
                                experiments={"R = 1": "gp-base-s42"})
    angles = P.figure_angle_statistics({"baseline": curves["R = 1"]}, tmp_path / "f9.png", tmp_path / "f9.csv")
    assert list(angles.columns) == ["label", "step", "mu_pos_pi", "mu_neg_pi", "sigma_pos", "sigma_neg"]
    assert len(angles) == 6 and angles["mu_pos_pi"].to_numpy() == pytest.approx(0.2)
    assert angles["mu_neg_pi"].to_numpy() == pytest.approx(0.45) and (angles["sigma_neg"] == 0.12).all()
    with pytest.raises(DataError, match="has no pos_angle_mean, pos_angle_std, neg_angle_mean, neg_angle_std"):
        P.figure_angle_statistics({"SimCSE": curves["R = 1"][["step", "loss"]]}, tmp_path / "y.png",
                                  tmp_path / "y.csv")
    for name in ("f8", "f9"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000 and (tmp_path / f"{name}.csv").is_file()
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "y.png").exists()


def test_paradigm_figures_write_png_and_csv(tmp_path):
    import pandas as pd

    from cselab.errors import DataError
    from cselab.reporting.figures import paradigm as P

    P.figure_gd(tmp_path / "gd.png", tmp_path / "gd.csv", points=6, n_batches=10)
    P.figure_weight(tmp_path / "w.png", tmp_path / "w.csv", points=6, n_batches=10)
    P.figure_ratio(tmp_path / "r.png", tmp_path / "r.csv", points=6)
    P.figure_sweep({1.0: 70.0, 0.3: 72.5}, "m", tmp_path / "s.png", tmp_path / "s.csv")
    assert list(pd.read_csv(tmp_path / "s.csv")["m"]) == [0.3, 1.0]
    curve = pd.DataFrame({"step": [1, 2, 3], "loss": [1.0, 0.9, 0.8], "pos_cos": [0.9, None, 0.95],
                          "ratio_arccon": [1.2, None, 1.3], "ratio_met": [2.0, None, 2.1],
                          "ratio_mat": [1.5, None, 1.6]})
    df = P.figure_training_ratio({"R = 1": curve}, {"R = 1": {(0.3, 0.1): np.array([0.5, 1.5, 2.0])}},
                                 tmp_path / "t.png", tmp_path / "t.csv")
    assert list(df[df["panel"] == "c"]["x"]) == [1, 3]
    with pytest.raises(DataError, match="has no ratio_arccon, ratio_met, ratio_mat, pos_cos: Figure 8 plots"):
        P.figure_training_ratio({"SimCSE": curve[["step", "loss"]]}, {}, tmp_path / "x.png", tmp_path / "x.csv")
    rng = np.random.default_rng(0)
    u = rng.normal(size=(12, 8))
    st = P.heldout_statistics([(u, u + 0.1 * rng.normal(size=u.shape))])
    P.figure_heldout({"model": st}, tmp_path / "h.png", tmp_path / "h.csv")
    for name in ("gd", "w", "r", "s", "t", "h"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000 and (tmp_path / f"{name}.csv").is_file()


def test_dropout_pairs_are_two_views_of_the_same_sentences(tiny_encoder):
    from cselab.reporting.figures.paradigm import dropout_pairs

    tiny_encoder.eval()
    pairs = list(dropout_pairs(tiny_encoder, ["a man plays .", "a dog runs .", "it rains .", "x"], batch_size=3))
    assert [p[0].shape[0] for p in pairs] == [3]  # a last batch of one sentence has no negative: dropped
    u, v = pairs[0]
    assert not np.allclose(u, v) and not tiny_encoder.training  # dropout on, then the mode restored
    again = list(dropout_pairs(tiny_encoder, ["a man plays .", "a dog runs .", "it rains ."]))[0]
    np.testing.assert_array_equal(again[0], u)  # seeded: a rebuilt figure is the same figure
    other = list(dropout_pairs(tiny_encoder, ["a man plays .", "a dog runs .", "it rains ."], seed=1))[0]
    assert not np.allclose(other[0], u)


def test_gd_default_is_on_for_the_paradigm_loss_only():
    assert Paradigm.check_options({}).gd is True
    assert Paradigm.check_options({"loss": "mhe"}).gd is False
    assert Paradigm.check_options({"loss": "paradigm", "gd": False}).gd is False
    assert Paradigm.check_options({"loss": "arccon"}).gd is False
