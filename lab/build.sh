#!/usr/bin/env bash
# Builds the lab's binaries into $1 (default: ../.cache/lab/bin), one at a time, printing progress.
# A binary is rebuilt only when its module (go.mod/go.sum, hence versions.env) changed, so a warm
# run takes seconds. Go's own build cache makes a rebuild after a change incremental.
#
# `build.sh --node [DIR]` builds what real nodes need instead (`lab up --real-nodes`): kubelet,
# containerd, its runc shim and ctr, runc, the CNI plugins bridge, host-local and loopback, and
# Debian's busybox-static (for the pause and workload images); Debian's libseccomp-dev and
# pkg-config (runc's seccomp support) and busybox-static are installed with apt-get when missing.
#
# `build.sh --e2e [DIR]` builds what `make e2e` needs: e2e-dra.test, upstream's DRA e2e tests
# (lab/e2e/e2e_test.go) as a test binary, ginkgo's CLI, the hostpathplugin stand-in for its proxy
# Pods and upstream's sample device plugin (the images of both: operators/lab/images.py).
#
# `build.sh [--node] --kubernetes 1.35 [DIR]` builds an older release (KUBERNETES_OLDER_VERSIONS)
# into DIR (default ../.cache/lab/1.35/bin): its kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl (with --node: its kubelet), from the modules in releases/1.35; etcd,
# kwok, toxiproxy and the real nodes' runtime are the default build's, linked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=false e2e=false monitoring=false release=""
if [[ ${1:-} == --node ]]; then node=true; shift; fi
if [[ ${1:-} == --kubernetes ]]; then release=$2; shift 2; fi
if [[ ${1:-} == --monitoring ]]; then monitoring=true; shift; fi
if [[ ${1:-} == --e2e ]]; then e2e=true; shift; fi
out=${1:-$here/../.cache/lab/${release:+$release/}bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
k8s_modules=""  # where the kubernetes and kubelet modules are, under lab/
if [[ -n $release ]]; then
  KUBERNETES_VERSION=$(for v in $KUBERNETES_OLDER_VERSIONS; do if [[ $v == "v$release".* ]]; then echo "$v"; fi; done)
  if [[ -z $KUBERNETES_VERSION ]]; then
    echo "lab-build: Kubernetes $release is not one of KUBERNETES_OLDER_VERSIONS ($KUBERNETES_OLDER_VERSIONS) in lab/versions.env" >&2
    exit 2
  fi
  k8s_modules=releases/$release/
fi

k8s_minor=${KUBERNETES_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# build MODULE BINARY PACKAGE [LDFLAGS [TAGS [CGO [TEST]]]]: TEST=test builds PACKAGE's tests
# (go test -c). The stamp covers the module's own .go files (only lab/e2e has any).
build() {
  local module=$1 name=$2 pkg=$3 flags=${4:-} tags=${5:-} cgo=${6:-} test=${7:-}
  local stamp="$out/.${name//\//-}.stamp"
  local want
  # The module's go.mod pins the version (gen-modules.sh writes it from versions.env); the flags
  # carry the version string. So a new pin in versions.env rebuilds only what it concerns.
  want=$( (printf '%s\n' "$pkg" "$flags"; [[ -z $tags$cgo ]] || printf '%s\n' "$tags" "$cgo"
           cat "$here/$module/go.mod" "$here/$module/go.sum"
           find "$here/$module" -name '*.go' -print0 | sort -z | xargs -0r cat) | sha256sum | cut -c1-16)
  if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "lab-build: $name up to date"
    return
  fi
  echo "lab-build: building $name ($pkg) ..."
  local start=$SECONDS
  local verb=(build)
  [[ -z $test ]] || verb=(test -c)
  (cd "$here/$module" && ${cgo:+env CGO_ENABLED=$cgo} go "${verb[@]}" -trimpath ${tags:+-tags "$tags"} \
     -ldflags "-s -w $flags" -o "$out/$name.tmp" "$pkg" && mv "$out/$name.tmp" "$out/$name")
  echo "$want" > "$stamp"
  echo "lab-build: $name done in $((SECONDS - start))s"
}

# Debian packages a real node's build needs, installed only when missing.
apt_install() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return
  echo "lab-build: installing Debian packages ${missing[*]} (apt-get)"
  local sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  # One apt-get at a time: `make test` builds the image (which installs buildah) beside this.
  $sudo flock /tmp/dra-operators-apt.lock sh -c 'apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$@" >/dev/null; }' sh "${missing[@]}"
}

if $e2e; then
  total=$SECONDS
  # The e2e binary reports its version like the lab's other binaries (the suite logs it).
  build e2e e2e-dra.test . "$ldflags" "" "" test
  build e2e hostpathplugin ./hostpathplugin "" "" 0
  build e2e ginkgo github.com/onsi/ginkgo/v2/ginkgo
  build e2e sampledeviceplugin k8s.io/kubernetes/test/images/sample-device-plugin "" "" 0
  echo "lab-build: e2e binaries in $out ($((SECONDS - total))s)"
  exit 0
fi

if $monitoring; then
  total=$SECONDS
  # Module v0.<major*100+minor>.<patch> is Prometheus <major>.<minor>.<patch> (v0.316.0: 3.16.0),
  # the version both binaries report.
  minor=${PROMETHEUS_VERSION#v0.}; patch=${minor#*.}; minor=${minor%%.*}
  prom_flags="-X github.com/prometheus/common/version.Version=$((minor / 100)).$((minor % 100)).$patch"
  prom_flags+=" -X github.com/prometheus/common/version.Branch=HEAD"
  for cmd in prometheus promtool; do
    build prometheus "$cmd" "github.com/prometheus/prometheus/cmd/$cmd" "$prom_flags" remove_all_sd 0
  done
  echo "lab-build: monitoring binaries in $out ($((SECONDS - total))s)"
  exit 0
fi

# link_default NAME...: the default build's NAME in $out (what an older release shares with it).
link_default() {
  local default=$here/../.cache/lab/bin
  for name in "$@"; do
    mkdir -p "$(dirname "$out/$name")"
    ln -sfn "$(cd "$default" && pwd)/$name" "$out/$name"
  done
}

if [[ -n $release ]]; then
  total=$SECONDS
  if $node; then
    "$here/build.sh" --node
    build "${k8s_modules}kubelet" kubelet k8s.io/kubernetes/cmd/kubelet "$ldflags"
    link_default containerd containerd-shim-runc-v2 ctr runc cni/bridge cni/loopback cni/host-local busybox
    echo "lab-build: real-node binaries of Kubernetes $KUBERNETES_VERSION in $out ($((SECONDS - total))s)"
  else
    "$here/build.sh"
    for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
      build "${k8s_modules}kubernetes" "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$ldflags"
    done
    link_default etcd kwok toxiproxy-server
    ln -sfn "$(cd "$here/../.cache/lab/kwok-stages" && pwd)" "$out/../kwok-stages"
    echo "lab-build: Kubernetes $KUBERNETES_VERSION in $out ($((SECONDS - total))s)"
  fi
  exit 0
fi

if $node; then
  total=$SECONDS
  apt_install libseccomp-dev pkg-config
  build kubelet kubelet k8s.io/kubernetes/cmd/kubelet "$ldflags"
  # CRI and CDI are part of containerd 2; no btrfs/devmapper/zfs snapshotters (no C headers needed).
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    build containerd "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" \
      "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      "no_btrfs no_devmapper no_zfs" 0
  done
  # runc with seccomp (cgo, Debian's libseccomp); Debian's own runc 1.1.5 fails CRI sandboxes here.
  build runc runc github.com/opencontainers/runc "-X main.version=${RUNC_VERSION#v}" seccomp 1
  mkdir -p "$out/cni"
  for plugin in main/bridge main/loopback ipam/host-local; do
    build cni "cni/${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin" \
      "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" "" 0
  done
  # busybox for the pause and workload images (operators/lab/images.py builds them from it):
  # Debian's busybox-static, downloaded and unpacked, not installed.
  bb=$(apt-cache policy busybox-static | awk '/Candidate:/ {print $2}')
  if [[ ! -x "$out/busybox" || "$(cat "$out/.busybox.stamp" 2>/dev/null)" != "$bb" ]]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download "busybox-static=$bb" >/dev/null && dpkg-deb -x busybox-static_*.deb root)
    cp "$tmp/root/bin/busybox" "$out/busybox.tmp" && mv "$out/busybox.tmp" "$out/busybox"
    rm -rf "$tmp"
    echo "$bb" > "$out/.busybox.stamp"
    echo "lab-build: busybox $bb from Debian's busybox-static"
  fi
  echo "lab-build: real-node binaries in $out ($((SECONDS - total))s)"
  exit 0
fi

total=$SECONDS
build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
# kwok has no built-in stages: take upstream's stage files from the same module version.
stages="$out/../kwok-stages"
if [[ ! -f "$stages/.version" || "$(cat "$stages/.version")" != "$KWOK_VERSION" ]]; then
  src=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  rm -rf "$stages" && mkdir -p "$stages"
  cp -r "$src/kustomize/stage/." "$stages/" && chmod -R u+w "$stages"
  echo "$KWOK_VERSION" > "$stages/.version"
  echo "lab-build: kwok stages copied from sigs.k8s.io/kwok@$KWOK_VERSION"
fi
for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  build kubernetes "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$ldflags"
done
# The TCP proxy in front of kube-apiserver for network faults (dra-operators lab net ...).
build toxiproxy toxiproxy-server github.com/Shopify/toxiproxy/v2/cmd/server \
  "-X github.com/Shopify/toxiproxy/v2.Version=$TOXIPROXY_VERSION"
echo "lab-build: all binaries in $out ($((SECONDS - total))s)"
