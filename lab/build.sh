#!/usr/bin/env bash
# Builds the lab's binaries into $1 (default: ../.cache/lab/bin), one at a time, printing progress.
# A binary is rebuilt only when its module (go.mod/go.sum, hence versions.env) changed, so a warm
# run takes seconds. Go's own build cache makes a rebuild after a change incremental.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.cache/lab/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck source=/dev/null
. "$here/versions.env"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

k8s_minor=${KUBERNETES_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# build MODULE BINARY PACKAGE [LDFLAGS]
build() {
  local module=$1 name=$2 pkg=$3 flags=${4:-}
  local stamp="$out/.$name.stamp"
  local want
  # The module's go.mod pins the version (gen-modules.sh writes it from versions.env); the flags
  # carry the version string. So a new pin in versions.env rebuilds only what it concerns.
  want=$( (printf '%s\n' "$pkg" "$flags"; cat "$here/$module/go.mod" "$here/$module/go.sum") | sha256sum | cut -c1-16)
  if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "lab-build: $name up to date"
    return
  fi
  echo "lab-build: building $name ($pkg) ..."
  local start=$SECONDS
  (cd "$here/$module" && go build -trimpath -ldflags "-s -w $flags" -o "$out/$name" "$pkg")
  echo "$want" > "$stamp"
  echo "lab-build: $name done in $((SECONDS - start))s"
}

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
