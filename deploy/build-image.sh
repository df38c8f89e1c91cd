#!/usr/bin/env bash
# Builds tnmt's OCI images from deploy/Dockerfile and deploy/Dockerfile.gpu with buildah, on a
# Debian 12 machine with no container registry: the debian:12 base image is made locally with
# debootstrap from the Debian mirror this machine's apt uses. Run as root from anywhere:
#   deploy/build-image.sh cpu     # -> tnmt:latest (the default)
#   deploy/build-image.sh gpu     # -> tnmt-gpu:latest and tnmt-train-gpu:latest (--config=cuda)
#   deploy/build-image.sh all
# Extra arguments after the kind go to `buildah bud` (e.g. --no-cache, or for the GPU image
# --build-arg CUDA_SOURCE=nvidia-apt --build-arg CUDA=12-8). The Dockerfiles are plain ones:
# with Docker or Podman and a registry, `docker build -f deploy/Dockerfile -t tnmt .` builds
# the same image (deploy/k8s/README.md).
#
# Needs buildah and debootstrap (deploy/install-deps.sh installs both). Images are kept in
# buildah's local storage (/var/lib/containers/storage) with the vfs driver and chroot
# isolation, which need neither a daemon, nor fuse, nor user namespaces. Layers are cached
# (--layers) and Bazel's output base is a cache mount, so a rebuild compiles only what changed
# (the first build compiles tnmt in full: about 15 min for the CPU image on 2 cores); images an
# earlier build left behind are removed afterwards (vfs stores every layer as a full copy). Steps
# inside the build share this machine's network (apt reaches the Debian mirror the host uses).
# Use the images:
#   buildah --storage-driver vfs images                                  # names and sizes
#   ctr=$(buildah --storage-driver vfs from tnmt:latest)                 # serve on this host's
#   buildah --storage-driver vfs run --isolation chroot "$ctr" -- /usr/local/bin/tnmt serve
#                                                   # network (:50051, :8080) as user tnmt; then
#   buildah --storage-driver vfs rm "$ctr"
#   buildah --storage-driver vfs push tnmt:latest docker-daemon:tnmt:latest   # into Docker
#   buildah --storage-driver vfs push tnmt:latest oci-archive:tnmt.tar        # a file, e.g. for
#                                                    # `ctr -n k8s.io images import tnmt.tar`
# Environment: STORAGE_DRIVER (vfs); TNMT_DEBIAN_MIRROR (the Debian archive for debootstrap and
# the base image's apt; default: the first bookworm entry of /etc/apt/sources.list*, else
# http://deb.debian.org/debian); TNMT_CA_BUNDLE (CA certificates for pip in the GPU build,
# default /etc/ssl/certs/ca-certificates.crt, for a TLS-intercepting proxy).
set -euo pipefail

repo="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
kind="${1:-cpu}"
(($# > 0)) && shift
case "$kind" in
  cpu | gpu | all) ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) echo "build-image: unknown kind '$kind' (cpu, gpu, all)" >&2; exit 2 ;;
esac
if [[ $(id -u) -ne 0 ]]; then
  echo "build-image: run as root (buildah with chroot isolation and debootstrap need it)" >&2
  exit 1
fi
export PATH="$PATH:/usr/sbin:/sbin"  # debootstrap
for tool in buildah debootstrap flock; do
  if ! command -v "$tool" > /dev/null; then
    echo "build-image: $tool is not installed; run deploy/install-deps.sh" >&2
    exit 1
  fi
done
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
export BUILDAH_ISOLATION=chroot
bh() { buildah --storage-driver "$STORAGE_DRIVER" "$@"; }

# The Debian archive and security URLs this machine's apt uses (one-line or deb822 format).
apt_uri() {  # apt_uri SUITE -> first URI serving SUITE
  local suite=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
           /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    awk -v want="$suite" '
      FNR == 1 { types = ""; uris = ""; suites = "" }
      # one-line format: deb [options] URI SUITE COMPONENT...
      /^[[:space:]]*deb[[:space:]]/ {
        sub(/\[[^]]*\][[:space:]]*/, "")
        if ($3 == want) { print $2; exit }
        next
      }
      # deb822 format: stanzas separated by blank lines
      function match_stanza() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " want " ")) {
          split(uris, u, " "); print u[1]; return 1
        }
        return 0
      }
      /^[[:space:]]*$/ { if (match_stanza()) exit; types = ""; uris = ""; suites = ""; next }
      /^Types:/ { $1 = ""; types = $0 }
      /^URIs:/ { $1 = ""; uris = $0; sub(/^ +/, "", uris) }
      /^Suites:/ { $1 = ""; suites = $0 }
      END { match_stanza() }
    ' "$f" | head -n 1
  done | head -n 1
}

