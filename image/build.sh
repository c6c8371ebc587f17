#!/usr/bin/env bash
# Builds the project's container image with buildah (no Docker engine) and exports it as a
# docker-archive: .cache/image/dra-operators-<version>.tar, naming the image
# docker.io/library/dra-operators:<version> (what kubelet and containerd resolve
# dra-operators:<version> to; `ctr -n k8s.io images import` takes the tarball as it is).
#
#   image/build.sh              (or `make image`)
#   IMAGE_BASE=python:3.11-slim image/build.sh     a base to pull instead of the local one
#
# The base is, unless IMAGE_BASE says otherwise, localhost/dra-operators-base:bookworm: Debian's
# python3 from debootstrap (image/base.sh), built once per machine. Its root filesystem is cached as
# a tarball in ${XDG_CACHE_HOME:-~/.cache}/dra-operators/image/ with a stamp of the recipe (suite,
# package list, mirror, base.sh), so a fresh clone only imports it; a new recipe rebuilds it.
# buildah's --layers keeps the dependency layer while requirements.lock and the base are unchanged.
# Root only. buildah and debootstrap are installed with apt-get when missing. STORAGE_DRIVER (e.g.
# vfs) is passed on to buildah as it reads it. RUN steps use chroot isolation (BUILDAH_ISOLATION
# chooses another): buildah's default, oci with crun, fails on hosts with hybrid cgroups ("cgroups
# in hybrid mode not supported"), and the build needs no more than a chroot with the host's network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
checkout=$(cd "$here/.." && pwd)

SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates
MIRROR=${IMAGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOCAL_BASE=localhost/dra-operators-base:$SUITE
base=${IMAGE_BASE:-$LOCAL_BASE}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$checkout/pyproject.toml" | head -n 1)
[[ -n $version ]] || { echo "image: no version in $checkout/pyproject.toml" >&2; exit 1; }
image=localhost/dra-operators:$version
archive_name=docker.io/library/dra-operators:$version
out_dir=$checkout/.cache/image
archive=$out_dir/dra-operators-$version.tar
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dra-operators/image
total=$SECONDS

if [[ $(id -u) -ne 0 ]]; then
  echo "image: needs root (buildah's storage in /var/lib/containers, debootstrap's chroot)" >&2
  exit 1
fi

# Debian packages the build needs, installed only when missing (as lab/build.sh does).
apt_install() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return
  echo "image: installing Debian packages ${missing[*]} (apt-get)"
  # One apt-get at a time: `make test` builds the lab (which installs libseccomp-dev) beside this.
  flock /tmp/dra-operators-apt.lock sh -c 'apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "$@" >/dev/null; }' sh "${missing[@]}"
}
apt_install buildah debootstrap
if ! err=$(buildah info 2>&1 >/dev/null); then
  echo "image: buildah cannot use its storage: ${err##*$'\n'}" >&2
  echo "image: where overlay does not work, STORAGE_DRIVER=vfs make image uses the slower vfs driver" >&2
  exit 1
fi

mkdir -p "$cache" "$out_dir"
# One build at a time on this machine (two test sessions, two clones): they share the base cache
# and buildah's storage.
exec 9>"$cache/.lock"
if ! flock -n 9; then
  echo "image: waiting for another image build on this machine ($cache/.lock)"
  flock 9
fi

