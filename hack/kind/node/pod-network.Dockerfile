# kerasjob.local/kind-pod-network:dev, the Pod network of the local kind node image
# (files/default-cni.yaml, files/pod-network): the Debian rootfs, iproute2 from the Debian
# mirror, kubectl of `make binaries`. Built by hack/kind/node-image.sh.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 \
 && rm -rf /var/lib/apt/lists/*
COPY kubectl /usr/local/bin/kubectl
COPY pod-network /usr/local/bin/pod-network
ENTRYPOINT ["/usr/local/bin/pod-network"]
