"""What a verdict means to a reader: n-gram baselines, the scale line, compute-equivalent multipliers and decision
accuracy along a ladder, each against numbers computed by hand."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import BIGTXT_TEST_VOCAB
from test_table import BASE, write_run

from mbexp import ngram
from mbexp.analysis import equivalent, outputs, readme, regime, render, table
from mbexp.analysis.ladder import decision
from mbexp.data import main as data_main

# train 0 1 0 1 2 (vocab 3): unigram counts 2, 2, 1; bigrams (0,1)×2 (1,0) (1,2); contexts c(0) = c(1) = 2, c(2) = 0;
# trigrams (0,1,0) (1,0,1) (0,1,2); trigram contexts (0,1)×2 (1,0)
TRAIN = np.array([0, 1, 0, 1, 2], dtype=np.uint16)
# scored: tokens[2:] of 0 1 2 2: the first 2 after (0, 1), the second after (1, 2), a context never seen
HELD = np.array([0, 1, 2, 2], dtype=np.uint16)


def test_components_are_the_hand_computed_probabilities():
    parts = ngram.components(ngram.count(TRAIN, 3), HELD)
    unigram = (1 + 1) / (5 + 3)  # add-one: (c + 1) / (N + V)
    assert parts[0] == pytest.approx([unigram, unigram])
    assert parts[1] == pytest.approx([1 / 2, unigram])  # c(1,2) / c(1); then c(2) = 0: the unigram's
    assert parts[2] == pytest.approx([1 / 2, unigram])  # c(0,1,2) / c(0,1); then (1,2) never a context


def test_nats_are_the_mean_negative_log_of_the_mixture():
    parts = ngram.components(ngram.count(TRAIN, 3), HELD)
    assert ngram.nats(parts, (1.0,)) == pytest.approx(math.log(4))
    assert ngram.nats(parts, (0.5, 0.5)) == pytest.approx(-(math.log(0.375) + math.log(0.25)) / 2)


def test_the_grid_sums_to_one_and_keeps_unigram_mass():
    assert ngram.grid(2, 0.5) == [(1.0, 0.0), (0.5, 0.5)]
    assert sorted(ngram.grid(3, 0.5)) == sorted([(1.0, 0.0, 0.0), (0.5, 0.0, 0.5), (0.5, 0.5, 0.0)])
    full = ngram.grid(3)
    assert len(full) == 210 and all(math.isclose(sum(w), 1) and w[0] >= ngram.STEP - 1e-12 for w in full)


def test_weights_are_chosen_on_validation():
    parts = ngram.components(ngram.count(TRAIN, 3), HELD)
    assert ngram.best_weights(parts, 2, 0.5) == (0.5, 0.5)  # 1.20 nats against ln 4 = 1.39 for the unigram alone
    found = ngram.baselines(TRAIN, HELD, HELD, 3, step=0.5)
    assert found.weights["bigram"] == [0.5, 0.5] and found.test["unigram"] == pytest.approx(math.log(4))
    assert found.val == found.test and found.tokens == {"val": 2, "test": 2}


def tiny_cache(tmp_path):
    return SimpleNamespace(path=tmp_path, meta={"files": {"train.bin": {"digest": "a"}}}, train=TRAIN, val=HELD,
                           test=HELD, vocab_size=3)


def test_the_cache_file_is_reused_and_a_damaged_one_recomputed(tmp_path):
    data = tiny_cache(tmp_path)
    first = ngram.cached(data)
    path = tmp_path / ngram.NGRAM_FILE
    stored = json.loads(path.read_text())
    stored["baselines"]["test"]["unigram"] = 99.0  # a stored number is read back, not recomputed
    path.write_text(json.dumps(stored))
    assert ngram.cached(data).test["unigram"] == 99.0
    path.write_text('{"key": ')  # damaged
    assert ngram.cached(data) == first and json.loads(path.read_text())["baselines"]["test"] == first.test
    data.meta = {"files": {"train.bin": {"digest": "b"}}}  # another cache's tokens: stale
    path.write_text(json.dumps(stored))
    assert ngram.cached(data) == first


def test_regime_text_states_the_numbers_or_why_not():
    found = ngram.Baselines({"unigram": 6.7, "bigram": 4.68, "trigram": 4.31},
                            {"unigram": 6.71, "bigram": 4.67, "trigram": 4.28},
                            {"unigram": [1.0], "bigram": [0.1, 0.9], "trigram": [0.1, 0.5, 0.4]}, {})
    text = regime.regime_text(found, corpus="bigtxt", vocab=4096, split="test")
    assert "unigram 6.71" in text and "bigram 4.67 (λ 0.1/0.9)" in text and "trigram 4.28 (λ 0.1/0.5/0.4" in text
    assert "trigram 4.31" in regime.regime_text(found, corpus="bigtxt", vocab=4096, split="validation")
    missing = regime.regime_text("token cache x not built here", corpus="bigtxt", vocab=4096, split="test")
    assert missing == "n-gram baselines (bigtxt, vocab 4,096): not available: token cache x not built here."


def test_scale_line_gives_ranges_and_tokens_per_parameter():
    rows = pd.DataFrame({"params_non_embedding": [98_624, 1_537_760], "tokens_seen": [1_228_800, 1_228_800]})
    assert regime.scale_line(rows, "bigtxt") == ("99k–1.54M non-emb. params, 1.23M tokens seen, 0.8–12 tokens/param, "
                                                 "corpus bigtxt")
    one = pd.DataFrame({"params_non_embedding": [800_000], "tokens_seen": [1_600_000]})
    assert regime.scale_line(one, "bigtxt") == "800k non-emb. params, 1.60M tokens seen, 2 tokens/param, corpus bigtxt"
    # the README names the units once and keeps the numbers in the same order
    assert readme._brief(regime.scale_line(rows, "bigtxt")) == "99k–1.54M · 1.23M · 0.8–12 · bigtxt"
    assert readme._brief("corpus bigtxt") == "corpus bigtxt"


# a baseline whose loss is 5 - 0.5 ln C: log C 2 and 4 give 4 and 3
LOG_C, LOSSES = [2.0, 4.0], [4.0, 3.0]


@pytest.mark.parametrize("target, log_c, side", [(3.5, 3.0, equivalent.WITHIN), (2.5, 5.0, equivalent.ABOVE),
                                                 (4.5, 1.0, equivalent.BELOW), (3.0, 4.0, equivalent.WITHIN)])
def test_needed_compute_follows_a_loss_linear_in_log_compute(target, log_c, side):
    assert equivalent.needed_log_compute(LOG_C, LOSSES, target) == (pytest.approx(log_c), side)


def test_needed_compute_interpolates_the_segment_it_falls_in_and_refuses_a_flat_one():
    assert equivalent.needed_log_compute([0, 1, 2], [5.0, 4.0, 3.8], 3.9)[0] == pytest.approx(1.5)
    assert math.isnan(equivalent.needed_log_compute([0, 1], [4.0, 4.0], 3.5)[0])
    assert math.isnan(equivalent.needed_log_compute([0, 1], [4.0, 4.2], 3.5)[0])  # a rising baseline: undefined


def test_the_bootstraps_draws_at_once_are_the_one_draw_multipliers_bit_for_bit():
    """Every draw's needed compute, computed for all draws at once, is needed_log_compute's to the last bit:
    inside a segment, past either end, on a flat segment and on a rising baseline (NaN)."""
    rng = np.random.default_rng(5)
    log_c = np.log([1e12, 2e12, 4e12, 8e12])
    for slope in (0.2, 0.05, 0.0, -0.1):
        losses = 4.0 - slope * (log_c - log_c[0]) + rng.normal(0, 0.02, (300, 4))
        losses[::7, 1] = losses[::7, 2]  # a flat segment
        targets = losses.mean() + rng.normal(0, 0.15, 300)
        one = [equivalent.needed_log_compute(log_c, row, t)[0] for row, t in zip(losses, targets)]
        assert np.array_equal(equivalent._needed_log_computes(log_c, losses, targets), one, equal_nan=True)
        assert np.isfinite(one).any() if slope > 0 else np.isnan(one).any()  # both kinds of draw are met


def test_multiplier_is_the_compute_ratio():
    compute = [math.exp(4.0), math.exp(2.0)]  # in any order
    assert equivalent.multiplier(compute, [3.0, 4.0], 3.5, math.exp(4.0)) == (pytest.approx(math.exp(-1)), "")
    assert equivalent.multiplier(compute, [3.0, 4.0], 2.5, math.exp(4.0)) == (pytest.approx(math.e), "above")


def test_a_shift_shared_by_every_seed_leaves_the_interval_on_the_point():
    base = pd.DataFrame({100: [5.0, 5.1, 5.3], 400: [4.0, 4.1, 4.3]}, index=[0, 1, 2])
    variant = pd.Series([4.5, 4.6, 4.8], index=[0, 1, 2])
    found = equivalent.row_multiplier(base, [100.0, 400.0], variant, 400.0)
    assert found["ceq"] == pytest.approx(0.5) and (found["ceq_low"], found["ceq_high"]) == pytest.approx((0.5, 0.5))
    assert found["ceq_extrapolated"] == "" and found["ceq_n"] == 3


def test_the_table_column_says_where_it_extrapolates(tmp_path):
    for seed in range(3):
        d = 0.01 * seed
        for steps, loss in [(100, 5.0), (400, 4.0)]:  # loss linear in ln(steps): 1 nat per ln 4
            write_run(tmp_path, BASE, seed=seed, steps=steps, test=loss + d)
            write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, steps=steps, test=loss + 0.5 + d)
            write_run(tmp_path, "layer-pre-geglu-matched", seed=seed, steps=steps, test=loss - 0.5 + d)
    t = table.build_tables(tmp_path)["quick"]
    equivalent.add(t)
    rows = t.rows.set_index("label")
    assert rows.loc["layer-pre-swiglu-matched", "ceq"] == pytest.approx(0.5)  # the baseline's loss at 200 steps
    assert rows.loc["layer-pre-geglu-matched", "ceq"] == pytest.approx(2.0)  # at 800: beyond its budgets
    shown = render.display(t).set_index("variant")["compute-eq. (95% CI)"]
    assert shown["layer-pre-swiglu-matched"] == "0.50× [0.50, 0.50]" and shown[BASE] == "—"
    assert shown["layer-pre-geglu-matched"] == ">1.00× (extrap. 2.00× [2.00, 2.00])"
    assert "ceq_extrapolated" in render.to_csv(t).splitlines()[0]


def test_one_budget_has_no_multiplier(tmp_path):
    for seed in range(2):
        write_run(tmp_path, BASE, seed=seed)
        write_run(tmp_path, "layer-pre-swiglu-matched", seed=seed, final=4.9)
    t = table.build_tables(tmp_path)["quick"]
    equivalent.add(t)
    assert "ceq" not in t.rows and "compute-eq." not in render.to_markdown(t)


def test_agreement_counts_pairs_ranked_alike():
    assert decision.agreement(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == (3, 3)
    assert decision.agreement(np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0])) == (0, 3)
    assert decision.agreement(np.array([2.0, 1.0, 3.0]), np.array([1.0, 2.0, 3.0])) == (2, 3)


def ladder_points(means: dict, seeds=(0, 1, 2), noise=None) -> pd.DataFrame:
    """A ladder's points: means[size] = loss per variant a, b, c; every seed the same unless `noise`."""
    params = {"s1": 1e5, "s2": 1e6, "s3": 1e7}
    rows = []
    for size, losses in means.items():
        for variant, loss in zip("abc", losses):
            per_seed = [loss + (noise(size, variant, s) if noise else 0.0) for s in seeds]
            rows.append({"variant": variant, "size": size, "params_non_embedding": params[size], "steps": 300,
                         "losses": pd.Series(per_seed, index=list(seeds))})
    return pd.DataFrame(rows)


