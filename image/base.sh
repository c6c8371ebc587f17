#!/usr/bin/env bash
# Builds the image's base root filesystem from Debian's packages, as a tarball:
#   image/base.sh SUITE PACKAGES MIRROR OUT.tar
# debootstrap's minbase variant plus PACKAGES (comma-separated), trimmed the way Debian's slim
# images are (no apt lists or caches, no docs but the copyright files, no man pages, no locales but
# C.UTF-8), with a `nonroot` user and group 65532 (the Dockerfile's USER). Root only (chroot, mknod).
# image/build.sh calls it and imports the tarball as localhost/dra-operators-base:<suite>.
set -euo pipefail
suite=$1 packages=$2 mirror=$3 out=$4
work=$(mktemp -d "$(dirname "$out")/.rootfs.XXXXXX")
root=$work/rootfs
cleanup() {
  # debootstrap mounts /proc and /sys inside the target and may leave them mounted when it fails.
  for m in "$root/proc" "$root/sys" "$root/dev/pts"; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  echo "image: debootstrap failed; the end of its log:" >&2
  tail -n 20 "$work/debootstrap.log" >&2
  [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 20 "$root/debootstrap/debootstrap.log" >&2
  exit 1
fi

# The user the Dockerfile runs as (USER 65532:65532 works without it; tools then show a name).
chroot "$root" groupadd --gid 65532 nonroot
chroot "$root" useradd -K UID_MAX=65533 --uid 65532 --gid 65532 --no-create-home --no-log-init \
  --home-dir /nonexistent --shell /usr/sbin/nologin nonroot

# Packages installed later in images built on this base stay trimmed too.
cat > "$root/etc/dpkg/dpkg.cfg.d/dra-operators-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
CFG

# Trim: apt lists and caches, docs (the copyright files stay), man and info pages, translations and
# locales (C.UTF-8 stays), logs, what the runtime provides (/dev, /proc, /sys, /run, resolv.conf,
# hostname), and the machine's identity.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
  "$root"/var/lib/dpkg/*-old "$root"/var/cache/ldconfig/aux-cache \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian \
  "$root"/var/log/* "$root"/debootstrap \
  "$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/run/* "$root"/tmp/* "$root"/var/tmp/* \
  "$root"/etc/resolv.conf "$root"/etc/hostname
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
find "$root/usr/lib/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} +
[[ ! -s $root/etc/machine-id ]] || : > "$root/etc/machine-id"

tar --numeric-owner -C "$root" -cpf "$out.tmp" .
mv "$out.tmp" "$out"
