"""Mutation check: apply each declared single-line break of the core to a copy of the repository, run the tests
that should catch it there (golden tests never among them), and print caught / missed and a score.

    python scripts/mutants.py                 # every mutant (make mutants)
    python scripts/mutants.py --only force,slow_k --keep
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERRUPTED = 130  # the exit code of a stopped command, as mbexp.INTERRUPTED (the copy need not import mbexp)
# golden tests compare with committed outputs: stability, not correctness
FAST_NOT_GOLDEN = "not slow and not golden"
COPY_IGNORE = (".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "wandb", "data_cache", "*.egg-info",
               "wheelhouse", "mutants")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple  # pytest node ids or files


T = "tests/"
LR = T + "test_train.py::test_every_logged_lr_follows_the_schedule_with_its_warmup_and_floor"
TABLE = (T + "test_table_rules.py", T + "test_table.py")
CLAIMS = (T + "test_claim_rules.py", T + "test_claims.py")
SCALING = (T + "test_scaling_rules.py", T + "test_scaling.py")
REGIME = T + "test_regime.py"
MUP = (T + "test_mup.py::test_coordinates_stay_flat_in_width_under_mup_and_grow_under_sp",
       T + "test_mup.py::test_every_init_std_and_effective_lr_is_the_mup_packages")
MUTANTS = [
    # rules a golden test alone would catch: each has a test of its own
    Mutant("force_ignored", "mbexp/run/state.py", "summary = None if force else finished_summary(directory, chash)",
           "summary = finished_summary(directory, chash)",
           (T + "test_resume.py::test_force_reruns_a_finished_run",)),
    Mutant("constant_lr", "mbexp/schedule.py",
           "warmup_steps=optim.warmup_steps, total_steps=total_steps, schedule=optim.schedule,",
           'warmup_steps=0, total_steps=total_steps, schedule="constant",', (LR,)),
    Mutant("min_lr_ratio_0", "mbexp/schedule.py", "min_lr_ratio=optim.min_lr_ratio,", "min_lr_ratio=0.0,", (LR,)),
    Mutant("no_warmup", "mbexp/schedule.py", "lr=optim.lr, warmup_steps=optim.warmup_steps,",
           "lr=optim.lr, warmup_steps=0,", (LR,)),
    Mutant("agrees_if_any_supports", "mbexp/claims/rules.py", "return AGREES if all(o == SUPPORTS",
           "return AGREES if any(o == SUPPORTS", CLAIMS),
    Mutant("planned_verdict_on_all_seeds", "mbexp/claims/family.py",
           "comparisons = family(statistic, claim, table, value, seeds=planned)",
           "comparisons = family(statistic, claim, table, value)", CLAIMS),
    Mutant("tost_not_holm", "mbexp/analysis/table.py", 'delta["tost_p_holm"] = stats.holm(delta["tost_p"])',
           'delta["tost_p_holm"] = delta["tost_p"]', TABLE),
    Mutant("ci90_at_95", "mbexp/analysis/table.py", "narrow = stats.compare(losses, base_losses, level=stats.LEVEL90)",
           "narrow = stats.compare(losses, base_losses, level=stats.LEVEL)", TABLE),
    Mutant("bootstrap_draws_a_seed_not_a_mean", "mbexp/analysis/ladder/draws.py",
           "s.std(ddof=1) / math.sqrt(n) * t", "s.std(ddof=1) * t", (T + "test_scaling_rules.py", T + "test_trend.py")),
    Mutant("slow_k_10", "mbexp/analysis/stats.py", "SLOW_K = 5.0", "SLOW_K = 10.0",
           (T + "test_claims.py::test_slow_start_rule", T + "test_stats.py")),
    Mutant("rmsnorm_without_eps", "mbexp/model/norms.py", "xf.pow(2).mean(-1, keepdim=True) + self.eps)",
           "xf.pow(2).mean(-1, keepdim=True))", (T + "test_norms.py",)),
    # statistics
    Mutant("holm_is_bonferroni", "mbexp/analysis/stats.py", 'multipletests(p[keep], method="holm")',
           'multipletests(p[keep], method="bonferroni")',
           (T + "test_stats.py",)),
    Mutant("holm_is_bh", "mbexp/analysis/stats.py", 'multipletests(p[keep], method="holm")',
           'multipletests(p[keep], method="fdr_bh")', (T + "test_stats.py",)),
    Mutant("welch_df", "mbexp/analysis/stats.py", "vb**2 / (len(b) - 1))", "vb**2 / len(b))", (T + "test_stats.py",)),
    Mutant("paired_ddof_0", "mbexp/analysis/stats.py", "diff.var(ddof=1)", "diff.var(ddof=0)", (T + "test_stats.py",)),
    Mutant("tost_one_side", "mbexp/analysis/stats.py", "ttost_mean(-margin, margin)[0]",
           "ttost_mean(-margin, margin)[1][1]", (T + "test_stats.py",)),
    Mutant("mark_sign", "mbexp/analysis/stats.py", "BETTER if delta < 0 else WORSE", "BETTER if delta > 0 else WORSE",
           (T + "test_stats.py",)),
    Mutant("ties_choose_last", "mbexp/analysis/stats.py", "return min(finite, key=finite.get)",
           "return min(reversed(finite), key=finite.get)", (T + "test_stats.py", T + "test_table_rules.py")),
    Mutant("slow_start_raw_mad", "mbexp/analysis/stats.py", "spread = MAD_SCALE * (others - centre)",
           "spread = (others - centre)", (T + "test_claims.py::test_slow_start_rule",)),
    Mutant("tokens_per_s_mean", "mbexp/analysis/table.py", 'done["tokens_per_s_median"].median()',
           'done["tokens_per_s_median"].mean()', (T + "test_table_rules.py",)),
    # schedule
    Mutant("warmup_off_by_one", "mbexp/schedule.py", "return lr * (step + 1) / warmup_steps",
           "return lr * step / warmup_steps", (T + "test_rules.py",)),
    Mutant("decay_misses_floor", "mbexp/schedule.py", "max(1, total_steps - 1 - warmup_steps)",
           "max(1, total_steps - warmup_steps)", (T + "test_rules.py",)),
    # identity and resume
    Mutant("seed_in_identity", "mbexp/run/identity.py", 'NOT_IDENTITY = ("seed", "name",', 'NOT_IDENTITY = ("name",',
           (T + "test_rules.py",)),
    Mutant("added_later_always_dropped", "mbexp/run/migrate.py", "if key not in without and values.get(key) == old:",
           "if key not in without:", (T + "test_rules.py",)),
    Mutant("resume_ignores_checkpoint", "mbexp/trainer.py",
           "state = None if cfg.force else checkpoint.load(directory, config_hash=chash)", "state = None",
           (T + "test_resume.py::test_damaged_checkpoint_falls_back_or_restarts",)),
    # norms and the width rule
    Mutant("layernorm_without_eps", "mbexp/model/norms.py", "self.weight, self.bias, self.eps)",
           "self.weight, self.bias, 0.0)", (T + "test_norms.py",)),
    Mutant("norm_eps_not_passed", "mbexp/model/decoder.py", "build_norm(self.norm, dim, eps=self.norm_eps,",
           "build_norm(self.norm, dim, eps=1e-5,", (T + "test_norms.py",)),
    Mutant("two_matrix_width_3d", "mbexp/model/ffn.py", "if gated_width else 4 * d_model",
           "if gated_width else 3 * d_model", (T + "test_ffn.py",)),
    Mutant("width_rounds_to_nearest", "mbexp/model/ffn.py", "multiple_of * math.ceil(d_ff / multiple_of)",
           "multiple_of * round(d_ff / multiple_of)", (T + "test_ffn.py",)),
    # ladders
    Mutant("crossover_sign", "mbexp/analysis/ladder/powerlaw.py", "/ (curve.alpha - base.alpha)",
           "/ (base.alpha - curve.alpha)", SCALING),
    Mutant("polish_noise_floor_ignored", "mbexp/analysis/ladder/powerlaw.py",
           "if size <= 1e-16 or NOISE_FLOOR >= size > last / 2:", "if size <= 1e-16:", SCALING),
    Mutant("early_refit_skipped", "mbexp/analysis/ladder/powerlaw.py",
           "early = solve([start], (low, high), EARLY_EVALUATIONS)", "early = None", SCALING),
    Mutant("trend_ratio_inverted", "mbexp/analysis/ladder/draws.py", "ratio = (m[last] / m[first],",
           "ratio = (m[first] / m[last],", (T + "test_scaling_rules.py",)),
    Mutant("reused_scan_not_inherited", "mbexp/study/spec.py", "return {**spec, **{k: source[k] for k in SCANNED",
           "return {**source, **spec, **{k: spec[k] for k in SCANNED", (T + "test_study.py",)),
    Mutant("trend_slow_starts_dropped", "mbexp/claims/ladder.py",
           "c.slow = {label: s for (v, _), (label, s) in cells.items() if v in (c.row, c.baseline) and s}",
           "c.slow = {}",
           (T + "test_ladder_rules.py",)),
    Mutant("lr_edge_ignored", "mbexp/claims/rules.py",
           "return {label: edge[label] for label in labels if isinstance(edge.get(label), str) and edge[label]}",
           "return {}", (T + "test_ladder_rules.py",)),
    Mutant("cooldown_key_without_wsd", "mbexp/config/rules.py", 'if o.schedule != "wsd" and getattr(o, key)',
           'if o.schedule == "none" and getattr(o, key)',
           (T + "test_config.py::test_bad_input_names_the_key_and_choices",)),
    Mutant("reused_scan_counted_again", "mbexp/study/spec.py", "return () if self.scan_of else self.scan_seeds",
           "return self.scan_seeds", (T + "test_study.py",)),
    Mutant("zero_spread_p_1", "mbexp/analysis/stats.py", "0.0, df, 1.0 if delta == 0 else 0.0, method",
           "0.0, df, 1.0, method", (T + "test_stats.py",)),
    Mutant("pooled_tost", "mbexp/analysis/stats.py", 'usevar="unequal"', 'usevar="pooled"', (T + "test_stats.py",)),
    Mutant("tost_at_alpha", "mbexp/analysis/stats.py", "if tost_adjusted < alpha:", "if tost_adjusted <= alpha:",
           (T + "test_stats.py",)),
    Mutant("trend_either_test", "mbexp/analysis/ladder/trend.py", "p < alpha and p_perm < alpha",
           "p < alpha or p_perm < alpha", (T + "test_trend.py",)),
    Mutant("cooldown_half_to_even", "mbexp/schedule.py", "math.floor(cooldown_fraction * total_steps + 0.5)",
           "round(cooldown_fraction * total_steps)", (T + "test_wsd.py::test_a_cool_down_of_half_a_step_rounds_up",)),
    Mutant("legacy_value_wins", "mbexp/run/migrate.py", "return ADDED_LATER | identity",
           "return identity | ADDED_LATER", (T + "test_migrate.py",)),
    Mutant("one_epoch_past", "mbexp/claims/rules.py", "epochs <= claim.max_epochs", "epochs < claim.max_epochs",
           (T + "test_declarations.py::test_exactly_the_declared_epochs_meets_the_condition",)),
    Mutant("residual_init_unscaled", "mbexp/model/decoder.py", "std=0.02 / math.sqrt(2 * spec.n_layers)",
           "std=0.02 / math.sqrt(spec.n_layers)",
           (T + "test_model.py::test_residual_projections_start_scaled_by_the_depth",)),
    Mutant("finished_any_config", "mbexp/run/state.py", 'in FINISHED and summary.get("config_hash") == chash',
           "in FINISHED", (T + "test_resume.py::test_a_finished_summary_of_another_config_is_not_this_runs",)),
    Mutant("eps_zero_allowed", "mbexp/config/rules.py", '_above("norm.eps", cfg.norm.eps, 0)',
           '_at_least("norm.eps", cfg.norm.eps, 0)', (T + "test_config.py::test_bad_input_names_the_key_and_choices",)),
    Mutant("naive_grid_without_scan", "mbexp/analysis/studies.py", "len(set(scan_seeds) | set(study.seeds))",
           "len(study.seeds)", (T + "test_study.py::test_a_study_reusing_a_scan_inherits_it_and_its_claims_digest_"
                                "follows_it",)),
    Mutant("conditions_by_exact_column", "mbexp/claims/parse.py",
           "return all(named.get(key, value) == value for key, value in at)", "return at == other",
           (T + "test_declarations.py::test_a_bad_claims_file_is_one_line_naming_the_file_and_the_claim",)),
    Mutant("digest_seed_order", "mbexp/claims/parse.py", '"seeds": sorted(seeds)', '"seeds": seeds',
           (T + "test_declarations.py::test_a_claims_digest_does_not_depend_on_the_order_of_its_seeds",)),
    Mutant("some_runs_declared", "mbexp/claims/provenance.py", "if len(read) and launched == len(read):",
           "if len(read) and launched > 0:",
           (T + "test_declarations.py::test_the_provenance_rule_names_why_a_run_does_not_count",)),
    Mutant("test_split_if_any", "mbexp/analysis/table.py", 'completed["final_test_loss"].notna().all()',
           'completed["final_test_loss"].notna().any()',
           (T + "test_table_inputs.py::test_a_table_mixing_runs_with_and_without_a_test_split_reports_validation",)),
    Mutant("beyond_not_holm", "mbexp/claims/family.py",
           "far = stats.holm([stats.beyond_margin(c.interval, claim.margin) for c in out], looks)",
           "far = [stats.beyond_margin(c.interval, claim.margin) for c in out]", (T + "test_claim_rules.py",)),
    Mutant("tokens_per_s_all_steps", "mbexp/run/state.py", "round(self.timed_steps * per_step / self.train_time",
           "round(self.step * per_step / self.train_time",
           (T + "test_declarations.py::test_tokens_per_s_counts_the_timed_steps_only",)),
    Mutant("decay_on_norms_and_biases", "mbexp/optim.py", '"weight_decay": 0.0, "lr_scale": lr_scale}',
           '"weight_decay": optim.weight_decay, "lr_scale": lr_scale}',
           (T + "test_train.py::test_weight_decay_falls_on_matrices_and_embeddings_never_on_norm_gains_or_biases",)),
    Mutant("tokenizer_sees_held_out", "mbexp/data.py", 'tok = train_tokenizer(splits["train"],',
           "tok = train_tokenizer(docs,",
           (T + "test_data.py::test_the_tokenizer_learns_from_the_training_split_only",)),
    Mutant("scan_read_at_largest_budget", "mbexp/study/protocol.py",
           "steps = study.select_at if steps is None else steps",
           "steps = study.budgets[-1] if steps is None else steps",
           (T + "test_study.py::test_the_scan_is_read_at_the_selection_budget_not_the_largest",)),
    Mutant("transfer_steps_halved", "mbexp/claims/transfer.py",
           "steps = study.grid.index(mine.value) - study.grid.index(base.value)",
           "steps = (study.grid.index(mine.value) - study.grid.index(base.value)) // 2", (T + "test_transfer.py",)),
    Mutant("transfer_within_two_steps", "mbexp/claims/transfer.py", "within = abs(c.interval.delta) <= WITHIN",
           "within = abs(c.interval.delta) <= WITHIN + 1", (T + "test_transfer.py",)),
    Mutant("transfer_edge_ignored", "mbexp/claims/transfer.py",
           "if edges := [v for v in read_rows if v in choices and choices[v].edge]:",
           "if edges := [v for v in read_rows if v in choices and choices[v].edge and False]:",
           (T + "test_transfer.py",)),
    Mutant("transfer_from_scans_every_row", "mbexp/study/spec.py",
           "[v for v in values if k not in base or str(v) == str(base[k])]", "list(values)",
           (T + "test_transfer_from.py",)),
    Mutant("own_lr_if_any_run", "mbexp/analysis/studies.py",
           "own[label] = bool(c) and len(planned) > 0 and all(", "own[label] = bool(c) and len(planned) > 0 and any(",
           (T + "test_study.py::test_a_row_has_its_own_lr_only_when_every_planned_run_is_at_the_chosen_lr",)),
    Mutant("untested_if_any_untested", "mbexp/claims/rules.py", "if not outcomes or all(o == UNTESTED",
           "if not outcomes or any(o == UNTESTED",
           (T + "test_claim_rules.py::test_a_claim_is_not_tested_only_when_none_of_its_comparisons_could_be",)),
    Mutant("zero_spread_tost_signed", "mbexp/analysis/stats.py", "return 0.0 if abs(interval.delta) < margin else 1.0",
           "return 0.0 if interval.delta < margin else 1.0",
           (T + "test_stats.py::test_a_zero_spread_tost_is_decided_by_the_size_of_the_difference_not_its_sign",)),
    Mutant("cooldown_one_step_late", "mbexp/schedule.py", "        if step < start:", "        if step <= start:",
           (T + "test_wsd.py::test_the_cool_down_decays_from_its_first_step",)),
    Mutant("cooldown_at_warmup_end_refused", "mbexp/schedule.py", "if start < o.warmup_steps or start == steps:",
           "if start <= o.warmup_steps or start == steps:",
           (T + "test_wsd.py::test_a_cool_down_may_start_right_after_the_warm_up_not_inside_it",)),
    Mutant("checkpoint_of_any_config", "mbexp/run/checkpoint.py",
           'state.get("config_hash") != config_hash or "step" not in state', '"step" not in state',
           (T + "test_resume.py::test_a_checkpoint_of_another_config_is_never_resumed",)),
    Mutant("bpb_in_nats", "mbexp/trainer.py", "nll / math.log(2) / max(nbytes, 1)", "nll / max(nbytes, 1)",
           (T + "test_train.py::test_bits_per_byte_is_the_loss_in_bits_over_the_bytes_the_tokens_stand_for",)),
    Mutant("test_split_never_needed", "mbexp/corpus_check.py", 'if s != "test" or test_fraction]', 'if s != "test"]',
           (T + "test_data.py::test_a_test_fraction_needs_a_test_document",)),
    Mutant("lr_grid_unsorted", "mbexp/study/spec.py", "tuple(sorted(float(v) if tuned == LR else v for v in grid))",
           "tuple(float(v) if tuned == LR else v for v in grid)",
           (T + "test_study.py::test_an_unsorted_lr_grid_is_read_sorted_and_its_edges_are_its_ends",)),
    # μP: each rule removed
    Mutant("mup_readout_unscaled", "mbexp/model/mup.py",
           'return spec.d_model / spec.base_d_model if spec.param == "mup" else 1.0', "return 1.0", MUP),
    Mutant("mup_hidden_lr_unscaled", "mbexp/model/mup.py", '"lr_scale": 1.0 / m,', '"lr_scale": 1.0,', MUP),
    Mutant("mup_attention_sqrt", "mbexp/model/mup.py",
           'return 1.0 / (spec.d_model // spec.n_heads) if spec.param == "mup" else None', "return None", MUP),
    Mutant("mup_init_unscaled", "mbexp/model/mup.py", "params[name].mul_(m ** -0.5)", "params[name].mul_(1.0)", MUP),
    Mutant("mup_decay_unscaled", "mbexp/model/mup.py", '"weight_decay": group["weight_decay"] * m}',
           '"weight_decay": group["weight_decay"]}', MUP[1:]),
    # the axes of the decoder block's ablations: the FFN, the optimiser, the z-loss, the caps, the init
    Mutant("relu2_not_squared", "mbexp/model/ffn.py", '"relu2": lambda x: F.relu(x).square(),',
           '"relu2": lambda x: F.relu(x),', (T + "test_ffn.py",)),
    Mutant("muon_without_nesterov", "mbexp/optim.py", "momentum=MUON_MOMENTUM, nesterov=True,",
           "momentum=MUON_MOMENTUM, nesterov=False,", (T + "test_optim.py",)),
    Mutant("muon_four_ns_steps", "mbexp/optim.py", "(3.4445, -4.7750, 2.0315), 5", "(3.4445, -4.7750, 2.0315), 4",
           (T + "test_optim.py",)),
    Mutant("muon_takes_the_embedding", "mbexp/optim.py",
           "return [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2]",
           "return [p for p in model.parameters() if p.requires_grad and p.dim() == 2]", (T + "test_optim.py",)),
    Mutant("adamw_lr_ignored", "mbexp/optim.py", "lr_scale=adamw_lr / optim.lr)", "lr_scale=1.0)",
           (T + "test_optim.py",)),
    Mutant("composite_state_not_loaded", "mbexp/optim.py", "            opt.load_state_dict(state[name])",
           "            state[name]", (T + "test_optim.py",)),
    Mutant("z_loss_not_squared", "mbexp/trainer.py", "torch.logsumexp(logits.float(), dim=-1).square().mean()",
           "torch.logsumexp(logits.float(), dim=-1).mean()", (T + "test_optim.py",)),
    Mutant("z_loss_not_trained", "mbexp/trainer.py", "    (loss + z).backward()", "    loss.backward()",
           (T + "test_optim.py",)),
    Mutant("logit_softcap_ignored", "mbexp/model/decoder.py",
           "logits = softcap(logits, self.spec.logit_softcap)", "logits = logits",
           (T + "test_model.py::test_logit_softcap_is_cap_tanh_of_the_logits",)),
    Mutant("attn_softcap_ignored", "mbexp/model/attention.py",
           "scores = softcap(q @ k.transpose(-2, -1) * scale, cap)",
           "scores = q @ k.transpose(-2, -1) * scale", (T + "test_model.py",)),
    Mutant("zero_init_proj_ignored", "mbexp/model/decoder.py", "if spec.zero_init_proj:", "if False:",
           (T + "test_model.py",)),
    Mutant("optimiser_not_in_row_name", "mbexp/run/migrate.py",
           'tags = [values["optim.name"]] if values["optim.name"] != UNTAGGED_OPTIMIZER else []', "tags = []",
           (T + "test_rules.py",)),
    Mutant("zero_softcap_allowed", "mbexp/config/rules.py", '_above(f"model.{key}", getattr(m, key), 0,',
           '_above(f"model.{key}", getattr(m, key), -1,',
           (T + "test_config.py::test_bad_input_names_the_key_and_choices",)),
    # what a verdict means: n-gram baselines, compute-equivalent multipliers, decision accuracy
    Mutant("ngram_add_half", "mbexp/ngram.py", "ADD_K = 1.0", "ADD_K = 0.5", (REGIME,)),
    Mutant("ngram_last_token_a_context", "mbexp/ngram.py", "bigram_ctx=np.bincount(train[:-1].astype(np.int64),",
           "bigram_ctx=np.bincount(train.astype(np.int64),", (REGIME,)),
    Mutant("ceq_extrapolation_unflagged", "mbexp/analysis/equivalent.py",
           "return log_c[i] + (target - losses[i]) / slope, side",
           "return log_c[i] + (target - losses[i]) / slope, WITHIN", (REGIME,)),
    Mutant("ceq_linear_in_compute", "mbexp/analysis/equivalent.py",
           "log_needed, side = needed_log_compute(np.log(np.asarray(compute, dtype=float)[order]),",
           "log_needed, side = needed_log_compute(np.asarray(compute, dtype=float)[order],", (REGIME,)),
    Mutant("ceq_steps_at_the_wrong_budget", "mbexp/analysis/equivalent.py",
           "variant_compute * float(table.columns[0]) / compute[0]",
           "variant_compute * float(table.columns[-1]) / compute[0]",
           (T + "test_claims.py::test_a_claim_at_the_smaller_budget_says_the_baselines_steps_to_match",)),
    Mutant("ceq_read_at_the_reference_budget", "mbexp/claims/family.py",
           "c.ceq = equivalent.pair(table, c.row, c.baseline, value, planned)",
           "c.ceq = equivalent.pair(table, c.row, c.baseline, table.reference, planned)",
           (T + "test_claims.py::test_a_claim_at_the_smaller_budget_says_the_baselines_steps_to_match",)),
    Mutant("decision_against_smallest_rung", "mbexp/analysis/ladder/decision.py",
           "same, n = agreement(means[i], means[-1])", "same, n = agreement(means[i], means[0])", (REGIME,)),
    # the provenance rule, one mark per comparison, study-wide Holm, the scan's noise, whole-split evaluation
    Mutant("provenance_unknown_tree_clean", "mbexp/claims/provenance.py", 'if run.get("git_clean") is not True:',
           'if run.get("git_clean") is False:',
           (T + "test_declarations.py::test_the_provenance_rule_names_why_a_run_does_not_count",)),
    Mutant("provenance_ancestry_unchecked", "mbexp/claims/provenance.py",
           "if not history.descends(commit, declared):", "if False:",
           (T + "test_declarations.py::test_the_provenance_rule_names_why_a_run_does_not_count",)),
    Mutant("provenance_history_unchecked", "mbexp/claims/provenance.py",
           "if not isinstance(commit, str) or not history.known(commit):", "if not isinstance(commit, str):",
           (T + "test_declarations.py::test_the_provenance_rule_names_why_a_run_does_not_count",)),
    Mutant("digest_without_experiment_config", "mbexp/claims/parse.py",
           '"experiment_config": configs(entry["experiment"])}', '"experiment_config": None}',
           (T + "test_declarations.py::test_digest_covers_the_test_not_the_prose",)),
    Mutant("launch_clean_ignores_untracked", "mbexp/run/identity.py",
           'status = _git("status", "--porcelain", "--",', 'status = _git("status", "--porcelain", "-uno", "--",',
           (T + "test_provenance.py",)),
    Mutant("contradicts_inside_the_margin", "mbexp/claims/rules.py",
           "return CONTRADICTS if c.mark in (BETTER, WORSE) and c.beyond_holm < stats.ALPHA else OPEN",
           "return CONTRADICTS if c.mark in (BETTER, WORSE) else OPEN", CLAIMS),
    Mutant("mark_difference_before_margin", "mbexp/analysis/stats.py",
           "    if tost_adjusted < alpha:\n        return EQUIVALENT\n    if p_adjusted < alpha:\n"
           "        return BETTER if delta < 0 else WORSE",
           "    if p_adjusted < alpha:\n        return BETTER if delta < 0 else WORSE\n    if tost_adjusted < alpha:\n"
           "        return EQUIVALENT", CLAIMS),
    Mutant("study_holm_per_claim", "mbexp/claims/evaluate.py", "p = stats.holm([c.interval.p for _, c in members])",
           "p = [c.interval.p for _, c in members]", CLAIMS),
    Mutant("scan_noise_one_mean", "mbexp/analysis/lr_scan.py", "Z95 * sd * math.sqrt(2 / n_seeds)",
           "Z95 * sd * math.sqrt(1 / n_seeds)", (T + "test_lr_scan.py",)),
    # a statistic's declaration, the study's tuned key
    Mutant("sensitivity_inside_the_margin", "mbexp/claims/statistics.py",
           "baseline, spans, beyond_margin = False, True, True", "baseline, spans, beyond_margin = False, True, False",
           (T + "test_claims.py::test_needs_warmup_requires_the_sensitivity_beyond_its_margin_two_sided",)),
    Mutant("scan_tunes_the_lr_always", "mbexp/study/command.py",
           "f\"{study.tune}={','.join(spelled(v) for v in values)}\"",
           "f\"optim.lr={','.join(spelled(v) for v in values)}\"",
           (T + "test_study.py::test_a_study_tunes_the_key_it_declares_and_lr_grid_means_tune_the_lr",)),
    Mutant("full_eval_overlapping_windows", "mbexp/data.py",
           "starts = np.arange((tokens.size - 1) // self.seq_len, dtype=np.int64) * self.seq_len",
           "starts = np.arange((tokens.size - 1) // self.seq_len, dtype=np.int64) * (self.seq_len // 2)",
           (T + "test_train.py::test_full_final_evaluation_scores_every_token_of_both_splits",)),
    Mutant("study_family_ignored", "mbexp/claims/evaluate.py",
           'if members and members[0][0].protocol.get("family") == "study":', 'if False:',
           (T + "test_claim_rules.py::test_a_study_declaring_family_study_reads_its_verdicts_on_the_study_wide_"
            "holm",)),
    # replications by rule: pooled seeds, two looks, the first verdict beside, conditions carried
    Mutant("replication_one_look", "mbexp/analysis/replication.py", "LOOKS = 2  #", "LOOKS = 1  #",
           (T + "test_replication.py::test_pooled_trends_pool_each_sizes_seeds_and_double_both_ps",)),
    Mutant("replication_first_seeds_dropped", "mbexp/analysis/replication.py",
           "deltas = {n: pd.concat([parts[0][n], parts[1][n]]) for n in sizes}",
           "deltas = {n: parts[1][n] for n in sizes}",
           (T + "test_replication.py::test_pooled_trends_pool_each_sizes_seeds_and_double_both_ps",)),
    Mutant("replication_conditions_dropped", "mbexp/analysis/replication.py",
           "NOT_AS_DECLARED if unmet else verdict(comparisons)", "verdict(comparisons)",
           (T + "test_replication.py::test_an_unmet_condition_of_either_claim_holds_for_the_pooled_reading",)),
    Mutant("replication_shown_twice", "mbexp/analysis/readme.py",
           "shown = [r for r in shown if r.claim.id not in repeated]", "shown = list(shown)",
           (T + "test_replication.py::test_the_readme_shows_a_replication_once_pooled_with_the_first_verdict_"
            "beside",)),
    Mutant("replication_overlapping_seeds", "mbexp/claims/parse.py",
           '"plans seeds the first claim planned" if set(first.seeds) & set(c.seeds) else',
           '"plans seeds the first claim planned" if False else',
           (T + "test_replication.py::test_a_replication_must_repeat_an_existing_first_claim_on_new_seeds",)),
]


def pytest_args(tests) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", FAST_NOT_GOLDEN, *tests]


def run_tests(copy: Path, tests, timeout: int) -> tuple[int | None, str]:
    """pytest's exit code (None: timed out) and its output, run in the copy with the copy first on the path; in a
    process group of its own, ended whole (the runs its tests start too) on a time-out or a stop."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    with subprocess.Popen(pytest_args(tests), cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, process_group=0) as pytest:
        try:
            output, _ = pytest.communicate(timeout=timeout)
        except BaseException as exc:  # a time-out, or Ctrl-C / SIGTERM (a KeyboardInterrupt)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pytest.pid, signal.SIGKILL)
            pytest.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                return None, ""
            raise
    return pytest.returncode, output


