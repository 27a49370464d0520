#!/usr/bin/env bash
# build.sh [cpu|gpu] [docker build options...]: build an image with plain `docker build`, passing
# every pinned version from docker/versions.env as a build argument (compose does the same).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flavor=${1:-cpu}
shift || true
case "$flavor" in
    cpu) file=docker/Dockerfile ;;
    gpu) file=docker/Dockerfile.gpu ;;
    *) echo "build.sh: flavor must be cpu or gpu" >&2; exit 2 ;;
esac
args=()
while IFS='=' read -r key value; do
    [[ -z "$key" || "$key" == \#* ]] && continue
    args+=(--build-arg "$key=$value")
done <"$root/docker/versions.env"
exec docker build -f "$root/$file" -t "horovod-huffman:$flavor" "${args[@]}" "$@" "$root"
