#!/usr/bin/env bash
# Builds the gdn OCI image with buildah from `scratch`: nothing is pulled
# from a container registry. The image holds the given `gdn` binary, the
# shared libraries it links (from this machine), a static busybox for
# /bin/sh and the usual commands, a static tini as PID 1, and the CA
# certificates. It runs as uid 10001 with its System Root on the volume
# /var/lib/goondan; paths, user and entrypoint are those of the
# Dockerfile's default target (deploy/README.md, "The gdn image").
#
# Needs (Debian): buildah, busybox-static, tini, ca-certificates, tar.
# With --check it runs, inside a container of the new image, `gdn
# --version`, an offline scripted Turn of examples/two-agents, and one of
# deploy/image/shell-check, whose bash tool call runs the image's /bin/sh.
# --check-only runs those checks on an image built elsewhere (the
# Dockerfile's), and --dockerfile-bases builds, instead of the image,
# stand-ins for the Dockerfile's base images (deploy/image/stand-ins), so
# that the Dockerfile builds with no registry either.
set -euo pipefail

# What the image is. The Dockerfile says the same; the CLI test
# deploy_image checks that the two agree.
image_user=10001:10001
image_home=/home/goondan
state_root=/var/lib/goondan
workdir=/bundle
entrypoint='["/usr/bin/tini", "--", "/usr/local/bin/gdn"]'
image_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

repo="$(cd "$(dirname "$0")/../.." && pwd)"
program="deploy/image/build.sh"

