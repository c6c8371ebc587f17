from tests import versions_report as report


def test_tally_and_table_per_module_and_minor(tmp_path):
    junit = tmp_path / "1.35.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase file="tests/integration/test_examples.py" name="test_a"/>'
        '<testcase file="tests/integration/test_examples.py" name="test_b"><failure message="x"/></testcase>'
        '<testcase file="tests/integration/test_real_node.py" name="test_c"><skipped message="root"/></testcase>'
        '<testcase file="tests/integration/test_other.py" name="test_d"/>'
        "</testsuite></testsuites>"
    )
    results = report.tally(junit)
    assert results["examples"].cell() == "1 passed, **1 failed**" and results["examples"].failures == ["test_b"]
    assert results["real node"].cell() == "0 passed, 1 skipped"
    assert "test_other" not in str(results)
    table = report.build_table([("1.35", "v1.35.8"), ("1.37", "v1.37.1")], {"1.35": results})
    lines = table.splitlines()
    assert lines[0] == "| | 1.35 (`v1.35.8`) | 1.37 (`v1.37.1`) |"
    assert "| examples | 1 passed, **1 failed** | not run |" in lines
    assert len(lines) == 2 + len(report.MODULES)


def test_versions_come_from_lab_versions_env():
    default, older = report.versions()
    assert report.minor_of(default) == "1.37" and [report.minor_of(v) for v in older] == ["1.34", "1.35", "1.36"]


def test_the_page_has_the_markers_the_table_goes_between():
    text = report.PAGE.read_text()
    assert text.index(report.TABLE_START) < text.index(report.TABLE_END)