def first_failure(output: str) -> str:
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return found.group(1) if found else "?"


def check(mutant: Mutant, copy: Path, timeout: int) -> tuple[str, str]:
    """(outcome, detail): caught (the failing test), missed, or error (snippet not found once, no tests ran)."""
    path = copy / mutant.path
    text = path.read_text(encoding="utf-8")
    if text.count(mutant.old) != 1:
        return "error", f"snippet found {text.count(mutant.old)} times in {mutant.path}: {mutant.old!r}"
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
    try:
        code, output = run_tests(copy, mutant.tests, timeout)
    finally:
        path.write_text(text, encoding="utf-8")
        # the mutant's cached byte code is keyed on the source's size and whole-second mtime: it must not outlive it
        shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)
    if code is None:
        return "caught", f"timed out after {timeout} s"
    if code == 0:
        return "missed", ""
    if code in (1, 2):  # tests failed, or collection broke (the mutant does not import)
        return "caught", first_failure(output)
    return "error", f"pytest exited {code} (no tests collected?)\n{output[-800:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the selected tests")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutant's tests (default: 900)")
    parser.add_argument("--min-score", type=float, default=0.9, help="exit 1 below this share caught (default 0.9)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy of the repository")
    args = parser.parse_args(argv)
    mutants = MUTANTS
    if args.only is not None:
        names = [name for name in args.only.split(",") if name]
        if not names:
            print(f"error: --only {args.only!r}: name at least one mutant (comma-separated); see --list",
                  file=sys.stderr)
            return 2
        unknown = sorted(set(names) - {m.name for m in MUTANTS})
        if unknown:
            print(f"error: --only {', '.join(unknown)}: no such mutant; see --list", file=sys.stderr)
            return 2
        mutants = [m for m in MUTANTS if m.name in names]
    if args.list:
        for m in mutants:
            print(f"{m.name:32} {m.path}: {m.old!r} -> {m.new!r}")
        return 0
    # Ctrl-C stops the check even when the parent started it with SIGINT ignored (Python then keeps it ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    tmp = Path(tempfile.mkdtemp(prefix="mbexp-mutants-"))
    copy = tmp / "repo"
    try:
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*COPY_IGNORE), symlinks=True)
        return _run(mutants, copy, args)
    except KeyboardInterrupt:
        kept = f"kept at {copy}" if args.keep else "removed"
        print(f"interrupted: the mutation check stopped; its copy of the repository is {kept}", file=sys.stderr)
        return INTERRUPTED
    finally:
        for stop in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not leave half a copy behind
            signal.signal(stop, signal.SIG_IGN)
        if args.keep:
            print(f"copy kept at {copy}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _terminated(signum, frame):
    """SIGTERM stops the check as Ctrl-C does: its tests ended, its copy removed."""
    raise KeyboardInterrupt


def _run(mutants: list[Mutant], copy: Path, args) -> int:
    if not args.no_baseline:
        tests = list(dict.fromkeys(t for m in mutants for t in m.tests))
        code, output = run_tests(copy, tests, args.timeout * 2)
        if code != 0:
            print(f"error: the selected tests fail without any mutant ({first_failure(output or '')}); fix them first",
                  file=sys.stderr)
            return 2
    counts = {"caught": 0, "missed": 0, "error": 0}
    for m in mutants:
        started = time.monotonic()
        outcome, detail = check(m, copy, args.timeout)
        counts[outcome] += 1
        print(f"{outcome:7} {m.name:32} {time.monotonic() - started:5.0f} s  {detail}", flush=True)
    score = counts["caught"] / len(mutants)
    print(f"score: {counts['caught']} of {len(mutants)} caught ({score:.0%}); {counts['missed']} missed, "
          f"{counts['error']} errors")
    return 0 if score >= args.min_score and not counts["error"] else 1


if __name__ == "__main__":
    sys.exit(main())
