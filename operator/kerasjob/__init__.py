"""kerasjob: a Kubernetes operator for distributed Keras training."""

API_GROUP = "kerasjob.dev"
API_VERSION = "v1alpha1"
KIND = "KerasJob"
PLURAL = "kerasjobs"
#: spec.managedBy of a job this operator runs (also: unset). Any other value hands the job to
#: that controller (Kueue's MultiKueue sets "kueue.x-k8s.io/multikueue").
CONTROLLER_NAME = "kerasjob.dev/operator"
