"""The parameter-server runtime (spec.ps; trainer config strategy parameterServer): tf-keras
ParameterServerStrategy with the chief coordinating the workers through ClusterCoordinator.
Its pieces: `cluster` (TF_CONFIG with ps tasks), `context`, `runtime`, `server` (the ps and
worker tasks), `session` (the chief: `Model.fit` on a DatasetCreator, backups, resume),
`backup` (the chief's TF checkpoint), `train` (the bundled trainer)."""
