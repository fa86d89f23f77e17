"""The judge panel (core/panel.py, docs/spec-revisions.md "§6.5–6.6 Comparison: the judge panel"):
pair k is asked of `compare_models[k mod n]`, each call keyed and recorded with its model, no
accepting stop before every panel model has answered, a resume repeats no call, a changed panel
reuses no answer, the estimate's bound holds, and bad panels are refused in one line. The real
comparator, client, cache, decision and compile code run; only the models' answers are scripted."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from deep_pipeline.cli import main
from deep_pipeline.core.config import CompileConfig
from deep_pipeline.core.keys import compare_call_key
from deep_pipeline.engine.records import ComparisonRecord
from deep_pipeline.errors import InputError
from deep_pipeline.llm.accounting import read_calls
from deep_pipeline.llm.client import ModelClient, ModelSettings
from deep_pipeline.llm.comparator import compare_cell
from deep_pipeline.store import read_model
from tests.compile_world import CONFIG, World, install_world, make_inputs
from tests.scripted_llm import server_error
from tests.test_sequential_comparison import (CANDIDATE, INCUMBENT, KEY, NEW, OLD, SEED, TASK, UNIT, answer,
                                              shown, step_keys)
from deep_pipeline.core.config import DEFAULT_DIMENSIONS

PANEL = ("scripted/judge-a", "scripted/judge-b", "scripted/judge-c")


def client(tmp_path, model: str) -> ModelClient:
    return ModelClient(ModelSettings(model=model), "judge", cache_dir=tmp_path / "cache",
                       calls_log=tmp_path / "calls.jsonl", retries=0, backoff_s=0)


def compare_with(tmp_path, panel=PANEL, **config):
    cfg = CompileConfig(compare_models=panel, **config)
    return compare_cell(client(tmp_path, "scripted/judge"), iteration_key=KEY, order_seed=SEED,
                        orders=cfg.compare_orders, samples=cfg.compare_samples, max_pairs=cfg.compare_max_pairs,
                        min_gain=cfg.min_gain, panel=[client(tmp_path, m) for m in cfg.compare_models],
                        task_prompt=TASK, unit=UNIT, old_text=OLD, new_text=NEW, dimension=DEFAULT_DIMENSIONS[0],
                        incumbent_traces=INCUMBENT, candidate_traces=CANDIDATE)


def script_panel(scripted_llm, judge) -> None:
    for model in PANEL:
        scripted_llm.always(model.split("/")[1], judge)


def asked(scripted_llm) -> dict[str, int]:
    return {model: len(scripted_llm.requests_for(model.split("/")[1])) for model in PANEL}


def test_each_panel_model_answers_its_pair_and_is_recorded_before_a_clear_accept(tmp_path, scripted_llm):
    # A clear accept (+1 in both orders) stops one judge after one pair; a panel hears every model first.
    script_panel(scripted_llm, answer(1, 1))
    comparison, _ = compare_with(tmp_path)
    assert asked(scripted_llm) == dict.fromkeys(PANEL, 2) and scripted_llm.requests_for("judge") == []
    assert [c.model for c in comparison.calls] == [m for m in PANEL for _ in range(2)]
    assert [c.pair for c in comparison.calls] == [0, 0, 1, 1, 2, 2]
    assert comparison.pair_reasons == ["panel_unheard", "panel_unheard"]
    assert comparison.stop_reason == "orders_agree"
    assert all(call["model"] in PANEL for call in json.loads(comparison.model_dump_json())["calls"])
    assert step_keys(tmp_path)[2:4] == [f"{KEY}/compare/p1/candidate-A/s0@scripted/judge-b",
                                        f"{KEY}/compare/p1/candidate-B/s0@scripted/judge-b"]


def test_a_rejection_no_later_pair_can_reverse_stops_at_once(tmp_path, scripted_llm):
    script_panel(scripted_llm, answer(1, -1))  # the first model's pair gain is 0: the bound can only fall
    comparison, _ = compare_with(tmp_path)
    assert asked(scripted_llm) == {PANEL[0]: 2, PANEL[1]: 0, PANEL[2]: 0}
    assert comparison.stop_reason is None and comparison.pairs is None  # one pair: recorded as before


def test_a_resume_after_a_crash_mid_comparison_sends_no_call_twice(tmp_path, scripted_llm):
    seen = []

    def crash_once_in_pair_2(request):
        seen.append(shown(request)["pair"])
        if seen.count(2) == 1 and shown(request)["pair"] == 2:
            return server_error("the machine went down")
        return answer(1, 0)(request)

    script_panel(scripted_llm, crash_once_in_pair_2)
    with pytest.raises(Exception):
        compare_with(tmp_path)
    assert asked(scripted_llm) == {PANEL[0]: 2, PANEL[1]: 2, PANEL[2]: 1} and seen == [0, 0, 1, 1, 2]
    comparison, _ = compare_with(tmp_path)  # new clients on the same cache
    assert asked(scripted_llm) == {PANEL[0]: 2, PANEL[1]: 2, PANEL[2]: 3}  # pair 2 only, its lost call once more
    answered = step_keys(tmp_path)
    assert len(answered) == len(set(answered)) == 6
    assert [c.model for c in comparison.calls] == [m for m in PANEL for _ in range(2)]


def test_a_changed_panel_reuses_no_other_models_answer(tmp_path, scripted_llm):
    script_panel(scripted_llm, answer(1, 1))
    compare_with(tmp_path, panel=PANEL[:2])
    compare_with(tmp_path, panel=(PANEL[1], PANEL[0]))  # the same models, each now on the other's pair
    calls = read_calls(tmp_path / "calls.jsonl")
    assert len(calls) == 8 and not any(c.cache_hit for c in calls)
    assert {c.model for c in calls if c.step_key.startswith(f"{KEY}/compare/candidate")} == set(PANEL[:2])
    assert all(c.step_key.endswith(f"@{c.model}") for c in calls)


def test_without_a_panel_keys_are_as_before():
    assert compare_call_key(KEY, "A", 0, 1) == f"{KEY}/compare/p1/candidate-A/s0"
    assert compare_call_key(KEY) == f"{KEY}/compare"
    assert compare_call_key(KEY, model="openai/gpt-4o") == f"{KEY}/compare@openai/gpt-4o"


def test_compare_models_is_in_the_identity_only_when_set():
    assert "compare_models" not in CompileConfig().identity_settings()
    assert "compare_models" not in CompileConfig().model_dump(mode="json")  # compile.json as before
    assert CompileConfig(compare_models=["a/x"]).identity_settings()["compare_models"] == ["a/x"]


@pytest.mark.parametrize("models, config, problem", [
    ([], {}, "an empty panel"),
    (["scripted/judge-a", " "], {}, "model 2 is blank"),
    (["scripted/judge-a", "scripted/judge-a"], {}, "named twice"),
    (list(PANEL), {"compare_max_pairs": 2}, "3 models, but a comparison asks at most 2 pairs"),
    (PANEL[:2], {"compare_orders": 1}, "at most 1 pair "),
])
def test_a_bad_panel_is_one_line_naming_the_field_and_exit_2(tmp_path, scripted_llm, capsys, monkeypatch,
                                                            models, config, problem):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    skill, bundle = make_inputs(tmp_path)
    path = tmp_path / "compile.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, **config, "compare_models": models}))
    assert main(["compile", str(skill), "--task", str(bundle), "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "compare_models" in err and problem in err, err
    assert not (tmp_path / "store").exists() and not (tmp_path / "home").exists()


def test_the_compare_model_flag_is_repeatable_and_checked(tmp_path, scripted_llm, capsys, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    skill, bundle = make_inputs(tmp_path)
    path = tmp_path / "compile.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    flags = ["compile", str(skill), "--task", str(bundle), "--config", str(path), "--estimate", "--json"]
    assert main([*flags, "--compare-model", PANEL[0], "--compare-model", PANEL[1]]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["bound"]["compare_calls_by_model"] == {PANEL[0]: found["bound"]["calls_by_kind"]["compare"] * 2 // 3,
                                                        PANEL[1]: found["bound"]["calls_by_kind"]["compare"] // 3}
    assert main([*flags, "--compare-model", PANEL[0], "--compare-model", PANEL[0]]) == 2
    assert "compare_models" in capsys.readouterr().err


def test_an_unknown_panel_model_or_its_missing_key_is_refused_at_registration(tmp_path, monkeypatch):
    from deep_pipeline.engine.compiles import check_models

    with pytest.raises(InputError, match=r"config: compare_models: unknown model 'nowhere-model'"):
        check_models(CompileConfig(**CONFIG, compare_models=["nowhere-model"]))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(InputError, match=r"config: compare_models: model 'anthropic/claude-x' needs ANTHROPIC_API_KEY"):
        check_models(CompileConfig(**CONFIG, compare_models=["scripted/judge-a", "anthropic/claude-x"]))


def test_a_panel_models_key_goes_only_where_it_belongs(monkeypatch):
    from deep_pipeline.engine.services import panel_model_settings

    keys = {"openai": "sk-openai", "anthropic": "sk-anthropic"}
    hosted = CompileConfig(**CONFIG, compare_models=["openai/gpt-4o", "anthropic/claude-x"])
    assert [panel_model_settings(hosted, m, keys).api_key for m in hosted.compare_models] == ["sk-openai", "sk-anthropic"]
    # With the judge's own endpoint, every panel model is sent there with that endpoint's key, never a provider's.
    monkeypatch.setenv("JUDGE_ENDPOINT_KEY", "sk-endpoint")
    served = hosted.model_copy(update={"judge_api_base": "http://judge.example/v1", "judge_api_key_env": "JUDGE_ENDPOINT_KEY"})
    settings = [panel_model_settings(served, m, keys) for m in served.compare_models]
    assert {(s.api_base, s.api_key) for s in settings} == {("http://judge.example/v1", "sk-endpoint")}
    keyless = hosted.model_copy(update={"judge_api_base": "http://judge.example/v1"})
    assert {panel_model_settings(keyless, m, keys).api_key for m in keyless.compare_models} == {None}


def test_a_compile_with_a_panel_stays_in_its_bound_and_shows_each_models_verdict(tmp_path, scripted_llm, capsys,
                                                                               monkeypatch):
    from deep_pipeline.defs.pages import panel_meta

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEEP_PIPELINE_STORE", str(tmp_path / "store"))
    world = World(low={("s01-when-to-use", "clarity"): 2})
    install_world(scripted_llm, world)
    script_panel(scripted_llm, world.judge)
    skill, bundle = make_inputs(tmp_path)
    path = tmp_path / "compile.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "compare_models": list(PANEL), "section_iterations": 2,
                                    "paragraph_iterations": 1}))
    flags = ["compile", str(skill), "--task", str(bundle), "--config", str(path)]
    assert main([*flags, "--estimate", "--json"]) == 0
    bound = json.loads(capsys.readouterr().out)["bound"]
    assert main([*flags, "--quiet"]) == 0
    capsys.readouterr()
    [folder] = (tmp_path / "store").iterdir()
    calls = read_calls(folder / "llm" / "calls.jsonl")
    assert 0 < len(calls) <= bound["calls"]
    compare_calls = Counter(c.model for c in calls if "/compare" in c.step_key)
    assert set(compare_calls) == set(PANEL)  # every panel model answered, the judge model none
    assert all(compare_calls[m] <= bound["compare_calls_by_model"][m] for m in PANEL)
    stored = read_model(sorted(folder.glob("iterations/section-i00/comparison.json"))[0], ComparisonRecord)
    meta = panel_meta(stored.comparison)
    assert set(meta["panel_models"].value) == set(PANEL)
    assert all(v == {"calls": 2, "mean_gain": 2.0} for v in meta["panel_models"].value.values())
    assert "| scripted/judge-a | 2 | +2 |" in meta["panel_verdicts"].value
    html = (folder / "report.html").read_text()
    assert "panel: scripted/judge-a +2 over 2 calls" in html


def test_the_stop_rule_with_a_panel_waits_only_on_an_accepting_or_irrelevant_verdict():
    from deep_pipeline.core.models import CompareCall, RegressionClaim
    from deep_pipeline.core.sequential import next_pair
    from deep_pipeline.defs.pages import panel_meta
    from deep_pipeline.core.comparison import combine

    def pair(as_a, as_b, relevant=True, claim=False):
        return [CompareCall(candidate_label=label, incumbent_score=3, candidate_score=3 + delta, task_relevant=relevant,
                            candidate_regressions=[RegressionClaim(kind="error")] if claim else [])
                for label, delta in (("A", as_a), ("B", as_b))]

    rule = dict(min_gain=0.5, max_pairs=3, panel=3)
    assert next_pair(pair(1, 1), **rule) == (None, "panel_unheard")  # a clear accept waits
    assert next_pair(pair(1, 1, relevant=False), **rule) == (None, "panel_unheard")
    assert next_pair(pair(1, 1, claim=True), **rule).stop == "regression"  # decided rejections do not
    assert next_pair(pair(1, -1), **rule).stop == "gain_not_positive"
    assert next_pair(pair(1, 1), **{**rule, "panel": 1}).stop == "orders_agree"  # one model: the rule as before
    assert panel_meta(combine(pair(1, 1), SEED)) == {}  # no panel: the decision page as before


def test_a_panel_model_the_provider_does_not_know_is_one_line_naming_compare_models(tmp_path, scripted_llm):
    from deep_pipeline.engine.services import panel_model_settings
    from deep_pipeline.errors import ModelAccessError
    from tests.scripted_llm import not_found

    scripted_llm.always("judge-a", not_found())
    config = CompileConfig(**CONFIG, compare_models=[PANEL[0]])
    judge = ModelClient(panel_model_settings(config, PANEL[0], None), "judge", retries=0, backoff_s=0)
    with pytest.raises(ModelAccessError, match=r"judge model 'scripted/judge-a': model not found .*; check compare_models"):
        compare_cell(judge, iteration_key=KEY, order_seed=SEED, panel=[judge], task_prompt=TASK, unit=UNIT,
                     old_text=OLD, new_text=NEW, dimension=DEFAULT_DIMENSIONS[0], incumbent_traces=INCUMBENT,
                     candidate_traces=CANDIDATE)
    assert len(scripted_llm.requests_for("judge-a")) == 1  # never resent


def test_the_estimate_prices_each_panel_models_share_of_the_comparisons():
    from deep_pipeline.core.estimate import RolePrice, estimate, estimate_cost

    config = CompileConfig(compare_models=["m/cheap", "m/dear"], judge_max_tokens=100)
    bound = estimate(config)
    assert bound.calls == estimate(CompileConfig()).calls  # a panel changes who answers, not how many calls
    compare = bound.calls_by_kind["compare"]
    assert bound.compare_calls_by_model == {"m/cheap": compare * 2 // 3, "m/dear": compare // 3}
    cheap, dear = RolePrice(input_per_token=0.0, output_per_token=1.0), RolePrice(input_per_token=0.0, output_per_token=10.0)
    cost = estimate_cost(bound, config, {"compare": 10}, {"judge": None}, {"m/cheap": cheap, "m/dear": dear})
    assert cost.usd_by_kind["compare"] == pytest.approx(100 * (compare * 2 // 3) * 1.0 + 100 * (compare // 3) * 10.0)
    assert estimate_cost(bound, config, {}, {"judge": cheap}, {"m/cheap": cheap, "m/dear": None}).usd_by_kind["compare"] is None
