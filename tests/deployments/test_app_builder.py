"""The application builder the Serve config file names must pass Serve's own builder check
(``serve run`` and ``serve deploy`` call it with the ``args`` dictionary alone)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_config_files_builder_passes_serves_builder_check(tmp_path):
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve.deployment import Application

    from deployments.app import build_app

    config = yaml.safe_load((REPO_ROOT / "serve_config.yaml").read_text())
    app = config["applications"][0]
    assert app["import_path"] == "deployments.app:build_app"
    # binding constructs nothing: the Milvus Lite file named there is not opened
    assert isinstance(call_user_app_builder_with_args_if_necessary(build_app, app["args"]), Application)


def test_an_invalid_config_fails_the_builder_naming_the_key():
    from deployments.app import build_app
    from memory_core.errors import ConfigError

    config = yaml.safe_load((REPO_ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
    config["config"]["global"]["stores"]["memory"]["backend"] = "nope"
    with pytest.raises(ConfigError, match="backend"):
        build_app(config)