def test_decision_accuracy_against_the_largest_rung():
    # s3 ranks a < b < c; s1 swaps b and c (2 of 3 pairs alike); s2 reverses all (0 of 3)
    found = decision.frame(ladder_points({"s1": [1.0, 3.0, 2.0], "s2": [3.0, 2.0, 1.0], "s3": [1.0, 2.0, 3.0]}))
    assert found["size"].tolist() == ["s1", "s2"] and found["reference"].tolist() == ["s3", "s3"]
    assert found["pairs_same"].tolist() == [2, 0] and found["accuracy"].tolist() == pytest.approx([2 / 3, 0])
    assert found[["low", "high"]].to_numpy().ravel() == pytest.approx([2 / 3, 2 / 3, 0, 0])  # no seed noise


def test_decision_interval_spans_a_pair_the_seeds_split():
    # b and c are 0.01 apart at s1, one seed in three reversing them: the order is in doubt
    flip = {0: 0.0, 1: 0.0, 2: 0.1}
    points = ladder_points({"s1": [1.0, 2.0, 2.01], "s3": [1.0, 2.0, 3.0]},
                           noise=lambda size, v, s: -flip[s] if (size, v) == ("s1", "c") else 0.0)
    found = decision.frame(points).iloc[0]
    assert found["accuracy"] == pytest.approx(2 / 3) and found["low"] == pytest.approx(2 / 3)
    assert found["high"] == pytest.approx(1.0)


