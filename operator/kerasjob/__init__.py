"""kerasjob: a Kubernetes operator for distributed Keras training."""

API_GROUP = "kerasjob.dev"
API_VERSION = "v1alpha1"
KIND = "KerasJob"
PLURAL = "kerasjobs"
