"""The binding operator: for allocated devices whose ResourceSlice entry carries
``bindingConditions``, run a preparer (attach, program, ...) and report the outcome in the
claim's ``status.devices[].conditions``, which ends kube-scheduler's PreBind wait.

``kopf run -m operators.binding.operator`` registers its handlers; ``dra-operators run binding``
does the same with the suite's logging. Importing this package registers nothing.
"""
