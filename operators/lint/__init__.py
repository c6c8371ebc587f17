"""``dra-operators lint`` / ``kubectl dra lint``: DRA YAML checked before it is applied.

documents.py reads the files, rules.py holds the checks (pure functions over the documents and,
when a cluster answers, what it publishes), cluster.py asks the API server (served versions,
DeviceClasses, ResourceSlices, templates, namespaces, and a server-side apply dry run of each
object), report.py renders the findings.
"""
