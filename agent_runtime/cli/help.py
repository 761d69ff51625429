"""The CLI's examples (shown by each subcommand's `--help`) and shell completion.

`agent-runtime completion bash|zsh|fish` prints a completion script built
from the parser itself, so every subcommand and flag completes and none is
forgotten when one is added:

    eval "$(agent-runtime completion bash)"          # in ~/.bashrc
    agent-runtime completion fish > ~/.config/fish/completions/agent-runtime.fish
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXAMPLES: dict[str, list[str]] = {
    "validate": ["agent-runtime validate examples/triage.agent.yaml"],
    "run": ["agent-runtime run examples/triage.agent.yaml --model scripted/echo "
            "--tools examples/tools.py --stream"],
    "run-manifest": ["agent-runtime run-manifest tests/fixtures/manifests/release-brief.run.yaml "
                     "--model scripted/echo"],
    "resume": ["agent-runtime resume run_0190c2a4... --max-total-tokens 20000"],
    "approve": ["agent-runtime approve run_0190c2a4... --response '\"ship it\"' --resume"],
    "effects": ["agent-runtime effects run_0190c2a4...",
                "agent-runtime effects resolve run_0190c2a4... KEY --skip"],
    "fork": ["agent-runtime fork run_0190c2a4... --seq 3"],
    "cancel": ["agent-runtime cancel run_0190c2a4..."],
    "inspect": ["agent-runtime inspect run_0190c2a4... --checkpoints",
                "agent-runtime inspect run_0190c2a4... --seq 3 --state"],
    "list": ["agent-runtime list --status suspended --limit 20"],
    "events": ["agent-runtime events --run run_0190c2a4... --type 'model.*' --tail 20"],
    "reconcile": ["agent-runtime reconcile --once"],
    "config": ["agent-runtime config validate agent-runtime.config.yaml"],
    "completion": ['eval "$(agent-runtime completion bash)"'],
    "examples": ["agent-runtime examples list", "agent-runtime examples run variables --stream"],
}

SHELLS = ("bash", "zsh", "fish")


def add_completion_parser(commands: Any) -> None:
    completion = commands.add_parser(
        "completion", help="print a shell completion script",
        description="Print a completion script for bash, zsh or fish.",
        epilog="example:\n  " + "\n  ".join(EXAMPLES["completion"]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    completion.add_argument("shell", choices=SHELLS)


def _words(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Subcommand -> its flags (and fixed choices); "" -> the subcommands."""
    words: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words[""] = sorted(action.choices)
            for name, sub in action.choices.items():
                flags = [flag for item in sub._actions for flag in item.option_strings
                         if flag.startswith("--")]
                choices = [str(choice) for item in sub._actions if not item.option_strings
                           and item.choices for choice in item.choices]
                words[name] = sorted(set(flags)) + choices
    words[""] += ["--help", "--version"]
    return words


def completion_script(shell: str, parser: argparse.ArgumentParser) -> str:
    words = _words(parser)
    if shell == "bash":
        cases = "\n".join(f'        {name}) opts="{" ".join(flags)}" ;;'
                          for name, flags in sorted(words.items()) if name)
        return f"""_agent_runtime() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" opts
    if [ "$COMP_CWORD" -eq 1 ]; then
        opts="{" ".join(words[""])}"
    else
        case "${{COMP_WORDS[1]}}" in
{cases}
        *) opts="" ;;
        esac
    fi
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    [ ${{#COMPREPLY[@]}} -eq 0 ] && COMPREPLY=($(compgen -f -- "$cur"))
    return 0
}}
complete -o filenames -F _agent_runtime agent-runtime
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + completion_script(
            "bash", parser)
    lines = [f"complete -c agent-runtime -n __fish_use_subcommand -a {name}"
             for name in words[""] if not name.startswith("-")]
    for name, flags in sorted(words.items()):
        for flag in flags:
            if name and flag.startswith("--"):
                lines.append(f"complete -c agent-runtime -n '__fish_seen_subcommand_from "
                             f"{name}' -l {flag[2:]}")
    return "\n".join(lines) + "\n"


def cmd_completion(args: argparse.Namespace) -> int:
    from agent_runtime.cli.main import build_parser  # noqa: PLC0415 - the parser this completes

    sys.stdout.write(completion_script(args.shell, build_parser()))
    return 0
