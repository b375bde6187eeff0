"""spec.ps: the parameter servers of a ParameterServerStrategy job, and the CEL rules that
say at apply what such a job needs (the operator's validation repeats them in the same
words)."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.config import JsonDict

from kerasjob.api.base import _TEMPLATE_SCHEMA, _cel, _Model

#: The most parameter servers a job may have.
MAX_PS_REPLICAS = 100

PS_NEEDS_CHIEF = (
    "spec.ps needs spec.chief with 1 replica: the chief coordinates parameter-server training"
)
PS_NEEDS_TENSORFLOW = "spec.ps needs backend tensorflow (tf-keras ParameterServerStrategy)"
PS_NOT_ELASTIC = (
    "spec.ps and spec.elastic do not go together: a parameter-server job already trains on "
    "through a lost worker"
)
PS_NO_EVALUATOR = (
    "spec.ps and spec.evaluator do not go together: the side-car evaluator reads "
    "MultiWorkerMirroredStrategy backups"
)

#: KerasJobSpec's rules about spec.ps (its immutability is the optional roles' rule).
PS_RULES: list[JsonDict] = [
    _cel("!has(self.ps) || (has(self.chief) && self.chief.replicas == 1)", PS_NEEDS_CHIEF),
    _cel("!has(self.ps) || self.trainer.backend == 'tensorflow'", PS_NEEDS_TENSORFLOW),
    _cel("!has(self.ps) || !has(self.elastic)", PS_NOT_ELASTIC),
    _cel(
        "!has(self.ps) || !has(self.evaluator) || self.evaluator.replicas == 0",
        PS_NO_EVALUATOR,
    ),
]


class ParameterServerSpec(_Model):
    """spec.ps: the parameter servers of a ParameterServerStrategy job."""

    replicas: int = Field(
        1,
        ge=1,
        le=MAX_PS_REPLICAS,
        description=(
            "Number of parameter-server Pods (ps tasks in TF_CONFIG), 1 to 100. They hold the "
            "model's variables; the chief coordinates the workers through "
            "ClusterCoordinator. Immutable. Default: 1."
        ),
    )
    template: dict[str, Any] | None = Field(
        None,
        description=(
            "A PodTemplateSpec merged over spec.template for the parameter servers only "
            "(e.g. more memory, no GPU), with the same merge rules. Changes apply to Pods "
            "created afterwards."
        ),
        json_schema_extra=_TEMPLATE_SCHEMA,
    )