usage() {
  cat <<EOF
Usage: $program [OPTIONS] GDN_BINARY

Builds an OCI image around GDN_BINARY (target/release/gdn for a
deployment, target/debug/gdn in CI) with buildah, from scratch.
buildah uses the vfs storage driver unless STORAGE_DRIVER says otherwise,
and runs the check with chroot isolation unless BUILDAH_ISOLATION does.

Options:
  --tag NAME        the image name [default: localhost/goondan/gdn:VERSION,
                    VERSION from \`GDN_BINARY --version\`]
  --archive FILE    also write the image as an OCI archive to FILE
  --storage DIR     a buildah store of its own under DIR, instead of
                    buildah's default one (/var/lib/containers/storage
                    for root)
  --dockerfile-bases
                    instead of the image, build stand-ins for the
                    Dockerfile's base images (rust, debian) from scratch,
                    and print their names as RUST_IMAGE=... and
                    DEBIAN_IMAGE=..., the Dockerfile's build arguments
  --check-only      run the check of --check on the image --tag names,
                    built elsewhere (by buildah build from the
                    Dockerfile), around GDN_BINARY; build nothing
  --check           run \`gdn --version\` and an offline scripted Turn
                    (examples/two-agents) inside the new image
  -h, --help        print this help
EOF
}

fail() {
  echo "error: $program: $1" >&2
  if [ $# -gt 1 ]; then
    echo "  = help: $2" >&2
  fi
  exit 1
}

tag=""
archive=""
storage=""
check=false
bases=false
check_only=false
gdn=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) [ $# -ge 2 ] || fail "--tag needs a value" "--tag localhost/goondan/gdn:dev"; tag="$2"; shift 2 ;;
    --archive) [ $# -ge 2 ] || fail "--archive needs a value" "--archive gdn.tar"; archive="$2"; shift 2 ;;
    --storage) [ $# -ge 2 ] || fail "--storage needs a value" "--storage /tmp/gdn-image"; storage="$2"; shift 2 ;;
    --check) check=true; shift ;;
    --dockerfile-bases) bases=true; shift ;;
    --check-only) check=true; check_only=true; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) fail "unknown option $1" "run $program --help" ;;
    *) [ -z "$gdn" ] || fail "more than one binary given ($gdn, $1)" "give one GDN_BINARY"; gdn="$1"; shift ;;
  esac
done
if $bases && { $check || [ -n "$archive" ]; }; then
  fail "--dockerfile-bases builds no gdn image to check or archive" "leave out --check and --archive"
fi
if $check_only && { [ -z "$tag" ] || [ -n "$archive" ] || $bases; }; then
  fail "--check-only checks the image --tag names and builds nothing" "--check-only --tag localhost/goondan/gdn:dockerfile GDN_BINARY"
fi
[ -n "$gdn" ] || fail "no gdn binary given" "$program target/release/gdn (build it with: cargo build --release --locked -p gdn)"
if [ ! -f "$gdn" ] || [ ! -x "$gdn" ]; then
  fail "$gdn is not an executable file" "build it first: cargo build --release --locked -p gdn"
fi

# Every tool and file the image is made of, each named with the Debian
# package that brings it.
command -v buildah >/dev/null || fail "buildah is not installed" "apt-get install buildah"
command -v tar >/dev/null || fail "tar is not installed" "apt-get install tar"
busybox=/bin/busybox
[ -x "$busybox" ] || fail "$busybox is missing" "apt-get install busybox-static"
# ldd fails on a static executable: busybox and tini must run without any
# library, since only gdn's libraries are copied.
! ldd "$busybox" >/dev/null 2>&1 || fail "$busybox is dynamically linked" "apt-get install busybox-static (it replaces busybox)"
tini=/usr/bin/tini-static
[ -x "$tini" ] || fail "$tini is missing" "apt-get install tini"
! ldd "$tini" >/dev/null 2>&1 || fail "$tini is dynamically linked" "reinstall tini: apt-get install --reinstall tini"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || fail "$ca_bundle is missing" "apt-get install ca-certificates"

version_line="$("$gdn" --version | head -n 1)" || fail "$gdn --version failed" "is it a gdn binary for this machine?"
case "$version_line" in
  "gdn "*) ;;
  *) fail "$gdn --version printed '$version_line', not 'gdn VERSION'" "give the path of the gdn binary" ;;
esac
version="${version_line##* }"
[ -n "$tag" ] || tag="localhost/goondan/gdn:$version"

# vfs works wherever buildah does, in a container too (overlay on an
# overlay root does not); for one layer it costs nothing. STORAGE_DRIVER
# and BUILDAH_ISOLATION are buildah's own variables.
buildah=(buildah --storage-driver "${STORAGE_DRIVER:-vfs}")
if [ -n "$storage" ]; then
  mkdir -p "$storage"
  storage="$(cd "$storage" && pwd)"
  buildah+=(--root "$storage/root" --runroot "$storage/run")
fi
isolation="${BUILDAH_ISOLATION:-chroot}"

work="$(mktemp -d)"
container=""
cleanup() {
  if [ -n "$container" ]; then
    "${buildah[@]}" rm "$container" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# What every image made here holds: the loader and every library ldd
# resolves for gdn, at the paths the binary asks for (a static gdn has
# none: ldd fails on it), the static busybox with a link per command where
# DIR has no file yet, /tmp and /root.
stage_system() {
  local dir="$1"
  mkdir -p "$dir/bin" "$dir/tmp" "$dir/root" "$dir/etc"
  chmod 1777 "$dir/tmp"
  chmod 700 "$dir/root"
  if ldd "$gdn" >"$work/ldd" 2>/dev/null; then
    if grep -q "not found" "$work/ldd"; then
      fail "$gdn links a library this machine lacks: $(grep "not found" "$work/ldd" | head -n 1)" "install it, or build gdn on this machine"
    fi
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' "$work/ldd" | while read -r library; do
      mkdir -p "$dir$(dirname "$library")"
      cp -L "$library" "$dir$library"
    done
  fi
  cp "$busybox" "$dir/bin/busybox"
  "$busybox" --list-full | while read -r applet; do
    if [ ! -e "$dir/$applet" ] && [ ! -L "$dir/$applet" ]; then
      mkdir -p "$dir/$(dirname "$applet")"
      ln -s /bin/busybox "$dir/$applet"
    fi
  done
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
}

# One image from the folder DIR, as root:root, named NAME.
commit_folder() {
  local dir="$1" name="$2"
  tar --create --file "$work/folder.tar" --directory "$dir" --sort=name \
    --owner=0 --group=0 --numeric-owner .
  container="$("${buildah[@]}" from scratch)" ||
    fail "buildah could not start a container" "run as root, or give this user subordinate ids for rootless buildah (/etc/subuid, /etc/subgid)"
  "${buildah[@]}" add "$container" "$work/folder.tar" / >/dev/null
  "${buildah[@]}" config --env "PATH=$image_path" --workingdir / "$container"
  "${buildah[@]}" commit --quiet "$container" "$name" >/dev/null
  "${buildah[@]}" rm "$container" >/dev/null
  container=""
  rm -f "$work/folder.tar"
}

# --dockerfile-bases: stand-ins for the Dockerfile's base images, so that
# its `build` and `runtime` stages run offline (deploy/README.md, "Recipe
# 2"). Each is this machine's busybox and gdn's libraries with the
# commands of deploy/image/stand-ins: a `cargo` that compiles nothing and
# puts the given binary where `cargo build --release` would, and an
# `apt-get` that installs only the packages it carries (tini and the CA
# certificates, from this machine), beside `groupadd`, `useradd` and
# `install` for what the runtime stage's RUN asks of them.
if $bases; then
  stand_ins="$repo/deploy/image/stand-ins"
  rust_image="localhost/goondan/stand-in-rust:$version"
  debian_image="localhost/goondan/stand-in-debian:$version"

  rust_root="$work/rust"
  mkdir -p "$rust_root/usr/local/bin" "$rust_root/usr/share/goondan-stand-in"
  cp "$stand_ins/cargo" "$rust_root/usr/local/bin/cargo"
  cp "$gdn" "$rust_root/usr/share/goondan-stand-in/gdn"
  stage_system "$rust_root"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rust_root/etc/passwd"
  printf 'root:x:0:\n' >"$rust_root/etc/group"
  commit_folder "$rust_root" "$rust_image"

  debian_root="$work/debian"
  packages="$debian_root/usr/share/goondan-stand-in"
  mkdir -p "$debian_root/usr/bin" "$debian_root/usr/sbin" "$packages" "$work/tini/usr/bin" "$work/ca/etc/ssl/certs"
  cp "$stand_ins/apt-get" "$debian_root/usr/bin/apt-get"
  cp "$stand_ins/install" "$debian_root/usr/bin/install"
  cp "$stand_ins/groupadd" "$stand_ins/useradd" "$debian_root/usr/sbin/"
  chmod 755 "$rust_root/usr/local/bin/cargo" "$debian_root/usr/bin/apt-get" "$debian_root/usr/bin/install" \
    "$debian_root/usr/sbin/groupadd" "$debian_root/usr/sbin/useradd"
  cp "$tini" "$work/tini/usr/bin/tini"
  tar --create --file "$packages/tini.tar" --directory "$work/tini" --owner=0 --group=0 --numeric-owner .
  cp -L "$ca_bundle" "$work/ca/etc/ssl/certs/ca-certificates.crt"
  tar --create --file "$packages/ca-certificates.tar" --directory "$work/ca" --owner=0 --group=0 --numeric-owner .
  stage_system "$debian_root"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$debian_root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$debian_root/etc/group"
  commit_folder "$debian_root" "$debian_image"

  echo "built the Dockerfile's stand-in bases from scratch around $gdn ($version_line)" >&2
  # The build arguments, one a line, for `buildah build --build-arg`.
  echo "RUST_IMAGE=$rust_image"
  echo "DEBIAN_IMAGE=$debian_image"
  exit 0
fi

# --check-only checks an image built elsewhere (the Dockerfile's): nothing
# is built.
if ! $check_only; then
# The root file system, staged in a folder, then packed in one tar whose
# entries carry their owners: root for everything but the two folders the
# user writes.
rootfs="$work/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/bin" "$rootfs/etc/ssl/certs" \
  "$rootfs$state_root" "$rootfs$image_home" "$rootfs$workdir"
cp "$gdn" "$rootfs/usr/local/bin/gdn"
stage_system "$rootfs"
cp "$tini" "$rootfs/usr/bin/tini"
cp -L "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/sh
goondan:x:${image_user%%:*}:${image_user##*:}:goondan:$image_home:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
goondan:x:${image_user##*:}:
nogroup:x:65534:
EOF

tar --create --file "$work/rootfs.tar" --directory "$rootfs" --sort=name \
  --owner=0 --group=0 --numeric-owner \
  --exclude "./${state_root#/}" --exclude "./${image_home#/}" .
tar --append --file "$work/rootfs.tar" --directory "$rootfs" \
  --owner="${image_user%%:*}" --group="${image_user##*:}" --numeric-owner \
  "./${state_root#/}" "./${image_home#/}"

echo "building $tag from scratch around $gdn ($version_line)" >&2
container="$("${buildah[@]}" from scratch)" ||
  fail "buildah could not start a container" "run as root, or give this user subordinate ids for rootless buildah (/etc/subuid, /etc/subgid)"
"${buildah[@]}" add "$container" "$work/rootfs.tar" / >/dev/null
"${buildah[@]}" config \
  --entrypoint "$entrypoint" \
  --cmd '["--help"]' \
  --user "$image_user" \
  --workingdir "$workdir" \
  --env "PATH=$image_path" \
  --env "GOONDAN_STATE_ROOT=$state_root" \
  --env "HOME=$image_home" \
  --volume "$state_root" \
  --label "org.opencontainers.image.title=gdn" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.description=Goondan: a declarative runtime for LLM agent swarms" \
  "$container"
"${buildah[@]}" commit --quiet "$container" "$tag" >/dev/null
"${buildah[@]}" rm "$container" >/dev/null
container=""
size="$("${buildah[@]}" images --format '{{.Size}}' "$tag" | head -n 1)"
echo "built $tag ($size)" >&2
fi

if [ -n "$archive" ]; then
  rm -f "$archive"
  "${buildah[@]}" push --quiet "$tag" "oci-archive:$archive:$tag"
  echo "wrote $archive ($(stat -c %s "$archive") bytes, an OCI archive)" >&2
fi

if $check; then
  container="$("${buildah[@]}" from "$tag")"
  # Each command writes its stdout and stderr to files in a folder mounted
  # from here: under chroot isolation `buildah run` now and then loses a
  # short-lived command's stdout (buildah 1.28: 1 run in 30 here).
  check_out="$work/check-out"
  mkdir "$check_out"
  chmod 0777 "$check_out"
  in_image() {
    rm -f "$check_out/stdout" "$check_out/stderr"
    "${buildah[@]}" run --isolation "$isolation" --env TINI_SUBREAPER=1 \
      --volume "$check_out:/check-out" "$container" -- \
      /bin/sh -c 'exec "$@" >/check-out/stdout 2>/check-out/stderr' sh "$@"
  }
  # `buildah run` runs a command, not the image's entrypoint: the check runs
  # the entrypoint's words itself. Chroot isolation gives no PID namespace,
  # so tini is not PID 1 there; as a subreaper (TINI_SUBREAPER) it reaps
  # all the same.
  run_entrypoint() {
    # shellcheck disable=SC2046 # the entrypoint's words, without quotes or commas
    in_image $(echo "$entrypoint" | tr -d '[],"') "$@"
  }
  # What a failed command printed, then the failure.
  fail_in_image() {
    cat "$check_out/stdout" "$check_out/stderr" >&2 2>/dev/null || true
    fail "$1 (its output is above)"
  }

  in_image id -u || fail_in_image "id -u failed inside $tag"
  uid="$(cat "$check_out/stdout")"
  [ "$uid" = "${image_user%%:*}" ] || fail "a container of $tag runs as uid $uid, not ${image_user%%:*}"

  run_entrypoint --version || fail_in_image "gdn --version failed inside $tag"
  got="$(cat "$check_out/stdout")"
  [ "$got" = "$version_line" ] || fail "gdn --version inside $tag printed '$got', not '$version_line'"
  echo "check: $got inside the image, as uid $uid" >&2

  "${buildah[@]}" copy "$container" "$repo/examples/two-agents" "$workdir" >/dev/null
  run_entrypoint run --input "What is Goondan?" ||
    fail_in_image "the scripted Turn of examples/two-agents failed inside $tag"
  answer="$(cat "$check_out/stdout")"
  case "$answer" in
    *"The researcher says: Notes: Goondan runs one process per agent instance"*) ;;
    *) fail_in_image "the scripted Turn of examples/two-agents inside $tag did not answer with the researcher's notes" ;;
  esac
  echo "check: a scripted Turn of examples/two-agents inside the image answered: $answer" >&2

  "${buildah[@]}" copy "$container" "$repo/deploy/image/shell-check" /checks/shell >/dev/null
  # The bash tool runs its commands with the image's /bin/sh, which expands
  # this $(id -u), not this script.
  # shellcheck disable=SC2016
  shell_input='run echo "shell as $(id -u)"'
  run_entrypoint --config /checks/shell run --input "$shell_input" ||
    fail_in_image "the bash tool's Turn of deploy/image/shell-check failed inside $tag"
  answer="$(cat "$check_out/stdout")"
  case "$answer" in
    *"exit 0: shell as ${image_user%%:*}"*) ;;
    *) fail_in_image "the bash tool's Turn inside $tag did not answer 'exit 0: shell as ${image_user%%:*}'" ;;
  esac
  echo "check: a bash tool call inside the image answered: $answer" >&2
fi