def test_decision_needs_two_seeds_for_an_interval():
    found = decision.frame(ladder_points({"s1": [1.0, 2.0, 3.0], "s3": [1.0, 2.0, 3.0]}, seeds=(0,)))
    assert found["accuracy"].tolist() == [1.0] and found["low"].isna().all()
    assert "| 300 | s1 | 100,000 | s3 | 3 of 3 | 1.00 | 1 |" in decision.to_markdown("x", found)


def test_a_caption_finds_its_corpus_cache_from_the_runs_identity(bigtxt_tokens, tmp_path, capsys):
    for seed in range(2):
        write_run(tmp_path, BASE, seed=seed, extra={"data.name": "bigtxt", "data.vocab_size": BIGTXT_TEST_VOCAB})
    tables = table.build_tables(tmp_path)
    regime.annotate(tables, tmp_path, cache_dir=str(bigtxt_tokens.path.parent))
    found = ngram.cached(bigtxt_tokens)
    assert f"unigram {found.test['unigram']:.2f} (add-one)" in render.caption(tables["quick"])
    assert "vocab 512, test split" in tables["quick"].regime and "corpus bigtxt." in tables["quick"].regime
    assert found.test["trigram"] < found.test["bigram"] < found.test["unigram"]
    kept = tables["quick"].regime
    regime.annotate(tables, tmp_path, cache_dir=str(tmp_path / "elsewhere"))  # no cache: the kept baselines
    assert tables["quick"].regime == kept and len(list((tmp_path / "baselines").glob("bigtxt-*.json"))) == 1
    regime.annotate(tables, tmp_path / "fresh", cache_dir=str(tmp_path / "elsewhere"))  # neither
    assert "not available: token cache" in tables["quick"].regime
    assert data_main([f"data.vocab_size={BIGTXT_TEST_VOCAB}", f"data.cache_dir={bigtxt_tokens.path.parent}"]) == 0
    assert f"n-gram test   {found.text('test')} nats/token" in capsys.readouterr().out