# A short name (python:3.11-slim) means Docker Hub, as it does for `docker build`.
qualify() {
  local name=$1 first=${1%%/*}
  if [[ $name != */* ]]; then echo "docker.io/library/$name"
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then echo "docker.io/$name"
  else echo "$name"; fi
}

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# The local base: the cached root filesystem tarball (built when its recipe changed), imported
# into buildah's storage when the image there is missing or from another recipe.
local_base() {
  local stamp_text want tarball=$cache/base-$SUITE.tar stamp=$cache/base-$SUITE.stamp
  stamp_text=$(printf 'suite=%s\npackages=%s\nmirror=%s\nbase.sh=%s\n' "$SUITE" "$PACKAGES" "$MIRROR" \
               "$(sha256sum < "$here/base.sh" | cut -c1-16)")
  want=$(sha256sum <<< "$stamp_text" | cut -c1-16)
  if [[ -f $tarball && "$(cat "$stamp" 2>/dev/null)" == "$stamp_text" ]]; then
    echo "image: base root filesystem cached ($tarball)"
  else
    echo "image: building the base root filesystem: debootstrap $SUITE minbase + $PACKAGES (a few minutes) ..."
    local start=$SECONDS
    rm -f "$stamp"
    "$here/base.sh" "$SUITE" "$PACKAGES" "$MIRROR" "$tarball"
    printf '%s\n' "$stamp_text" > "$stamp"
    echo "image: base root filesystem done in $((SECONDS - start))s ($(du -m "$tarball" | cut -f1) MiB, $tarball)"
  fi
  if have_image "$LOCAL_BASE" && [[ "$(buildah inspect --type image \
       --format '{{index .OCIv1.Config.Labels "dra-operators.base.recipe"}}' "$LOCAL_BASE")" == "$want" ]]; then
    echo "image: base image $LOCAL_BASE up to date"
    return
  fi
  echo "image: importing the base root filesystem as $LOCAL_BASE ..."
  local start=$SECONDS ctr mnt
  ctr=$(buildah from --quiet scratch)
  mnt=$(buildah mount "$ctr")
  if ! tar --numeric-owner -xpf "$tarball" -C "$mnt"; then
    buildah rm "$ctr" >/dev/null; exit 1
  fi
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /usr/bin/python3 --label "dra-operators.base.recipe=$want" \
    --created-by "image/base.sh: debootstrap --variant=minbase --include=$PACKAGES $SUITE" "$ctr"
  buildah commit --quiet --rm "$ctr" "$LOCAL_BASE" >/dev/null
  echo "image: base image imported in $((SECONDS - start))s"
}

if [[ $base == "$LOCAL_BASE" ]]; then
  local_base
else
  base=$(qualify "$base")
  if have_image "$base"; then
    echo "image: base $base (local)"
  else
    echo "image: pulling the base $base ..."
    if ! err=$(buildah pull --quiet "$base" 2>&1 >/dev/null); then
      cat >&2 <<MSG
image: the base image $base is not in buildah's storage and could not be pulled:
  ${err##*$'\n'}
Set IMAGE_BASE to an image this machine has or can pull (IMAGE_BASE=python:3.11-slim make image
where Docker Hub is reachable), or leave it unset to build the local Debian base $LOCAL_BASE.
MSG
      exit 2
    fi
  fi
fi

# pip in the RUN steps reaches PyPI the way the host does: its network, and its CA bundle (where
# a proxy intercepts TLS, the host trusts a CA that the base image does not), mounted read-only.
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
ca_args=()
[[ -f $ca ]] && ca_args=(--volume "$ca:/run/host-ca-certificates.crt:ro" --build-arg PIP_CERT=/run/host-ca-certificates.crt)
echo "image: building $image from $base (buildah bud --layers) ..."
start=$SECONDS
buildah bud --layers --force-rm --isolation "${BUILDAH_ISOLATION:-chroot}" --network host "${ca_args[@]}" \
  --build-arg "BASE=$base" --build-arg "VERSION=$version" \
  --tag "$image" --file "$checkout/Dockerfile" "$checkout"
echo "image: built $image in $((SECONDS - start))s"
current=$(buildah inspect --type image --format '{{.FromImageID}}' "$image")
# Earlier builds' images that nothing names any more (the tag moved on; a test's import name was
# removed) are garbage: ~170 MiB each. Only images with this project's label, never the layer cache.
for old in $(buildah images --quiet --no-trunc --filter dangling=true \
               --filter label=org.opencontainers.image.title=dra-operators); do
  [[ ${old#sha256:} == "${current#sha256:}" ]] || buildah rmi "$old" >/dev/null 2>&1 || true
done

echo "image: exporting $archive_name ..."
start=$SECONDS
rm -f "$archive.tmp"
# By ID: pushed by name, buildah 1.28 also writes localhost/dra-operators into the archive's RepoTags.
buildah push --quiet "$current" "docker-archive:$archive.tmp:$archive_name"
mv "$archive.tmp" "$archive"
echo "image: exported in $((SECONDS - start))s"
echo "image: $archive ($(du -m "$archive" | cut -f1) MiB) as $archive_name, total $((SECONDS - total))s"
