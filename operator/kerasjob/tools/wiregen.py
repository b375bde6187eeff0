"""Generate `kerasjob/api/wire.py`, the status's wire format, from the pydantic models.

    python -m kerasjob.tools.wiregen            # (re)write operator/kerasjob/api/wire.py
    python -m kerasjob.tools.wiregen --check    # exit 1 with a diff if out of date

The models in `kerasjob.api` (`KerasJobStatus` and everything it holds) are the status's one
definition: the CRD's schema is generated from them (`crdgen`), and so are the TypedDicts
the planner builds the status with and the SDK reads it through: one per model, named as
the model (``KerasJobStatus`` -> ``Status``), keyed by its fields' aliases (camelCase), every
key optional (a stored status may lack any). Timestamps and enums are their JSON strings.
`make crds` runs both generators; ``tests/unit/test_status_wire.py`` fails on drift.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import sys
import textwrap
import types
import typing
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

import pydantic

from kerasjob.api import KerasJobStatus

#: The generated module, from the repository root.
PATH = Path("operator/kerasjob/api/wire.py")

HEADER = '''"""The job's status in its wire format: TypedDicts with the camelCase keys the operator
writes (``status.phase``, ``status.trackedPods[name].restartCount`` ...), generated from the
pydantic models (`kerasjob.api.status`, the status's one definition, which the CRD's schema
is generated from too) by `kerasjob.tools.wiregen` (`make crds`). Do not edit: change the
model and regenerate (``tests/unit/test_status_wire.py`` fails on drift).

All are ``total=False``: a stored status may lack any key (a job never run, an older
operator's status), and the planner reads each with ``.get``.
"""

from __future__ import annotations

from typing import TypedDict
'''

Model = type[pydantic.BaseModel]


def name_of(model: Model) -> str:
    """The TypedDict's name: the model's, without the kind's prefix."""
    return model.__name__.removeprefix("KerasJob")


def annotation(tp: object) -> str:
    """A field's type in the wire format, as source text."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return annotation(args[0])
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return annotation(inner)
    if origin is list:
        return f"list[{annotation(args[0])}]"
    if origin is dict:
        return f"dict[{annotation(args[0])}, {annotation(args[1])}]"
    if origin is typing.Literal:
        return "str"
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return name_of(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum | datetime):
        return "str"  # their JSON form
    if tp in (str, int, float, bool):
        return typing.cast(type, tp).__name__
    raise TypeError(f"no wire type for {tp!r}")


def _models_in(tp: object) -> Iterator[Model]:
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        yield tp
    for arg in typing.get_args(tp):
        yield from _models_in(arg)


def models(root: Model = KerasJobStatus) -> list[Model]:
    """``root`` and every model inside it, each after the models it holds."""
    out: list[Model] = []

    def visit(model: Model) -> None:
        for field in model.model_fields.values():
            for inner in _models_in(field.annotation):
                if inner not in out:
                    visit(inner)
        if model not in out:
            out.append(model)

    visit(root)
    return out


def typeddict(model: Model) -> str:
    """One model as a TypedDict's source."""
    summary = (model.__doc__ or "").strip().split("\n\n")[0]
    doc = " ".join(summary.split()).rstrip(".") + f" (`{model.__module__}.{model.__name__}`)."
    wrapped = textwrap.fill(doc, width=92, break_on_hyphens=False)
    lines = [f"class {name_of(model)}(TypedDict, total=False):"]
    lines.append(textwrap.indent(f'"""{wrapped}"""', "    "))
    lines.append("")
    for name, field in model.model_fields.items():
        lines.append(f"    {field.alias or name}: {annotation(field.annotation)}")
    return "\n".join(lines) + "\n"


def render() -> str:
    """The whole generated module."""
    return HEADER + "".join(f"\n\n{typeddict(m)}" for m in models())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kerasjob.tools.wiregen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=PATH, help="the module to write")
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 with a diff if out of date"
    )
    args = parser.parse_args(argv)
    path: Path = args.out
    text = render()
    current = path.read_text() if path.exists() else ""
    if args.check:
        if current == text:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=str(path),
            tofile=f"{path} (generated)",
        )
        sys.stdout.writelines(diff)
        print(f"\n{path} is out of date: run `make crds`", file=sys.stderr)
        return 1
    if current != text:
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
