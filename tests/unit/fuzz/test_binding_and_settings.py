"""Fuzzing the decoders of what users and services write (hypothesis, tests/unit/fuzzing.py): the
http preparer's answers and configuration, the binding operator's record annotations, the taints
operator's rule annotations, and the settings from the environment. Each answers any input with
its own result or error naming the input; never another exception, a hang or unbounded
allocation."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import strategies as st

from operators.binding import decisions as bd
from operators.binding import preparers
from operators.binding.preparers import ConfigError, Outcome
from operators.binding.preparers.http import DATA_MAX_BYTES, HttpPreparer, _seconds, decode_answer, judge
from operators.core.api import wirejson
from operators.core.redact import Redactor
from operators.core.settings import Settings, SettingsError, parse_value
from operators.taints import decisions as td
from tests.unit.fuzzing import bounded, deep_json, fuzz, json_values, objects_like, texts_around

SECRET = "s3cret-token"
REDACT = Redactor.of(f"http://attach:{SECRET}@attach.example:8000/v1", {"Authorization": f"Bearer {SECRET}"})

answers = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["ready", "failed", "pending", "READY", ""]) | json_values,
        "reason": st.text(max_size=300) | json_values,
        "message": texts_around(SECRET, "x") | json_values,
        "data": objects_like(
            "x", "blob", values=json_values | st.just(float("nan")) | st.text(min_size=0, max_size=12000)
        )
        | json_values,
    },
)
answer_bytes = (
    answers.map(lambda a: json.dumps(a).encode())
    | st.binary(max_size=400)
    | deep_json.map(str.encode)
    | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))
)


@fuzz(
    raw=answer_bytes,
    status=st.sampled_from([200, 201, 202, 204, 400, 404, 409]) | st.integers(100, 599),
    retry_after=st.none() | st.text(max_size=20) | st.sampled_from(["inf", "nan", "1e999", "-1", "5"]),
)
def test_fuzz_http_preparer_answer(raw, status, retry_after):
    body, text = bounded(lambda: decode_answer(raw))
    assert isinstance(body, dict) and isinstance(text, str)
    outcome = bounded(lambda: judge(status, body, text, REDACT))
    if outcome is not None:
        assert isinstance(outcome, Outcome) and isinstance(outcome.reason, str) and isinstance(outcome.message, str)
        assert SECRET not in outcome.message + outcome.reason and len(outcome.message) <= 2000
        if outcome.data is not None:  # what goes to the API server: JSON it accepts
            assert len(wirejson.dumps(outcome.data)) <= DATA_MAX_BYTES
        bd.condition_reason(outcome.reason, "PreparationFailed")
    assert 0 <= _seconds(retry_after, 2.0) <= 60


http_configs = objects_like(
    "url",
    "timeout",
    "retries",
    "backoff",
    "pollInterval",
    "headers",
    values=json_values
    | st.sampled_from(
        [
            f"http://u:{SECRET}@h/v1",
            f"http://h:99999/{SECRET}",
            "https://h",
            f"http://u:{SECRET}@[::1/v1",
            "1e999",
            "nan",
            -1,
        ]
    )
    | st.dictionaries(st.text(max_size=10), st.text(max_size=20) | st.just(SECRET)),
)


@fuzz(config=http_configs)
def test_fuzz_http_preparer_config(config):
    try:
        preparer = bounded(lambda: HttpPreparer(config))
    except ConfigError as e:
        message = str(e)
        assert message.startswith("http preparer:") and f":{SECRET}@" not in message, message
    else:
        assert preparer.timeout > 0 and preparer.retries >= 0


@fuzz(
    text=st.text(max_size=300)
    | deep_json
    | http_configs.map(json.dumps)
    | texts_around("{", '"url"', ":", f'"{SECRET}"', "}", ",")
)
def test_fuzz_preparer_config_text(text):
    try:
        config = bounded(lambda: preparers.parse_config(text))
    except ConfigError as e:
        assert text.strip().startswith("@") or SECRET not in str(e), e  # @FILE: the file is named
    else:
        assert isinstance(config, dict)


records = objects_like("driver", "pool", "device", "shareID", "node", "started", "allocated")


@fuzz(
    value=records.map(json.dumps) | st.text(max_size=200) | deep_json,
    key=st.sampled_from([bd.RECORD_ANNOTATION_PREFIX + "x", bd.RECORD_ANNOTATION_PREFIX, "other"]),
)
def test_fuzz_binding_record_annotation(value, key):
    record = bounded(lambda: bd.Record.from_json(value))
    if record is not None:
        assert record.ref.record_annotation and json.loads(record.to_json())
    claim = {"metadata": {"annotations": {key: value}}}
    problems = bounded(lambda: bd.record_problems(claim))
    assert all(isinstance(k, str) and isinstance(why, str) for k, why in problems)
    bd.records(claim, bd.DriverFilter.parse("*"))


@fuzz(
    value=st.text(max_size=40) | st.sampled_from(["1e999", "nan", "-0", "inf", "0x10", "1_000", "true", " 5 "]),
    which=st.sampled_from([td.RATE_ANNOTATION, td.EVICTION_API_ANNOTATION, td.MAX_WAIT_ANNOTATION]),
)
def test_fuzz_taint_rule_annotations(value, which):
    rule = {"metadata": {"name": "r", "annotations": {which: value}}}
    for check in (td.rule_rate, td.uses_eviction_api, lambda r: td.eviction_api_max_wait(r, 0)):
        try:
            result = bounded(lambda: check(rule))  # called at once
        except td.BadAnnotation as e:
            assert which in str(e) or value in str(e), e
        else:
            assert result is None or isinstance(result, (bool, float, int))


FIELDS = dataclasses.fields(Settings)


@fuzz(
    index=st.integers(0, len(FIELDS) - 1),
    raw=st.text(max_size=40) | st.sampled_from(["1e999", "nan", "-1", "0", "9" * 5000, "true", "None", " "]),
)
def test_fuzz_settings(index, raw):
    f = FIELDS[index]
    try:
        value = bounded(lambda: parse_value(f, raw))
    except SettingsError as e:
        assert str(e).startswith(f"{f.metadata['env']}="), e
        return
    Settings.from_env({f.metadata["env"]: raw})  # the whole set takes it too
    assert value is not None
