"""The kerasjob Python SDK: KerasJobs from notebooks, pipelines and scripts.

    from kerasjob.sdk import KerasJobClient, JobFailedError
    jobs = KerasJobClient(namespace="ml-team")
    job = jobs.create("examples/mnist.yaml")
    jobs.wait(job.name, timeout=900, callback=lambda j: print(summarize(j).progress))

Modules: `client` (KerasJobClient), `errors` (the exceptions), `logs` (pod logs, followed and
interleaved), `summary` (phase/restarts/progress rows), `function` (a Python function as a
job), `transport` (HTTP with the shared credentials of `kerasjob.k8s.credentials`).
"""

from kerasjob.api import KerasJob
from kerasjob.sdk.client import KerasJobClient, load_job
from kerasjob.sdk.errors import (
    AlreadyExistsError,
    ApiError,
    ConfigurationError,
    CRDNotFoundError,
    ForbiddenError,
    InvalidError,
    JobFailedError,
    KerasJobError,
    NotFoundError,
    UnreachableError,
    WaitTimeoutError,
)
from kerasjob.sdk.logs import LogLine
from kerasjob.sdk.summary import JobSummary, summarize

__all__ = [
    "AlreadyExistsError",
    "ApiError",
    "CRDNotFoundError",
    "ConfigurationError",
    "ForbiddenError",
    "InvalidError",
    "JobFailedError",
    "JobSummary",
    "KerasJob",
    "KerasJobClient",
    "KerasJobError",
    "LogLine",
    "NotFoundError",
    "UnreachableError",
    "WaitTimeoutError",
    "load_job",
    "summarize",
]