# The base image a Dockerfile starts from, made with debootstrap when it is not in local
# storage. Only Debian 12 can be made here; any other base must already be present.
ensure_base() {
  local name=$1 ref suite
  case "$name" in
    debian:12 | debian:bookworm) suite=bookworm ref="docker.io/library/$name" ;;
    *)
      if bh inspect --type image "$name" > /dev/null 2>&1; then return 0; fi
      echo "build-image: base image $name is not in local storage and cannot be made here" >&2
      return 1 ;;
  esac
  if bh inspect --type image "$ref" > /dev/null 2>&1; then return 0; fi
  local mirror security
  mirror="${TNMT_DEBIAN_MIRROR:-$(apt_uri "$suite")}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  security="$(apt_uri "$suite-security")"
  security="${security:-http://deb.debian.org/debian-security}"
  echo "build-image: making $ref with debootstrap ($suite from $mirror)"
  local start=$SECONDS ctr mnt
  ctr=$(bh from scratch)
  mnt=$(bh mount "$ctr")
  if ! debootstrap --variant=minbase "$suite" "$mnt" "$mirror" > "$mnt.debootstrap.log" 2>&1; then
    tail -n 30 "$mnt.debootstrap.log" >&2
    echo "build-image: debootstrap failed (log above)" >&2
    bh umount "$ctr" > /dev/null; bh rm "$ctr" > /dev/null
    return 1
  fi
  rm -f "$mnt.debootstrap.log"
  # As Debian's official image: deb822 sources, no package lists or caches, apt cleans up.
  rm -f "$mnt/etc/apt/sources.list"
  cat > "$mnt/etc/apt/sources.list.d/debian.sources" << EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "$mnt/etc/apt/apt.conf.d/docker-clean" << 'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/cache/apt/archives/*.deb \
    "$mnt"/var/log/*.log "$mnt"/var/log/apt/* "$mnt"/tmp/* "$mnt"/root/.bash_history
  : > "$mnt/etc/hostname"
  bh umount "$ctr" > /dev/null
  bh config --os linux --arch amd64 --cmd '["bash"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  bh commit --quiet --rm "$ctr" "$ref" > /dev/null
  echo "build-image: made $ref in $((SECONDS - start)) s"
}

# Which images each tag's last build used (for prune), and the lock.
state=/var/lib/containers/tnmt-build-image

# build DOCKERFILE TAG [--target STAGE] [buildah bud args...]
build() {
  local dockerfile=$1 tag=$2 base
  shift 2
  # Every base the Dockerfile's stages start FROM that is not one of its own stages.
  for base in $(awk 'toupper($1) == "FROM" { img = $2; if (!(img in stage)) print img;
                       if (toupper($3) == "AS") stage[$4] = 1 }' "$repo/$dockerfile" | sort -u); do
    ensure_base "$base"
  done
  echo "build-image: building $tag from $dockerfile"
  local start=$SECONDS log rc
  log=$(mktemp)
  # docker format: OCI image configs have no HEALTHCHECK.
  (cd "$repo" && bh bud --isolation chroot --layers --force-rm --pull=never --format docker \
    --ignorefile "$dockerfile.dockerignore" -f "$dockerfile" -t "$tag" "$@" .) 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    rm -f "$log"
    echo "build-image: building $tag failed (exit status $rc)" >&2
    return "$rc"
  fi
  echo "build-image: built $tag in $((SECONDS - start)) s"
  # The images of this build's steps (built or taken from the cache) are the cache of the next.
  mkdir -p "$state"
  sed -nE 's/^--> (Using cache )?([0-9a-f]{11})[0-9a-f]*$/\2/p; s/^([0-9a-f]{11})[0-9a-f]{53}$/\1/p' \
    "$log" | sort -u > "$state/${tag//[:\/]/_}.ids"
  rm -f "$log"
}

# With the vfs driver every layer is a full copy of its file system, so the images an earlier
# build left behind (its steps' cache and the image a tag pointed to before) are removed: only
# tagged images and the steps of the last build of each tag stay.
prune() {
  local keep id ids=()
  keep=$(cat "$state"/*.ids 2> /dev/null | sort -u)
  for id in $(bh images -a --format '{{.ID}} {{.Name}}' | awk '$2 == "<none>" { print $1 }'); do
    grep -qx "${id:0:11}" <<< "$keep" || ids+=("$id")
  done
  # An image whose children are still there cannot go yet: a few passes, children first.
  for _ in 1 2 3 4 5; do
    ((${#ids[@]} == 0)) && break
    local left=()
    for id in "${ids[@]}"; do bh rmi "$id" > /dev/null 2>&1 || left+=("$id"); done
    ids=("${left[@]}")
  done
  ((${#ids[@]} == 0)) || echo "build-image: could not remove ${#ids[@]} old image(s)" >&2
}

main() {
  local args=("$@") ca_bundle gpu_args=() t0
  # The system's CA bundle as the GPU build's optional secret ca-bundle, for pip behind a
  # TLS-intercepting proxy (it holds the same public CAs otherwise).
  ca_bundle="${TNMT_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
  [[ -s $ca_bundle ]] && gpu_args+=(--secret "id=ca-bundle,src=$ca_bundle")

  # One build-image.sh at a time: prune must not remove the steps of a build still running.
  mkdir -p "$state"
  exec 9> "$state/lock"
  if ! flock -n 9; then
    echo "build-image: waiting for another deploy/build-image.sh to finish"
    flock 9
  fi
  t0=$SECONDS
  if [[ $kind == cpu || $kind == all ]]; then
    build deploy/Dockerfile tnmt:latest "${args[@]}"
  fi
  if [[ $kind == gpu || $kind == all ]]; then
    build deploy/Dockerfile.gpu tnmt-gpu:latest --target serve "${gpu_args[@]}" "${args[@]}"
    build deploy/Dockerfile.gpu tnmt-train-gpu:latest --target train "${gpu_args[@]}" "${args[@]}"
  fi
  prune
  echo "build-image: done in $((SECONDS - t0)) s"
  bh images --filter reference='localhost/tnmt*'
}

# Parsed whole before it runs, so that editing this file during a build cannot change it.
main "$@"
exit
