"""--config FILE for tcl-master and tcl-agent: flags over file over defaults, and errors that
name the file, the line, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tcluster.agent.main import build_parser as agent_parser
from tcluster.agent.main import settings_from_args as agent_settings
from tcluster.daemonkit.configfile import ConfigError, key_lines, load_args
from tcluster.daemonkit.runner import explain_argument_error, explain_settings_error
from tcluster.domain.errors import InvalidArgument
from tcluster.master.app.main import build_parser as master_parser
from tcluster.master.app.main import settings_from_args as master_settings


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_file_overrides_defaults_and_flags_override_the_file(tmp_path: Path) -> None:
    conf = write(tmp_path, 'fairness = "drf"\nnode_timeout_s = 40\nlisten = "127.0.0.1:7171"\n'
                           'log_level = "DEBUG"\n')
    loaded = load_args(master_parser(), ["--config", str(conf), "--listen", "127.0.0.1:7272"])
    settings = master_settings(loaded.args)
    assert settings.fairness == "drf"                 # file over default (mch)
    assert settings.node_timeout_s == 40.0            # an integer where a float is wanted
    assert settings.listen == "127.0.0.1:7272"        # flag over file
    assert settings.lost_timeout_s == 30.0            # neither: the default
    assert loaded.args.log_level == "DEBUG"
    assert loaded.explicit == {"config", "listen"}


def test_a_flag_equal_to_its_default_still_wins_over_the_file(tmp_path: Path) -> None:
    conf = write(tmp_path, "heartbeat_interval_s = 0.5\n")
    loaded = load_args(master_parser(), ["--config", str(conf), "--heartbeat-interval-s", "1.0"])
    assert master_settings(loaded.args).heartbeat_interval_s == 1.0


def test_agent_file_takes_human_forms_tables_and_negated_flags(tmp_path: Path) -> None:
    conf = write(tmp_path, f'cpus = 3\nmemory = "2Gi"\nreserve_memory = 268435456\nnamespaces = false\n'
                           f'state_dir = "{tmp_path}/s"\nnode = "n7"\n[labels]\nrack = "r1"\ndisk = "ssd"\n')
    settings = agent_settings(load_args(agent_parser(), ["--config", str(conf)]).args)
    assert (settings.cpus, settings.memory_bytes, settings.reserve_memory_bytes) == (3.0, 2 * 2**30, 256 * 2**20)
    assert settings.namespaces is False
    assert settings.labels == {"rack": "r1", "disk": "ssd"}
    assert (settings.node, settings.state_dir) == ("n7", tmp_path / "s")


def test_no_config_is_just_the_flags(tmp_path: Path) -> None:
    loaded = load_args(master_parser(), ["--fairness", "drf"])
    assert loaded.config is None and master_settings(loaded.args).fairness == "drf"


@pytest.mark.parametrize("text, message", [
    ('fairness = "drf"\n\nheartbeat_s = 1\n', "c.toml:3: unknown key 'heartbeat_s'; did you mean heartbeat_interval_s?"),
    ("zzz = 1\n", "c.toml:1: unknown key 'zzz'; known keys: advertise, agent_listen,"),
    ("config = 'x'\n", "c.toml:1: unknown key 'config'"),
    ('node_timeout_s = "soon"\n', "c.toml:1: node_timeout_s: expected a number, got a string"),
    ("lotes_k = 2.5\n", "c.toml:1: lotes_k: expected an integer (K), got a number with a fraction"),
    ("insecure = 1\n", "c.toml:1: insecure: expected true or false, got an integer"),
    ("task_metrics = 'no'\n", "c.toml:1: task_metrics: expected true or false, got a string"),
    ('status_visibility = "some"\n', "c.toml:1: status_visibility: 'some' is not one of: all, own"),
    ("listen = [1, 2]\n", "c.toml:1: listen: expected a string, got an array"),
    ("listen = \n", "c.toml: not valid TOML: Invalid value (at line 1, column 10)"),
])
def test_master_file_errors_name_line_key_and_what_is_allowed(tmp_path: Path, text: str, message: str) -> None:
    conf = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_args(master_parser(), ["--config", str(conf)])
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.toml: cannot read the config file: No such file"):
        load_args(agent_parser(), ["--config", str(tmp_path / "nope.toml")])


def test_a_value_the_settings_refuse_is_named_by_file_line_and_key(tmp_path: Path) -> None:
    conf = write(tmp_path, '# the master\nlisten = "127.0.0.1:7070"\nheartbeat_interval_s = 0\n')
    loaded = load_args(master_parser(), ["--config", str(conf)])
    with pytest.raises(ValidationError) as caught:
        master_settings(loaded.args)
    text = explain_settings_error("tcl-master", caught.value, loaded.origin)
    assert text == f"tcl-master: {conf}:3: heartbeat_interval_s: Input should be greater than 0"
    # Given as a flag instead, the same error names the flag.
    loaded = load_args(master_parser(), ["--config", str(conf), "--heartbeat-interval-s", "0"])
    with pytest.raises(ValidationError) as caught:
        master_settings(loaded.args)
    assert explain_settings_error("tcl-master", caught.value, loaded.origin) == \
        "tcl-master: --heartbeat-interval-s: Input should be greater than 0"


def test_a_human_form_the_agent_refuses_is_named_by_file_line_and_key(tmp_path: Path) -> None:
    conf = write(tmp_path, 'cpus = 2\nmemory = "lots"\n')
    loaded = load_args(agent_parser(), ["--config", str(conf)])
    with pytest.raises(InvalidArgument) as caught:
        agent_settings(loaded.args)
    assert explain_argument_error("tcl-agent", caught.value, loaded.origin).startswith(
        f"tcl-agent: {conf}:2: memory: cannot parse 'lots'")


def test_key_lines_know_top_level_keys_and_tables() -> None:
    text = '# c\nlisten = "x"\n  "quoted" = 1\nlabels.rack = "r1"\n[labels]\nrack = "r1"\n'
    assert key_lines(text) == {"listen": 2, "quoted": 3, "labels": 4}
