"""The `agent-runtime` command, one module per group of subcommands.

`main` (in `cli.main`, with the parser) dispatches to the subcommand's module:
`validate` (validate, config validate), `runs` (run, resume, approve, cancel,
fork), `reads` (inspect, list, effects), `events`, `reconcile`, `serve`,
`gc`, `examples` and `help` (completion). Beside them: `flags` (defaults and
flag checks), `options` (paths, stores and run options), `store` (which store),
`runtime` (the engine a command runs), `interrupts` (Ctrl-C and SIGTERM),
`output` and `reports` (what a command prints), `errors` (exit codes).
"""

from agent_runtime.cli.main import main

__all__ = ["main"]
