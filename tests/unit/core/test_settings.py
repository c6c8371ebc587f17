import pytest

from operators.core.settings import Settings, SettingsError


def test_defaults_and_accepted_spellings():
    assert Settings.from_env({}) == Settings()
    config = Settings.from_env(
        {
            "DRA_CLAIMS_WORKERS": " 7 ",
            "DRA_LEADER_ELECTION": "TRUE",
            "DRA_LOG_LEVEL": "debug",
            "DRA_NODEAGENT_KUBELET_PLUGIN": "no",
            "DRA_BINDING_COOL_OFF": "0",
            "DRA_TAINTS_RULE_VERSION": "v1beta2",
            "DRA_NODEAGENT_IGNORED_XIDS": "13, 31",
        }
    )
    assert (config.claims_workers, config.leader_election, config.nodeagent_kubelet_plugin) == (7, True, False)
    assert config.binding_cool_off == 0.0 and config.taints_rule_version == "v1beta2"


@pytest.mark.parametrize(
    "env, value, problem, fix",
    [
        ("DRA_CLAIMS_WORKERS", "abc", "not a whole number", "Set a whole number >= 1"),
        ("DRA_TAINTS_WORKERS", "0", "too small", "Set a whole number >= 1"),
        ("DRA_METRICS_PORT", "99999", "too large", "<= 65535"),
        ("DRA_BINDING_TIMEOUT", "soon", "not a number", "Set a number > 0"),
        ("DRA_BINDING_TIMEOUT", "0", "must be greater than 0", "Set a number > 0"),
        ("DRA_NODEAGENT_SYNC_DELAY", "nan", "not a finite number", "Set a number >= 0"),
        ("DRA_LEADER_ELECTION", "maybe", "not true or false", "Set true or false"),
        ("DRA_LOG_LEVEL", "LOUD", "not a log level", "Set DEBUG, INFO, WARNING or ERROR"),
        ("DRA_LOG_FORMAT", "xml", "not a known value", "Set one of 'json', 'console'"),
        ("DRA_NODEAGENT_BACKEND", "gpu", "not a known value", "Set one of 'nvml', 'simulated'"),
        ("DRA_BINDING_TAINT_EFFECT", "NoExecute", "not a known value", "Set one of 'NoSchedule', 'None'"),
        ("DRA_TAINTS_RULE_VERSION", "v9", "not a known value", "'v1', 'v1beta2', 'v1alpha3'"),
        ("DRA_NODEAGENT_IGNORED_XIDS", "13,x", "'x' is not an XID number", "numbers separated by commas"),
        ("DRA_LOG_DEBUG_LOGGERS", "h2,grpc lib", "'grpc lib' is not a logger name", "logger names separated by commas"),
    ],
)
def test_a_value_that_cannot_work_names_the_variable_and_the_fix(env, value, problem, fix):
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({env: value})
    message = str(raised.value)
    assert message.startswith(f"{env}={value!r}: {problem}.") and fix in message, message
    assert f"or unset {env} for the default" in message
