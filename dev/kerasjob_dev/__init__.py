"""Development tooling of kerasjob, shipped in no image: the local cluster claim, the process
harnesses the tests, the demo and the benchmarks share, image build/load and the Helm install
of the operator on the local cluster, and the demo itself."""

from pathlib import Path

#: The checkout's root directory (this package is only ever used from a checkout).
REPO_ROOT = Path(__file__).resolve().parents[2]
