#!/usr/bin/env bash
# The image's root filesystem, from built binaries: both binaries (debug info stripped),
# exactly the shared libraries they load and the loader, /etc for the non-root user 65532 and
# for name resolution, /tmp. No shell, no package manager, nothing else.
#
#   bash images/rootfs.sh BIN_DIR OUT_DIR      # BIN_DIR: target/release
#
# images/build.sh and the Dockerfile both call it, so both images hold the same files.
set -euo pipefail
bin=$1
rootfs=$2
binaries=(healthroute-operator healthroute-resolver)
mkdir -p "$rootfs"

for b in "${binaries[@]}"; do
  # Symbols stay (panics name their functions); the line tables the release profile keeps
  # for profiling do not.
  objcopy --strip-debug "$bin/$b" "$rootfs/$b"
  chmod 0555 "$rootfs/$b"
done

# Exactly the libraries the binaries load, at the paths the loader looks for them, and the
# loader itself. Name resolution needs no NSS module: since glibc 2.34 `files` and `dns` are
# part of libc, and nsswitch.conf below names only those.
libs=$(for b in "${binaries[@]}"; do ldd "$bin/$b"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
for lib in $libs; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done

mkdir -p "$rootfs/etc" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cat >"$rootfs/etc/passwd" <<'END'
root:x:0:0:root:/:/sbin/nologin
nonroot:x:65532:65532:nonroot:/:/sbin/nologin
END
cat >"$rootfs/etc/group" <<'END'
root:x:0:
nonroot:x:65532:
END
echo "hosts: files dns" >"$rootfs/etc/nsswitch.conf"
# Kubernetes mounts its own /etc/hosts and /etc/resolv.conf over these; they matter where the
# root filesystem runs by itself (images/smoke.sh).
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
# No CA bundle: nothing verifies a public certificate. The API client trusts the cluster's CA
# (service account or kubeconfig) and HTTPS probes accept any certificate, as Route 53's do.
