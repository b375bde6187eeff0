"""The arguments of the job commands (kubectl's spellings) and `kerasjob completion`."""

from __future__ import annotations

import argparse
import functools
from typing import Any

from kerasjob.cli import jobs as cli_jobs


def _common() -> argparse.ArgumentParser:
    """-n, --context and --kubeconfig after the command too, as kubectl takes them."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "-n",
        "--namespace",
        dest="namespace_single",
        metavar="NAMESPACE",
        help="namespace (default: the kubeconfig context's, else 'default')",
    )
    p.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context")
    p.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file")
    return p


def _timeout(text: str) -> float:
    """600, 600s, 10m, 1h."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 600, 90s, 10m)") from None


def add_job_commands(sub: Any, root: argparse.ArgumentParser) -> None:
    """The user commands under `sub` (`root`: the whole parser, for the completion script)."""
    common = _common()

    def command(name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name, parents=[common], help=help_text, description=help_text
        )
        p.set_defaults(func=func)
        return p

    p = command("submit", cli_jobs.submit, "create KerasJobs from files (like kubectl create)")
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="a KerasJob YAML/JSON file; repeatable",
    )
    p.add_argument("--wait", action="store_true", help="wait until the jobs succeed")
    p.add_argument("--timeout", type=_timeout, default=3600.0, help="for --wait (3600s)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="server-side dry run: validate and default, store nothing",
    )
    p.add_argument("-o", "--output", choices=("json", "yaml", "name"))
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")

    p = command("get", cli_jobs.get, "list KerasJobs: phase, restarts, progress")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-l", "--selector", help="label selector")
    p.add_argument("-o", "--output", choices=("wide", "json", "yaml", "name"))

    p = command("describe", cli_jobs.describe, "a KerasJob's spec, status, Pods and events")
    p.add_argument("name")

    p = command("logs", cli_jobs.logs, "trainer logs of the chief, one replica or all")
    p.add_argument("name")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--replica", help="ROLE-INDEX, e.g. worker-1 (default: the chief)")
    who.add_argument("--all", action="store_true", help="every replica, lines prefixed [pod]")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="stream until the job finishes, across Pod restarts",
    )
    p.add_argument("--tail", type=int, help="last N lines of each Pod")
    p.add_argument("--prefix", action="store_true", help="prefix lines with [pod]")
    earlier = p.add_mutually_exclusive_group()
    earlier.add_argument(
        "-p",
        "--previous",
        action="store_true",
        help="the trainer incarnation before the current one, also of a re-created Pod "
        "(read from the checkpoint volume by a short-lived Pod)",
    )
    earlier.add_argument(
        "--all-incarnations",
        action="store_true",
        help="every kept trainer incarnation, oldest first (from the checkpoint volume)",
    )

    p = command("wait", cli_jobs.wait, "wait for a phase or condition, showing progress")
    p.add_argument("name")
    p.add_argument(
        "--for",
        dest="for_",
        default="Succeeded",
        help="phase or condition, e.g. Running, condition=Suspended "
        "(comma-separated: any of them); default Succeeded",
    )
    p.add_argument("--timeout", type=_timeout, default=600.0, help="600s")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")

    for name, func, text in (
        ("suspend", cli_jobs.suspend, "suspend KerasJobs (Pods deleted, state kept)"),
        ("resume", cli_jobs.resume, "resume suspended KerasJobs from their last backup"),
    ):
        p = command(name, func, text)
        p.add_argument("names", nargs="+", metavar="NAME")

    p = command("delete", cli_jobs.delete, "delete KerasJobs (and their Pods)")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--wait", action="store_true", help="until the job and its Pods are gone")
    p.add_argument("--timeout", type=_timeout, default=120.0)
    p.add_argument("--ignore-not-found", action="store_true")

    p = command("status", cli_jobs.status, "show KerasJobs' phase, restarts and progress")
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "convert",
        help="turn a Kubeflow TFJob (kubeflow.org/v1) into a KerasJob; warnings on stderr",
    )
    p.add_argument("filename", help="TFJob YAML file, - for stdin")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--checkpoint-claim",
        default="kerasjob-ckpt",
        help="ReadWriteMany claim for a multi-Pod job's checkpoints",
    )
    where.add_argument(
        "--checkpoint",
        metavar="LOCATION",
        help="a bucket for the checkpoints instead of a claim: s3://BUCKET[/PREFIX] or "
        "gs://BUCKET[/PREFIX] (spec.checkpoint.location)",
    )
    p.add_argument(
        "--checkpoint-secret",
        metavar="NAME",
        help="with --checkpoint: the Secret of the bucket's credentials (default: the Pods' "
        "own identity)",
    )
    p.set_defaults(func=cli_jobs.convert)

    p = sub.add_parser(
        "completion", help="print a shell completion script: source <(kerasjob completion bash)"
    )
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=functools.partial(_completion, root))


def _completion(root: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    print(completion_script(root, args.shell))
    return 0


def completion_script(root: argparse.ArgumentParser, shell: str = "bash") -> str:
    """Commands, their flags and (from the cluster) job names; bash, or zsh via bashcompinit."""
    subs = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, p in subs.choices.items():
        flags = " ".join(o for a in p._actions for o in a.option_strings)
        takes_jobs = any(a.dest in ("name", "names") for a in p._actions)
        cases.append(f"    {name}) flags='{flags}'; jobs={int(takes_jobs)} ;;")
    commands = " ".join(subs.choices)
    script = f"""# kerasjob shell completion ({shell}); generated by `kerasjob completion {shell}`
_kerasjob() {{
  local cur cmd flags jobs i
  cur="${{COMP_WORDS[COMP_CWORD]}}"
  cmd=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in -*) ;; *) cmd="${{COMP_WORDS[i]}}"; break ;; esac
  done
  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "{commands}" -- "$cur")); return
  fi
  case "$cmd" in
{chr(10).join(cases)}
    *) flags=''; jobs=0 ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [ "$jobs" = 1 ]; then
    COMPREPLY=($(compgen -W "$(kerasjob get -o name 2>/dev/null | sed 's|.*/||')" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -F _kerasjob kerasjob
complete -F _kerasjob kubectl-kerasjob
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script
