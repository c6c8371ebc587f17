"""Reading ginkgo's JSON reports of upstream's e2e suite and comparing two runs (make e2e)."""

from operators.lab import e2e_report as r


def spec(containers, text, state, message="", seconds=1.0, leaf="It"):
    return {
        "ContainerHierarchyTexts": containers,
        "LeafNodeText": text,
        "LeafNodeType": leaf,
        "State": state,
        "RunTime": int(seconds * 1e9),
        **({"Failure": {"Message": message}} if message else {}),
    }


def report(*specs):
    return [{"SuiteDescription": "Kubernetes DRA e2e suite", "SpecReports": list(specs)}]


def test_read_report_names_cases_and_folds_failure_states():
    results = r.read_report(
        report(
            spec(["[sig-node] [DRA]", "kubelet"], "deletes claims", "passed", seconds=40.7),
            spec(["[sig-node] [DRA]"], "times out", "timedout", "A timeout occurred\nmore"),
            spec(["[sig-node] [DRA]"], "panics", "panicked", "boom"),
            spec(["[sig-node] [DRA]"], "needs gce", "skipped", "Only supported for providers [gce] (not local)"),
            spec([], "Kubernetes e2e JUnit report", "passed", leaf="ReportAfterSuite"),
        )
    )
    assert set(results) == {
        "[sig-node] [DRA] kubelet deletes claims",
        "[sig-node] [DRA] times out",
        "[sig-node] [DRA] panics",
        "[sig-node] [DRA] needs gce",
    }
    assert results["[sig-node] [DRA] kubelet deletes claims"] == r.Result(
        "[sig-node] [DRA] kubelet deletes claims", r.PASSED, "", 40.7
    )
    assert results["[sig-node] [DRA] times out"].state == r.FAILED
    assert results["[sig-node] [DRA] times out"].message == "A timeout occurred"
    assert results["[sig-node] [DRA] panics"].state == r.FAILED
    assert results["[sig-node] [DRA] needs gce"].state == r.SKIPPED
    assert r.summary(results.values()) == {"passed": 1, "failed": 2, "skipped": 1, "run": 3}


def test_verdicts_cover_every_pair():
    p, f, s = (r.Result("x", state) for state in (r.PASSED, r.FAILED, r.SKIPPED))
    assert r.verdict(p, p) == r.BOTH_PASS
    assert r.verdict(f, p) == r.OURS_ONLY_FAILS
    assert r.verdict(p, f) == r.UPSTREAM_ONLY_FAILS
    assert r.verdict(f, f) == r.BOTH_FAIL
    assert r.verdict(s, s) == r.BOTH_SKIP
    assert r.verdict(f, None) == r.OURS_ONLY_FAILS
    assert r.verdict(p, s) == "passed with ours, skipped with upstream's"


def test_table_lists_our_failures_first_with_reviewed_causes():
    ours = {
        "a": r.Result("a", r.PASSED),
        "b": r.Result("b", r.FAILED, "claim not deleted | after 5m"),
        "c": r.Result("c", r.FAILED, "lab has no ssh"),
    }
    upstream = {"a": r.Result("a", r.PASSED), "b": r.Result("b", r.PASSED), "c": r.Result("c", r.FAILED, "x")}
    table = r.render_table(ours, upstream, {"c": "needs SSH to the node"}).splitlines()
    assert table[0] == "| Case | Ours | Upstream's | Verdict | Why |"
    assert table[2] == "| b | failed | passed | fails only with ours | claim not deleted \\| after 5m |"
    assert table[3] == "| c | failed | failed | fails with both | needs SSH to the node |"
    assert table[4] == "| a | passed | passed | passes with both |  |"
    assert r.pass_ratio(ours, upstream) == (1, 2)


def test_page_states_counts_ratio_and_command():
    from operators.lab.e2e import render_page

    ours = {"a": r.Result("a", r.PASSED), "b": r.Result("b", r.FAILED, "boom"), "c": r.Result("c", r.SKIPPED, "gce")}
    upstream = {"a": r.Result("a", r.PASSED), "b": r.Result("b", r.PASSED), "c": r.Result("c", r.SKIPPED, "gce")}
    page = render_page(ours, upstream, {}, "make e2e", {"ours": 16.7, "upstream": 17.2})
    assert "    make e2e\n" in page
    assert "- With ours: 2 run, 1 passed, 1 failed, 1 skipped (17 min)." in page
    assert "- With upstream's: 2 run, 2 passed, 0 failed, 1 skipped (17 min)." in page
    assert "Of the 2 cases that pass with upstream's controllers, 1 pass with ours." in page
    assert "| b | failed | passed | fails only with ours | boom |" in page