def test_a_ladder_writes_its_decision_table_and_figure(tmp_path):
    losses = {"ladder64": {"relu": 5.0, "geglu": 5.2, "swiglu": 5.1}, "ladder96": {"relu": 4.8, "geglu": 4.6,
                                                                                 "swiglu": 4.7}}
    for size, by_ffn in losses.items():
        for ffn, loss in by_ffn.items():
            for seed in range(2):
                write_run(tmp_path, f"layer-pre-{ffn}-matched", seed=seed, test=loss + 0.01 * seed,
                          extra={"model.name": size}, params_non_embedding=10**5 if size == "ladder64" else 10**6)
    t = table.build_tables(tmp_path)["quick"]
    paths = outputs.write_decision(tmp_path, t)
    assert [p.name for p in paths] == ["quick_decision.md", "quick_decision.csv", "quick_decision.png"]
    assert "| 300 | ladder64 | 100,000 | ladder96 | 0 of 3 | 0.00 [0.00, 0.00] | 2 |" in paths[0].read_text()
    single = tmp_path / "single"
    write_run(single, BASE, seed=0)
    assert outputs.write_decision(single, table.build_tables(single)["quick"]) == []  # no ladder


def test_a_ladder_output_the_runs_no_longer_give_is_removed_and_no_other_experiments(tmp_path):
    """A pass that writes no decision table (the runs no longer make a ladder) leaves none from an earlier pass;
    another experiment whose name extends this one's keeps its files."""
    write_run(tmp_path, BASE, seed=0)
    stale = [tmp_path / "tables" / f"quick{s}" for s in ("_decision.md", "_decision.csv", "_fit.md", "_fit.csv")]
    stale += [tmp_path / "figures" / f"quick{s}" for s in ("_decision.png", "_ladder.png")]
    other = [tmp_path / "tables" / "quick_scan_decision.md", tmp_path / "figures" / "quick_scan_ladder.png"]
    for path in stale + other:
        path.parent.mkdir(exist_ok=True)
        path.write_text("from an earlier pass")
    written = outputs.write_outputs(tmp_path, table.build_tables(tmp_path))
    assert not any(p.exists() for p in stale)
    assert all(p.read_text() == "from an earlier pass" for p in other)
    assert all(p.is_file() for p in written["quick"])
