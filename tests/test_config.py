"""Option precedence (command line > environment > file > defaults) and one-line errors."""

import os

import pytest

from dask_metrics.configfile import ConfigError, load_yaml, parse_bytes
from dask_metrics.exporter.config import parse_listen, resolve


def test_defaults():
    c = resolve({}, {})
    assert (c.listen, c.interval, c.peak_window, c.simulate) == (":9446", 0.5, 30.0, 0)


def test_precedence_cli_over_env_over_file():
    file_data = {"interval": 2, "peak-window": 60, "gpus": "0", "worker": "from-file"}
    env = {"DASK_METRICS_EXPORTER_INTERVAL": "1", "DASK_METRICS_EXPORTER_GPUS": "1"}
    c = resolve({"interval": "0.25"}, env, file_data)
    assert c.interval == 0.25
    assert c.gpus == "1"
    assert c.peak_window == 60
    assert c.worker == "from-file"


@pytest.mark.parametrize(
    ("cli", "needle"),
    [
        ({"interval": "fast"}, "--interval='fast'"),
        ({"energy_interval": "often"}, "must be a positive number of seconds"),
        ({"energy_interval": "0"}, "--energy-interval"),
        ({"interval": "-1"}, "positive"),
        ({"simulate": "-2"}, "--simulate"),
        ({"listen": "9446"}, "HOST:PORT"),
        ({"listen": ":99999"}, "0-65535"),
        ({"interval": "10", "peak_window": "5"}, "peak-window"),
        ({"serve_metrics": "maybe"}, "true or false"),
        ({"simulate_memory": "4 pebibytes"}, "--simulate-memory"),
        ({"simulate_memory": "0GiB"}, "more than 0 bytes"),
        ({"interval": True}, "must be a positive number of seconds"),  # YAML's true
        ({"connection_timeout": True}, "--connection-timeout"),
        ({"worker": "w\udcff"}, "is not UTF-8 text"),  # a non-UTF-8 argument
        ({"dask_cluster": "c\udcff"}, "--dask-cluster"),
        ({"pids": "abc"}, "must be process ids, comma-separated"),
    ],
)
def test_bad_values_give_one_line_naming_the_option(cli, needle):
    with pytest.raises(ConfigError) as err:
        resolve(cli, {})
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ConfigError, match="DASK_METRICS_EXPORTER_INTERVAL"):
        resolve({}, {"DASK_METRICS_EXPORTER_INTERVAL": "soon"})


def test_unknown_file_option(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("intervall: 3\n")
    with pytest.raises(ConfigError, match="intervall"):
        resolve({}, {}, load_yaml(str(path)), origin=str(path))


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_yaml(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(str(bad))
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(str(tmp_path / "list.yaml"))
    (tmp_path / "latin.yaml").write_bytes(b"worker: \xff\n")
    with pytest.raises(ConfigError, match=r"latin\.yaml is not UTF-8 text"):
        load_yaml(str(tmp_path / "latin.yaml"))
    (tmp_path / "huge.yaml").write_text("#" * (2 << 20))  # stalled start-up for seconds
    with pytest.raises(ConfigError, match=r"huge\.yaml: larger than"):
        load_yaml(str(tmp_path / "huge.yaml"))
    os.mkfifo(tmp_path / "fifo.yaml")  # blocked for good
    with pytest.raises(ConfigError, match=r"fifo\.yaml: not a regular file"):
        load_yaml(str(tmp_path / "fifo.yaml"))


def test_gpus_as_a_yaml_list():
    assert resolve({}, {}, {"gpus": [0, "GPU-a"]}).gpus == "0,GPU-a"


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":9446", ("0.0.0.0", 9446)), ("127.0.0.1:1", ("127.0.0.1", 1)), ("[::1]:80", ("::1", 80))],
)
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("17179869184", 16 * 2**30), ("16GiB", 16 * 2**30), ("512MiB", 512 * 2**20),
    ("2G", 2e9), ("1.5gib", 1.5 * 2**30), ("64k", 64e3), (4096, 4096),
])
def test_sizes_in_bytes(text, expected):
    assert parse_bytes(text) == expected
    assert resolve({"simulate_memory": text}, {}).simulate_memory == expected


@pytest.mark.parametrize(("given", "url"), [
    ("node7:9446", "http://node7:9446/metrics"),
    ("https://node7:9446", "https://node7:9446/metrics"),
    ("http://[fd00::7]:9446/gpu", "http://[fd00::7]:9446/gpu"),
])
def test_metrics_url_of_a_sidecar(given, url):
    assert resolve({"metrics_url": given}, environ={}).metrics_url == url


@pytest.mark.parametrize("given", ["node7", "ftp://node7:21", "node7:port", ":9446"])
def test_a_metrics_url_without_host_and_port_is_refused(given):
    with pytest.raises(ConfigError, match="--metrics-url"):
        resolve({"metrics_url": given}, environ={})


def test_a_metrics_url_with_credentials_is_refused_without_echoing_them():
    with pytest.raises(ConfigError, match="no credentials") as caught:
        resolve({"metrics_url": "http://scraper:s3cret@node7:9446"}, environ={})
    assert "s3cret" not in str(caught.value) and "scraper" not in str(caught.value)
