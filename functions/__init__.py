"""The Lambda functions of the AWS deployment (template.yaml), and their shared glue.

    step/app.py        advance: the state machine's task, a slice of an attempt per
                       execution (step/ownership.py: reserve, claim, hand over);
                       start: the EventBridge rule's target, which starts executions
    reconciler/app.py  the scheduled reconciler (docs/design.md section 7)

Handlers are thin: parse the event, call the engine or the store, shape the
result. What they share lives beside them: `environment` (settings, clients,
the store and the runtime a function builds once per container),
`executions` (execution names, starting an attempt, whether an execution is
alive), `resume_requests` (the `resume-requested` event) and `telemetry`
(Powertools Logger and Metrics). Each function's code is this package
(functions/Makefile); the engine and its dependencies come from the runtime
layer (layers/runtime/Makefile).
"""
