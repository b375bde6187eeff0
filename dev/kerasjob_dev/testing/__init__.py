"""What the tests share, as one importable package (never on ``sys.path`` by a test's
folder, never one test module importing another):

* `builders` -- the planner's inputs (`JobView`, `PodView`) and a plan's actions, read back;
* `manifests` -- KerasJob bodies and readers of the Pods built from them (`manifests/` tests);
* `controller_fakes` -- an in-memory API server and indices for the controller's tests;
* `chart_operator` -- the operator installed by the Helm chart, run as a local process;
* `training_run` -- one real training run on the cluster, for the e2e tests;
* `shell` -- the project's shell scripts run as they run (`bash`).
"""
