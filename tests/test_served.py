"""model.name left to the endpoint (sandbatch.proxy.served), against the scripted model server."""

import socket

import pytest

from harness_support import scripted_model_server
from sandbatch.core.config import parse
from sandbatch.core.errors import UserError
from sandbatch.proxy import served
from sandbatch.proxy.served import resolve_model_name


@pytest.fixture(autouse=True)
def _fresh_answers():
    """Each test asks its own endpoint: a port a closed server of an earlier test freed can be
    handed out again, and the process keeps each URL's model list for the process's life."""
    served._served.clear()


def unset_name(url: str, **model):
    return parse({"run": "r", "model": {"base_url": url, **model}})


def test_one_listed_model_is_the_name_and_a_set_name_is_kept():
    with scripted_model_server({"models": ["org/m-7b"]}) as (url, model):
        cfg, note = resolve_model_name(unset_name(url), needs_model=True)
        assert (cfg.model.name, note) == ("org/m-7b", "")
        assert resolve_model_name(unset_name(url, name="mine"), needs_model=True)[0].model.name == "mine"
        assert len(model.requests) == 1  # a set name asks nothing


def test_several_listed_models_name_them_and_the_key_to_set():
    with scripted_model_server({"models": ["a", "b"]}) as (url, _):
        with pytest.raises(UserError, match=rf"^model.name: not set, and {url}/models lists 2 models \(a, b\); "
                                            r"set model.name to the one to use$"):
            resolve_model_name(unset_name(url), needs_model=True)


def test_endpoint_down_stops_a_new_run_and_a_started_run_keeps_its_name():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # bound, not listening: refused
        cfg = unset_name(url, name_env="NAME_OF_MODEL")
        with pytest.raises(UserError, match=r"did not answer with a model list .*; start the endpoint, or export "
                                            r"NAME_OF_MODEL=<model id> \(named by model.name_env\) or set model.name$"):
            resolve_model_name(cfg, needs_model=True)
        kept, note = resolve_model_name(cfg, needs_model=True, started_with="org/m-7b")
    assert kept.model.name == "org/m-7b" and "run r keeps model 'org/m-7b', which it was started with" in note


def test_a_harness_without_a_model_asks_nothing():
    cfg, _ = resolve_model_name(unset_name("http://127.0.0.1:9/v1"), needs_model=False)
    assert cfg.model.name == "none"
