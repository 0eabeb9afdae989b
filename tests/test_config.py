import json

import pytest

from sandbatch import REPO_ROOT
from sandbatch.core.config import Config, SandboxConfig, coerce_strings, load, load_schema, parse, validate
from sandbatch.core.errors import UserError

DEFAULT = REPO_ROOT / "config" / "default.yaml"


def test_the_schema_fills_the_defaults_the_models_declare(monkeypatch):
    """The validator fills defaults from the schema written from the models: a config built
    from nothing is the models' own defaults, key for key and type for type."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    filled = Config.model_validate(validate({})).model_dump(mode="json")
    providers = set(filled["sandbox"]) - set(SandboxConfig.model_fields)  # which only the schema names
    assert providers
    for name in providers:
        del filled["sandbox"][name]
    assert json.dumps(filled, sort_keys=True) == json.dumps(Config().model_dump(mode="json"), sort_keys=True)


def test_every_key_has_a_description_and_a_default_unless_required():
    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            where = f"{path}.{key}".lstrip(".")
            assert "description" in sub, f"{where} has no description"
            assert ("default" in sub) != (key in node.get("required", ())), f"{where}: a default or required"
            walk(sub, where)

    walk(load_schema(), "")


def test_members_of_a_collection_get_no_defaults_and_required_keys_stay_required():
    """What the user writes inside a mapping's values or a list stays as written (the resolved
    config.yaml shows it so); a model's required key is asked for, not filled."""
    data = {"benchmark": {"repo_resources": {"a/b": {"cpu": "2"}}},
            "sandbox": {"image_rewrites": [{"prefix": "a/", "replace": "b/"}]}}
    filled = validate(data)
    assert filled["benchmark"]["repo_resources"] == {"a/b": {"cpu": "2"}}
    assert filled["sandbox"]["image_rewrites"] == [{"prefix": "a/", "replace": "b/"}]
    prices = {"model": {"prices": {"input": 3}}}
    with pytest.raises(UserError, match=r"^my\.yaml: model\.prices: 'output' is a required property$"):
        validate(prices, [("my.yaml", prices)])


def test_defaults_are_filled_in():
    cfg = parse({})
    assert cfg.repeats == 1 and cfg.harness.name == "oracle" and cfg.sandbox.provider == "local"
    assert cfg.timeouts.agent > 0 and cfg.benchmark.instance_ids == []


def test_nested_config_strings_are_coerced_to_schema_types():
    # what `snakemake --config 'timeouts={"agent": "60"}' repeats=2` delivers
    out = coerce_strings({"timeouts": {"agent": "60"}, "benchmark": {"limit": "3", "filter": "12"},
                          "sandbox": {"ttl_seconds": "600"}}, load_schema())
    assert out["timeouts"]["agent"] == 60
    assert out["benchmark"]["limit"] == 3
    assert out["benchmark"]["filter"] == "12"  # a string field stays a string
    assert parse({"timeouts": {"agent": "60"}}).timeouts.agent == 60.0


@pytest.mark.parametrize("data,expected", [
    ({"bogus": 1}, "unknown key 'bogus'; allowed keys:"),
    ({"harness": {"nme": "x"}}, "unknown key 'nme' under harness"),
    ({"repeats": "many"}, "repeats: 'many' has the wrong type; expected integer"),
    ({"repeats": 0}, "repeats: 0 is too small; it must be >= 1"),
    ({"harness": {"name": "nope"}}, "harness.name: 'nope' is not allowed; choose one of: oracle"),
    ({"sandbox": {"provider": "k8s"}}, "sandbox.provider: 'k8s' is not allowed; choose one of:"),
    ({"benchmark": {"kind": "x"}}, "benchmark.kind: 'x' is not allowed; choose one of:"),
])
def test_errors_are_one_line_and_name_key_value_and_fix(data, expected):
    with pytest.raises(UserError) as err:
        validate(data, [("my.yaml", data)])
    msg = str(err.value)
    assert msg.startswith("my.yaml: ")
    assert expected in msg
    assert "\n" not in msg


def test_error_names_the_file_that_set_the_key(tmp_path):
    good = tmp_path / "a.yaml"
    good.write_text("repeats: 2\n")
    bad = tmp_path / "b.yaml"
    bad.write_text("harness:\n  name: nope\n")
    with pytest.raises(UserError, match=r"b\.yaml: harness\.name"):
        load([good, bad], default=DEFAULT)
    with pytest.raises(UserError, match=r"^--config: repeats"):
        load([good], {"repeats": -1}, default=DEFAULT)


def test_bad_yaml_is_reported_with_its_line(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("run: x\nrepeats: [1,\n")
    with pytest.raises(UserError, match=r"c\.yaml: line \d+ is not valid YAML"):
        load([bad])


def test_the_run_config_holds_the_harness_options_resolved_once():
    """harness.config is merged over the harness's options where the run's config is loaded
    (check_run): the settings the steps read hold every option, typed; a value the options do
    not take is one line naming the key."""
    from sandbatch.harness import get_harness
    from sandbatch.ops.workflow import check_run

    def run(config):
        return check_run(parse({"harness": {"name": "mini-swe-agent", "config": config},
                                "model": {"base_url": "http://127.0.0.1:9/v1", "name": "m"}}))[0]

    cfg = run({"step_limit": "4", "install": {"method": "path", "path": "/opt/mini"}})
    options = cfg.harness.config
    assert options["step_limit"] == 4 and options["mode"] == "host" and options["mini_config"] == {}
    assert options["install"]["path"] == "/opt/mini" and options["install"]["package"] == "mini-swe-agent"
    assert get_harness("mini-swe-agent").resolve_config(options) == options  # resolved: as it is
    assert Config.model_validate_json(cfg.model_dump_json()).harness.config == options  # what run.json holds
    with pytest.raises(UserError, match=r"^harness.config.step_limit: 'many' is not allowed; ") as err:
        run({"step_limit": "many"})
    assert "\n" not in str(err.value)
