"""Reading an operator's /metrics text (tests, the soak)."""

from operators.core.framework.metrics import samples

TEXT = """# HELP x_total Things done.
# TYPE x_total counter
x_total{outcome="ok",driver="a"} 3.0
x_total{outcome="fail",driver="a"} 1.0
x_created{outcome="ok",driver="a"} 1.7e9
# TYPE y gauge
y 2.0
"""


def test_samples_filters_by_name_and_labels():
    assert samples(TEXT, "x_total", outcome="ok") == [({"outcome": "ok", "driver": "a"}, 3.0)]
    assert sum(v for _, v in samples(TEXT, "x_total")) == 4.0
    assert samples(TEXT, "y") == [({}, 2.0)] and samples(TEXT, "x_total", driver="b") == []
