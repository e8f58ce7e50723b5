"""The application builder as Serve calls it: ``serve run serve_config.yaml`` (and the cluster
file) import ``deployments.app:build_app`` and call it with the file's ``args``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve import Application
from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

from deployments.app import build_app
from memory_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["serve_config.yaml", "cluster/serve_config.gpu.yaml"])
def test_serve_accepts_the_builder_with_each_config_files_args(path):
    (application,) = yaml.safe_load((ROOT / path).read_text())["applications"]
    assert application["import_path"] == "deployments.app:build_app"
    # Serve's own check and call (a builder must take exactly one parameter)
    built = call_user_app_builder_with_args_if_necessary(build_app, application["args"])
    assert isinstance(built, Application)


def test_an_invalid_configuration_fails_the_build_naming_the_key():
    with pytest.raises(ConfigError, match="global.upstream.base_url"):
        call_user_app_builder_with_args_if_necessary(build_app, {"config": {"global": {"upstream": {"base_url": "x"}}}})
