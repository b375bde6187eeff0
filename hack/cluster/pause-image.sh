#!/usr/bin/env bash
# Build the real node's Pod sandbox image kerasjob.local/pause:dev as an OCI image archive,
# without Docker: compile hack/images/pause (static Go) and pack it as one layer.
#
#   hack/cluster/pause-image.sh OUT.tar      (then: ctr -n k8s.io images import OUT.tar)
#
# The archive is reproducible (fixed mtimes and owners): the same source gives the same digest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out="${1:-}"
[ -n "$out" ] || die "usage: pause-image.sh OUT.tar"
GO="$(command -v go || true)"; [ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || die "Go not found: the pause image is compiled from hack/images/pause"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/oci/blobs/sha256"
(cd "$REPO_ROOT/hack/images/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local \
  "$GO" build -trimpath -ldflags='-s -w -buildid=' -o "$work/rootfs/pause" .) \
  || die "go build of hack/images/pause failed"

blob() {  # blob FILE: store FILE as a blob; print "sha256:<hex> <size>"
  local hex size
  hex="$(sha256sum "$1" | cut -d' ' -f1)"; size="$(stat -c %s "$1")"
  cp "$1" "$work/oci/blobs/sha256/$hex"
  echo "sha256:$hex $size"
}
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" pause
read -r layer layer_size < <(blob "$work/layer.tar")
printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$layer" > "$work/config.json"
read -r config config_size < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" > "$work/manifest.json"
read -r manifest manifest_size < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$PAUSE_IMAGE" "${PAUSE_IMAGE##*:}" > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/oci" -cf "$out.tmp" .
mv -f "$out.tmp" "$out"
